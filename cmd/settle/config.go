package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"   // the MySQL/MariaDB driver of --dsn user@tcp(host:port)/db
	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL driver of --dsn postgres://…
	"github.com/spf13/cobra"
	_ "modernc.org/sqlite" // the SQLite driver of --dsn file:… or a .db/.sqlite path

	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/inbox"
)

// EnvDSN names the environment variable read when --dsn is not given.
const EnvDSN = "SETTLE_DSN"

// fileConfig is the config file --config names: which keys belong together. Its Redis
// mounts (each a stream and its group, or a list, with its delay set and dead letter)
// and its inboxes (SQL tables, each with its table spec, its groups and dead letters),
// and where to connect: a URL or DSN given there is used when neither the flag nor the
// environment variable names one (see redisTarget and sqlFlags.spec).
//
//	{
//	  "redis": "redis://127.0.0.1:6379/0",
//	  "mounts": [{
//	    "name": "refunds", "kind": "stream", "key": "{refunds}", "group": "refunds",
//	    "delayed": "{refunds}.delayed", "dead_letter": "{refunds}.dlq"
//	  }],
//	  "dsn": "postgres://app@db:5432/app",
//	  "inboxes": [{
//	    "name": "mailer",
//	    "table": {"name": "mail_jobs", "id": "id", "group": "name", "attempt": "attempt",
//	              "retry_after": "retry_after", "locked_until": "locked_until", "payload": "payload"},
//	    "groups": ["emails"],
//	    "dead": ["emails.dead"]
//	  }]
//	}
type fileConfig struct {
	DSN     string        `json:"dsn"`
	Inboxes []inboxConfig `json:"inboxes"`
	Mounts  []mountConfig `json:"mounts"`
	Redis   string        `json:"redis"`
}

// mountConfig is one Redis mount of the config file: the keys one settle mount reads
// and writes.
type mountConfig struct {
	// DeadLetter names its dead letter: a dead-letter stream for a stream kind, a
	// dead-letter list for a list kind, the name given to settle.DeadLetter for a
	// partitioned stream (each partition's copy is counted) ("": none).
	DeadLetter string `json:"dead_letter"`
	// Delayed names its durable delay set ("": none).
	Delayed string `json:"delayed"`
	// Group names the consumer group of a stream kind or a partitioned stream (required
	// there; a list has none).
	Group string `json:"group"`
	// Key names the stream or the list, or a partitioned stream's name as given to
	// settle.PartitionedStream (required).
	Key string `json:"key"`
	// Kind is one of the mount kinds (mountKinds).
	Kind string `json:"kind"`
	// Limits are its flow limits as its App declares them, in the same order (their
	// state in Redis is named by kind and rank): stats shows how much of each is used.
	Limits []limitConfig `json:"limits"`
	// Name names the mount for --mount (defaults to its key).
	Name string `json:"name"`
	// Replies name the streams its handlers reply to (settle find looks there).
	Replies []string `json:"replies"`
}

// limitConfig is one flow limit of a mount of the config file:
// {"kind": "rate", "n": 50, "per": "1s", "burst": 5}, {"kind": "concurrency-by", "n": 1}.
type limitConfig struct {
	// Burst is a rate limit's LimitBurst (defaults to 1).
	Burst int `json:"burst"`
	// Kind is rate, rate-by, concurrency-by or global-concurrency (settle's RateLimit,
	// RateLimitBy, ConcurrencyBy, GlobalConcurrency).
	Kind string `json:"kind"`
	// N is a rate limit's starts per Per, or a concurrency limit's slots.
	N int `json:"n"`
	// Per is a rate limit's period, a Go duration ("1s", "1m").
	Per string `json:"per"`
}

// limitKinds are the kinds a flow limit may be.
var limitKinds = []string{admin.LimitRate, admin.LimitRateBy, admin.LimitConcurrencyBy, admin.LimitGlobalConcurrency}

