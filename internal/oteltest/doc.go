// Package oteltest holds settleotel's tests that run settle's transports end to end,
// the SQL inbox's among them: a module of its own, so that the SQLite driver those tests
// need stays out of settleotel's go.mod, and so out of the go.sum of every service that
// imports settleotel (go mod tidy keeps the checksums a go test of an imported package
// needs).
package oteltest
