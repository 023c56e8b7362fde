package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/redact"
)

// EnvRedisURL names the environment variable read when --redis is not given.
const EnvRedisURL = "SETTLE_REDIS_URL"

// defaultRedisURL is the Redis used when neither --redis nor SETTLE_REDIS_URL is given.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// connectTimeout bounds the first PING.
const connectTimeout = 5 * time.Second

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a command line that does not parse: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// app is one run of the command: its streams, its flags, its connection.
type app struct {
	cfg        *fileConfig // read from configPath by config
	cluster    bool
	configPath string
	insp       *admin.Inspector
	json       bool
	rdb        redis.UniversalClient
	redisURL   string
	stderr     io.Writer
	stdin      io.Reader
	stdinTTY   bool
	stdout     io.Writer
}

// run runs the command line args and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stderr: stderr, stdin: stdin, stdout: stdout, stdinTTY: isTerminal(stdin)}
	defer a.close()
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "settle: %s\n", scrub(err.Error()))
	if errors.As(err, new(usageError)) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitError
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:     "settle",
		Version: version(),
		Short:   "Inspect and act on what settle holds in Redis and in SQL inboxes",
		Long: `settle shows what settle holds in Redis (dead letters, consumer groups and their
pending entries, delay sets) and in SQL inboxes (settle inbox: groups and dead rows), and acts
on it (replay, purge, export, import, release, dead-letter, promote, cancel, prune, seek),
through the settle/admin API and the inbox's operator methods.

The key a command acts on is its first argument, e.g.
  settle dlq ls '{refunds}.dlq'
  settle pending ls '{refunds}' refunds

Connection: --redis URL, else $` + EnvRedisURL + `, else $` + EnvRedisCluster + ` (a cluster's
nodes), else the "redis" of --config, else ` + defaultRedisURL + ` (one rule: the
flag, the environment, the config file, the default; the inbox's --dsn alike). A Redis
Cluster: --cluster, or a comma-separated list of nodes (--redis 127.0.0.1:7001,127.0.0.1:7002);
replays then refuse a destination in another hash slot.
Config: --config FILE (JSON) names which keys belong together, e.g.
  {"redis": "redis://127.0.0.1:6379/0",
   "mounts": [{"name": "refunds", "kind": "stream", "key": "{refunds}", "group": "refunds",
               "delayed": "{refunds}.delayed", "dead_letter": "{refunds}.dlq"}],
   "dsn": "…", "inboxes": [{"name": "mailer", "table": {…}, "groups": […], "dead": […]}]}
A mount's kind is stream, claiming-stream, partitioned-stream (key: the name given to
settle.PartitionedStream, dead_letter: the name given to settle.DeadLetter), list or
reliable-list; "settle stats --config FILE" shows every mount and inbox group of it,
--mount NAME one mount. A mount's "limits"
(its App's flow limits, in order: {"kind": "rate"|"rate-by", "n": 50, "per": "1s",
"burst": 1} or {"kind": "concurrency-by"|"global-concurrency", "n": 1}) are shown by stats.
Output: tables for a person; --json prints JSON (one object per line for lists).

Actions that change what is stored (dlq replay|purge|import, pending release|dead,
consumers prune, delayed promote|cancel, seek, inbox dead replay|purge) ask for
confirmation on a terminal, refuse without one unless --yes is given, and support --dry-run.

Exit codes:
  0  success
  1  an error: refused input (a missing key, a key of the wrong type, an id not found,
     a regexp or time that does not parse, a destination in another cluster slot, no
     confirmation) or a Redis failure
  2  a usage error: an unknown command or flag, a wrong number of arguments, a flag
     value of the wrong type`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          groupArgs,
		RunE:          groupRun,
	}
	root.PersistentFlags().StringVar(&a.redisURL, "redis", "", "Redis URL (default $"+EnvRedisURL+", else "+defaultRedisURL+")")
	root.PersistentFlags().BoolVar(&a.cluster, "cluster", false, "connect to a Redis Cluster: --redis names seed nodes (comma-separated addresses or URLs; a comma implies --cluster)")
	root.PersistentFlags().StringVar(&a.configPath, "config", "", "a JSON config `FILE` naming which keys belong together: the Redis mounts (stream and group or list, delay set, dead letter) and the SQL inboxes")
	root.PersistentFlags().BoolVar(&a.json, "json", false, "print JSON (one object per line for lists)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.CompletionOptions.HiddenDefaultCmd = true
	root.AddCommand(a.dlqCommand(), a.pendingCommand(), a.delayedCommand(), a.statsCommand(), a.inboxCommand())
	root.AddCommand(a.consumersCommand(), a.seekCommand(), a.listCommand())
	root.AddCommand(a.pauseCommand(), a.resumeCommand(), a.webCommand(), a.findCommand(), a.partitionsCommand())
	return root
}