// flowLimits returns mc's limits for admin.Inspector.Limits, or an error naming the
// first one that is wrong.
func (mc mountConfig) flowLimits() ([]admin.FlowLimit, error) {
	var out []admin.FlowLimit
	for k, lc := range mc.Limits {
		l := admin.FlowLimit{Burst: max(lc.Burst, 1), Kind: lc.Kind, N: lc.N}
		rate := lc.Kind == admin.LimitRate || lc.Kind == admin.LimitRateBy
		switch {
		case !slices.Contains(limitKinds, lc.Kind):
			return nil, fmt.Errorf("limit %d: unknown kind %q (one of %s)", k+1, lc.Kind, strings.Join(limitKinds, ", "))
		case lc.N < 1:
			return nil, fmt.Errorf("limit %d (%s): n is %d; it must be at least 1", k+1, lc.Kind, lc.N)
		case rate:
			per, err := time.ParseDuration(lc.Per)
			if err != nil || per <= 0 {
				return nil, fmt.Errorf("limit %d (%s): per %q: give a positive Go duration (\"1s\")", k+1, lc.Kind, lc.Per)
			}
			l.Per = per
		case lc.Per != "":
			return nil, fmt.Errorf("limit %d (%s): a concurrency limit has no period (got %q)", k+1, lc.Kind, lc.Per)
		}
		out = append(out, l)
	}
	if len(out) > 0 && mc.Kind == mountList {
		return nil, fmt.Errorf("a list takes no flow limits (settle refuses them there)")
	}
	return out, nil
}

// The kinds of mount a config file names, as settle's constructors do.
const (
	mountClaimingStream = "claiming-stream"
	mountList           = "list"
	mountPartitioned    = "partitioned-stream"
	mountReliableList   = "reliable-list"
	mountStream         = "stream"
)

// mountKinds are the kinds a mount may be, for the error that names an unknown one.
var mountKinds = []string{mountStream, mountClaimingStream, mountPartitioned, mountList, mountReliableList}

// isStream reports whether the mount reads a stream's consumer group.
func (mc mountConfig) isStream() bool {
	return mc.Kind == mountStream || mc.Kind == mountClaimingStream
}

// hasGroup reports whether the mount reads through a consumer group: a stream kind or
// a partitioned stream.
func (mc mountConfig) hasGroup() bool {
	return mc.isStream() || mc.Kind == mountPartitioned
}

// loadConfig reads and checks the config file path: unknown fields, a mount without a
// key, of an unknown kind, a stream without its group or a list with one, and two
// mounts of one name are refused, naming them. A mount without a name is named by its
// key.
func loadConfig(path string) (*fileConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var fc fileConfig
	if err := dec.Decode(&fc); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	seen := map[string]bool{}
	for k := range fc.Mounts {
		mc := &fc.Mounts[k]
		what := fmt.Sprintf("mount %d", k+1)
		if mc.Name != "" {
			what = fmt.Sprintf("mount %q", mc.Name)
		}
		if mc.Key == "" {
			return nil, fmt.Errorf("--config %s: %s has no key (the stream or list it reads)", path, what)
		}
		if mc.Name == "" {
			mc.Name, what = mc.Key, fmt.Sprintf("mount %q", mc.Key)
		}
		switch {
		case !slices.Contains(mountKinds, mc.Kind):
			return nil, fmt.Errorf("--config %s: %s: unknown kind %q (one of %s)", path, what, mc.Kind, strings.Join(mountKinds, ", "))
		case mc.hasGroup() && mc.Group == "":
			return nil, fmt.Errorf("--config %s: %s: a %s needs its consumer group", path, what, mc.Kind)
		case !mc.hasGroup() && mc.Group != "":
			return nil, fmt.Errorf("--config %s: %s: a %s has no consumer group (got %q)", path, what, mc.Kind, mc.Group)
		case mc.Kind == mountPartitioned && (mc.Delayed != "" || len(mc.Limits) > 0 || len(mc.Replies) > 0):
			return nil, fmt.Errorf("--config %s: %s: a %s names its partitions' keys by the name given to settle.DeadLetter only (\"dead_letter\"); delayed, limits and replies are not read for it", path, what, mc.Kind)
		case seen[mc.Name]:
			return nil, fmt.Errorf("--config %s: two mounts are named %q", path, mc.Name)
		}
		if _, err := mc.flowLimits(); err != nil {
			return nil, fmt.Errorf("--config %s: %s: %w", path, what, err)
		}
		seen[mc.Name] = true
	}
	return &fc, nil
}

// config returns the config file --config names, read and checked once; nil without
// --config.
func (a *app) config() (*fileConfig, error) {
	if a.configPath == "" || a.cfg != nil {
		return a.cfg, nil
	}
	fc, err := loadConfig(a.configPath)
	if err != nil {
		return nil, err
	}
	a.cfg = fc
	return fc, nil
}

