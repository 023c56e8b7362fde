package settleotel

import _ "embed"

// Dashboard is a Grafana dashboard (JSON) over settleotel's metrics as the OpenTelemetry
// Prometheus exporter renders them: deliveries, settlements by action, dead letters and
// losses, failed settlements, handler and settlement durations, attempts, in flight,
// backlog and lag, pending and its oldest idle, delays and their lateness, dead letters
// waiting, inbox leases, claims, failed reads, flow-limit waits and the limits' state,
// with a mount variable. Import it in Grafana, or write it out: the file is
// settleotel/dashboard.json.
//
//go:embed dashboard.json
var Dashboard []byte