// group returns a command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: groupArgs, RunE: groupRun}
	c.AddCommand(subs...)
	return c
}

// groupArgs accepts anything: groupRun says what is wrong (cobra would print the help
// and exit 0 for an unknown subcommand of a subcommand).
func groupArgs(*cobra.Command, []string) error { return nil }

func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		_ = cmd.Help()
		return usagef("%s needs a subcommand", cmd.CommandPath())
	}
	return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
}

// exactArgs requires one argument per name.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s takes %d argument(s) (%s), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// connect connects to Redis (once) and checks that it answers.
func (a *app) connect(ctx context.Context) error {
	if a.insp != nil {
		return nil
	}
	fc, err := a.config()
	if err != nil {
		return err
	}
	raw, from, cluster := a.redisTarget(fc)
	known.add(redact.Secrets(raw)...)
	redis.SetLogger(quietLogger{}) // its dial errors come back to us, and are reported once
	var rdb redis.UniversalClient
	if cluster {
		c, err := newClusterClient(raw)
		if err != nil {
			return fmt.Errorf("%s %q: %w", from, safe(raw), err)
		}
		rdb = c
	} else {
		opt, err := redis.ParseURL(raw)
		if err != nil {
			return fmt.Errorf("%s %q: %w", from, safe(raw), err)
		}
		rdb = redis.NewClient(opt)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return fmt.Errorf("cannot connect to Redis at %s (%s): %s", safe(raw), from, scrub(err.Error()))
	}
	a.rdb, a.insp = rdb, admin.NewInspector(rdb)
	return nil
}

// quietLogger drops go-redis's own log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func (a *app) close() {
	if a.rdb != nil {
		_ = a.rdb.Close()
	}
}

// safe hides the passwords of a URL, a list of them or a DSN, and remembers them so
// that scrub hides them wherever they show up again (a parser's or a driver's error).
func safe(raw string) string {
	known.add(redact.Secrets(raw)...)
	return redact.DSN(raw)
}

// known are the secrets of the URLs and DSNs the command was given.
var known secretSet

type secretSet struct {
	mu   sync.Mutex
	list []string
}

func (s *secretSet) add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, secrets...)
}

// scrub returns text (an error, a log line) with every known secret hidden, and those
// of the environment's URL and DSN, and any URL's password.
func scrub(text string) string {
	known.mu.Lock()
	secrets := slices.Clone(known.list)
	known.mu.Unlock()
	for _, env := range []string{EnvRedisURL, EnvRedisCluster, EnvDSN} {
		secrets = append(secrets, redact.Secrets(os.Getenv(env))...)
	}
	return redact.Text(text, secrets...)
}

// confirm asks the person at the terminal whether to go ahead with what (a phrase like
// "replay 4 dead letters of ..."), unless yes. Without a terminal it refuses.
func (a *app) confirm(what string, yes bool) error {
	if yes {
		return nil
	}
	if !a.stdinTTY {
		return fmt.Errorf("refusing to %s without confirmation: stdin is not a terminal; give --yes to go ahead (or --dry-run to see what would change)", what)
	}
	fmt.Fprintf(a.stderr, "%s? [y/N] ", upperFirst(what))
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && line == "" {
		return fmt.Errorf("not confirmed (%v): nothing changed", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errors.New("not confirmed: nothing changed")
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// isTerminal reports whether r is a terminal (not a pipe, a file or /dev/null).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// printJSON writes v as one line of JSON.
func (a *app) printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = a.stdout.Write(b)
	return err
}

// table returns a tabwriter on stdout; Flush it.
func (a *app) table() *tabwriter.Writer {
	return tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
}

// ago formats how long before now t was, for a person ("-" for the zero time).
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.RFC3339), dur(time.Since(t)))
}

// dur formats d for a person, rounded to what matters.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// ms is a duration in milliseconds, for JSON.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// timeOrNil is a time for JSON: nil for the zero time.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
