package main

import "runtime/debug"

// version is the settle command's module version as the build recorded it: the release
// (v0.1.0, say) when installed with go install github.com/settlekit/settle/cmd/settle@v0.1.0,
// "(devel)" when built from a checkout. settle --version prints it.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