// mount returns the mounts of fc that --mount name selects: all of them for "".
func (fc *fileConfig) mount(name, file string) ([]mountConfig, error) {
	if name == "" {
		return fc.Mounts, nil
	}
	var names []string
	for _, mc := range fc.Mounts {
		if mc.Name == name {
			return []mountConfig{mc}, nil
		}
		names = append(names, mc.Name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("--mount %q: %s names no mounts", name, file)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("--mount %q: %s names no such mount (it names %s)", name, file, strings.Join(names, ", "))
}

// inboxConfig is one inbox of the config file.
type inboxConfig struct {
	// Dead names its dead letters (dead-letter groups, or dead-letter tables).
	Dead []string `json:"dead"`
	// Groups names the groups its mounts read.
	Groups []string `json:"groups"`
	// Name names the inbox for --inbox (defaults to the table's name).
	Name  string      `json:"name"`
	Table tableConfig `json:"table"`
}

// tableConfig is inbox.Table as the config file spells it.
type tableConfig struct {
	Attempt     string `json:"attempt"`
	DeadAt      string `json:"dead_at"`
	Group       string `json:"group"`
	ID          string `json:"id"`
	LastError   string `json:"last_error"`
	LockedUntil string `json:"locked_until"`
	Name        string `json:"name"`
	Payload     string `json:"payload"`
	RetryAfter  string `json:"retry_after"`
}

// sqlFlags are the flags that say which database and which table: --dsn, --inbox and
// the table flags (which override the columns of the config file, the root's --config).
type sqlFlags struct {
	dsn   string
	inbox string
	table tableConfig
}

func (sf *sqlFlags) add(cmd *cobra.Command) {
	fs := cmd.PersistentFlags()
	fs.StringVar(&sf.dsn, "dsn", "", "database `DSN`: postgres://…, user:pass@tcp(host:port)/db, or file:….db (default $"+EnvDSN+")")
	fs.StringVar(&sf.inbox, "inbox", "", "the inbox of the config file to act on, by `NAME` (needed when it names more than one)")
	fs.StringVar(&sf.table.Name, "table", "", "the inbox table `NAME` (optionally schema-qualified)")
	fs.StringVar(&sf.table.ID, "id-column", "", "the table's id `COLUMN` (default id)")
	fs.StringVar(&sf.table.Group, "group", "", "the table's group `COLUMN` (none: one queue, dead letters in a dead-letter table)")
	fs.StringVar(&sf.table.Attempt, "attempt", "", "the table's attempt `COLUMN` (none: every row reads attempt 1)")
	fs.StringVar(&sf.table.RetryAfter, "retry-after", "", "the table's retry-after `COLUMN` (none: every row not leased is due)")
	fs.StringVar(&sf.table.LockedUntil, "locked-until", "", "the table's lease `COLUMN` (default locked_until)")
	fs.StringVar(&sf.table.Payload, "payload", "", "the table's payload `COLUMN` (default payload)")
	fs.StringVar(&sf.table.LastError, "last-error", "", "the table's last-error `COLUMN` (none: --error is refused)")
	fs.StringVar(&sf.table.DeadAt, "dead-at", "", "the table's dead-at `COLUMN` (none: --since and --until are refused)")
}

// spec returns the inbox the flags and the config file fc (read from path; nil
// without --config) name, the DSN to use and where it came from.
func (sf *sqlFlags) spec(fc *fileConfig, path string) (ic inboxConfig, dsn, from string, err error) {
	if fc != nil {
		if ic, err = fc.pick(sf.inbox, path); err != nil {
			return ic, "", "", err
		}
	} else if sf.inbox != "" {
		return ic, "", "", errors.New("--inbox needs --config: the inboxes are named in the config file")
	}
	t := &ic.Table
	for _, o := range []struct {
		dst *string
		v   string
	}{
		{&t.Attempt, sf.table.Attempt}, {&t.DeadAt, sf.table.DeadAt}, {&t.Group, sf.table.Group},
		{&t.ID, sf.table.ID}, {&t.LastError, sf.table.LastError}, {&t.LockedUntil, sf.table.LockedUntil},
		{&t.Name, sf.table.Name}, {&t.Payload, sf.table.Payload}, {&t.RetryAfter, sf.table.RetryAfter},
	} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	*t = t.withDefaults()
	if t.Name == "" {
		return ic, "", "", usagef("name the inbox table: --table NAME, or --config FILE")
	}
	if dsn, from, err = resolveDSN(sf.dsn, fc, path); err != nil {
		return ic, "", "", err
	}
	return ic, dsn, from, nil
}

// resolveDSN returns the DSN to use and where it came from: the flag's, else
// $SETTLE_DSN, else the "dsn" of the config file fc (nil without one), the one rule of
// redisTarget.
func resolveDSN(flag string, fc *fileConfig, path string) (dsn, from string, err error) {
	switch {
	case flag != "":
		return flag, "--dsn", nil
	case os.Getenv(EnvDSN) != "":
		return os.Getenv(EnvDSN), EnvDSN, nil
	case fc != nil && fc.DSN != "":
		return fc.DSN, "the dsn of " + path, nil
	}
	return "", "", usagef("name the database: --dsn DSN, $%s, or \"dsn\" in --config", EnvDSN)
}

// pick returns the inbox of fc named name ("" when fc names one only).
func (fc *fileConfig) pick(name, file string) (inboxConfig, error) {
	var names []string
	for _, ic := range fc.Inboxes {
		n := ic.Name
		if n == "" {
			n = ic.Table.Name
		}
		if name == "" && len(fc.Inboxes) == 1 || n == name {
			return ic, nil
		}
		names = append(names, n)
	}
	sort.Strings(names)
	switch {
	case len(fc.Inboxes) == 0:
		return inboxConfig{}, fmt.Errorf("--config %s names no inboxes", file)
	case name == "":
		return inboxConfig{}, fmt.Errorf("--config %s names %d inboxes (%s): choose one with --inbox NAME", file, len(names), strings.Join(names, ", "))
	}
	return inboxConfig{}, fmt.Errorf("--inbox %q: %s names no such inbox (it names %s)", name, file, strings.Join(names, ", "))
}

// withDefaults is tc with the columns that have a default named: id, locked_until and
// payload.
func (tc tableConfig) withDefaults() tableConfig {
	for _, d := range []struct {
		dst *string
		v   string
	}{{&tc.ID, "id"}, {&tc.LockedUntil, "locked_until"}, {&tc.Payload, "payload"}} {
		if *d.dst == "" {
			*d.dst = d.v
		}
	}
	return tc
}

// inboxTable is the inbox.Table of tc.
func (tc tableConfig) inboxTable() inbox.Table {
	return inbox.Table{
		Attempt: tc.Attempt, DeadAt: tc.DeadAt, Group: tc.Group, ID: tc.ID, LastError: tc.LastError,
		LockedUntil: tc.LockedUntil, Name: tc.Name, Payload: tc.Payload, RetryAfter: tc.RetryAfter,
	}
}

// keywordDSN is a PostgreSQL keyword/value DSN ("host=db user=app dbname=app").
var keywordDSN = regexp.MustCompile(`^\s*[a-z_]+\s*=`)

// openSQL opens the database dsn names and returns its inbox dialect: postgres://,
// postgresql:// or a keyword/value DSN ("host=db dbname=app") is PostgreSQL (pgx), file:… or a path ending .db, .sqlite or .sqlite3
// SQLite (modernc.org/sqlite; the file must exist), anything else MySQL/MariaDB
// (go-sql-driver/mysql, with parseTime=true added). It checks that the database answers.
func openSQL(ctx context.Context, dsn, from string) (*sql.DB, inbox.Dialect, error) {
	shown := safe(dsn) // before parameters are added; remembers its secrets for scrub
	var driver string
	var d inbox.Dialect
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"), keywordDSN.MatchString(dsn):
		driver, d = "pgx", inbox.Postgres
	case isSQLite(dsn):
		path := strings.TrimPrefix(dsn, "file:")
		path, _, _ = strings.Cut(path, "?")
		if _, err := os.Stat(path); err != nil {
			return nil, nil, fmt.Errorf("no SQLite database at %s (%s): %w", path, from, err)
		}
		if !strings.HasPrefix(dsn, "file:") {
			dsn = "file:" + dsn
		}
		if !strings.Contains(dsn, "busy_timeout") {
			dsn += sep(dsn) + "_pragma=busy_timeout(5000)"
		}
		driver, d = "sqlite", inbox.SQLite
	default:
		if !strings.Contains(dsn, "parseTime") {
			dsn += sep(dsn) + "parseTime=true"
		}
		driver, d = "mysql", inbox.MySQL
		_ = mysql.SetLogger(log.New(io.Discard, "", 0)) // its errors come back to us, and are reported once
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %q: %s", from, shown, scrub(err.Error()))
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("cannot connect to the database at %s (%s): %s", shown, from, scrub(err.Error()))
	}
	return db, d, nil
}

func isSQLite(dsn string) bool {
	path, _, _ := strings.Cut(dsn, "?")
	if strings.HasPrefix(path, "file:") {
		return true
	}
	for _, ext := range []string{".db", ".sqlite", ".sqlite3"} {
		if strings.HasSuffix(path, ext) {
			return true
		}
	}
	return false
}

// sep is the separator before one more DSN parameter.
func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}
