package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/console"
	"github.com/settlekit/settle/inbox"
)

// webFlags are the flags of settle web.
type webFlags struct {
	addr       string
	allowHosts []string
	authFile   string
	dsn        string
	prefix     string
	prometheus string
	readOnly   bool
	reclaim    time.Duration
}

// EnvWebAuth names the environment variable settle web reads its credentials from
// when --auth-file is not given: a token, or user:password for basic auth.
const EnvWebAuth = "SETTLE_WEB_AUTH"

// The server's timeouts: a slow client cannot hold a connection, a page cannot be
// written for ever.
const (
	webReadTimeout  = 30 * time.Second
	webWriteTimeout = 60 * time.Second
	webIdleTimeout  = 2 * time.Minute
)

// webShutdown bounds how long settle web waits for requests in flight when it stops.
const webShutdown = 5 * time.Second

func (a *app) webCommand() *cobra.Command {
	var wf webFlags
	c := &cobra.Command{
		Use:   "web",
		Short: "Serve the web console for the mounts and inboxes of --config",
		Long: `Serve settle's web console (github.com/settlekit/settle/console) for every mount and
inbox --config names: an overview refreshing on its own, each mount's consumers, delay set
and dead letters, each partitioned stream's partitions (owner, lease, backlog) and live
members (filter, replay with a rate, purge, each confirmed first), each inbox's
groups and dead rows, pause and resume. It prints the address it serves on, then serves
until interrupted (SIGINT, SIGTERM), letting requests in flight finish.

It listens on the loopback interface by default. Credentials come from --auth-file or
$` + EnvWebAuth + ` (never a flag value, which other users of the host see): a token (a person
signs in once on the login page; a script sends "Authorization: Bearer TOKEN"), or
"user:password" for HTTP basic auth. Without credentials it refuses a non-loopback
--addr, unless --read-only (then it warns). It answers only requests whose Host is an
IP address, localhost or a name --allow-host gives (a DNS-rebinding page reaches
nothing), and refuses cross-origin POSTs. --read-only hides and refuses every action.`,
		Example: `  settle web --config settle.json --addr 127.0.0.1:8080
  SETTLE_WEB_AUTH="$(cat /run/secrets/console-token)" settle web --config settle.json --addr 0.0.0.0:8080 --allow-host console.internal
  settle web --config settle.json --read-only --prefix /settle`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.configPath == "" {
				return usagef("%s needs --config FILE naming the mounts and inboxes to show", cmd.CommandPath())
			}
			return a.web(cmd.Context(), wf)
		},
	}
	fs := c.Flags()
	fs.StringVar(&wf.addr, "addr", "127.0.0.1:8080", "the `ADDRESS` to listen on (host:port; port 0 picks a free one)")
	fs.StringArrayVar(&wf.allowHosts, "allow-host", nil, "also answer requests for this host `NAME` (repeatable; IP addresses and localhost always)")
	fs.StringVar(&wf.authFile, "auth-file", "", "read the credentials from `FILE`: a token, or user:password (default $"+EnvWebAuth+")")
	fs.StringVar(&wf.dsn, "dsn", "", "database `DSN` of the inboxes (default $"+EnvDSN+", else the dsn of --config)")
	fs.StringVar(&wf.prefix, "prefix", "", "serve the console under this `PATH` (e.g. /settle)")
	fs.StringVar(&wf.prometheus, "prometheus", "", "draw the charts from this Prometheus `URL` (settleotel's metrics, over a range the page picks) instead of the console's samples")
	fs.BoolVar(&wf.readOnly, "read-only", false, "hide every action and refuse every POST")
	fs.DurationVar(&wf.reclaim, "reclaim", 0, "the idle past which a consumer holding entries counts as dead (default settle.DefaultReclaim)")
	return c
}

// web serves the console for the mounts and inboxes of the config file until ctx ends.
func (a *app) web(ctx context.Context, wf webFlags) error {
	fc, err := a.config()
	if err != nil {
		return err
	}
	auth, err := webAuth(wf.authFile)
	if err != nil {
		return err
	}
	o := console.Options{AllowedHosts: wf.allowHosts, Auth: auth, Prefix: wf.prefix, Prometheus: wf.prometheus, ReadOnly: wf.readOnly, Logger: slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{ReplaceAttr: scrubAttr}))}
	if err := exposure(wf, auth, a.stderr); err != nil {
		return err
	}
	if len(fc.Mounts) > 0 {
		if err := a.connect(ctx); err != nil {
			return err
		}
		o.Admin = a.insp
		for _, mc := range fc.Mounts {
			if mc.Kind == mountPartitioned {
				o.Partitioned = append(o.Partitioned, console.PartitionedStream{DeadLetter: mc.DeadLetter, Group: mc.Group, Key: mc.Key, Name: mc.Name})
				continue
			}
			limits, _ := mc.flowLimits() // checked by loadConfig
			o.Mounts = append(o.Mounts, console.Mount{
				DeadLetter: mc.DeadLetter, Delayed: mc.Delayed, Group: mc.Group, Key: mc.Key,
				Kind: mc.Kind, Limits: limits, Name: mc.Name, ReclaimIdle: wf.reclaim, Replies: mc.Replies,
			})
		}
	}
	if len(fc.Inboxes) > 0 {
		dsn, from, err := resolveDSN(wf.dsn, fc, a.configPath)
		if err != nil {
			return err
		}
		db, d, err := openSQL(ctx, dsn, from)
		if err != nil {
			return err
		}
		defer db.Close()
		for _, ic := range fc.Inboxes {
			t := ic.Table.withDefaults()
			o.Inboxes = append(o.Inboxes, console.Inbox{Dead: ic.Dead, Groups: ic.Groups, Inbox: inbox.New(db, d, t.inboxTable()), Name: ic.Name})
		}
	}
	c, err := console.New(o)
	if err != nil {
		return fmt.Errorf("--config %s: %w", a.configPath, err)
	}
	ln, err := net.Listen("tcp", wf.addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", wf.addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(wf.prefix+"/", c)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: webReadTimeout,
		WriteTimeout: webWriteTimeout, IdleTimeout: webIdleTimeout}
	fmt.Fprintf(a.stdout, "settle console on http://%s%s/\n", ln.Addr(), wf.prefix)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The console samples every mount for its charts of the last hour while it serves.
	sctx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() { _ = c.Run(sctx) })
	defer sampling.Wait()
	defer stopSampling()
	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), webShutdown)
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stop serving %s: %w", ln.Addr(), err)
	}
	return nil
}

// webAuth reads the console's credentials from file, else $SETTLE_WEB_AUTH: one line,
// a token or user:password. None is the zero Auth.
func webAuth(file string) (console.Auth, error) {
	raw, from := os.Getenv(EnvWebAuth), "$"+EnvWebAuth
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return console.Auth{}, fmt.Errorf("--auth-file: %w", err)
		}
		raw, from = string(b), "--auth-file "+file
	}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		if file != "" {
			return console.Auth{}, fmt.Errorf("%s is empty: write a token, or user:password", from)
		}
		return console.Auth{}, nil
	}
	if user, pass, ok := strings.Cut(raw, ":"); ok {
		if user == "" || pass == "" {
			return console.Auth{}, fmt.Errorf("%s: user:password needs both", from)
		}
		return console.Auth{User: user, Password: pass}, nil
	}
	if len(raw) < 16 {
		return console.Auth{}, fmt.Errorf("%s: a token must be at least 16 characters (got %d)", from, len(raw))
	}
	return console.Auth{Token: raw}, nil
}

// exposure refuses to serve a console without credentials on an address other hosts
// reach, unless it is read-only (then it warns on stderr).
func exposure(wf webFlags, auth console.Auth, stderr io.Writer) error {
	if auth != (console.Auth{}) || loopback(wf.addr) {
		return nil
	}
	if !wf.readOnly {
		return fmt.Errorf("refusing to serve a read-write console without authentication on %s, which other hosts can reach: give credentials (--auth-file, $%s), --read-only, or a loopback --addr", wf.addr, EnvWebAuth)
	}
	fmt.Fprintf(stderr, "settle web: warning: serving a read-only console without authentication on %s: anyone who reaches it sees every dead letter's payload\n", wf.addr)
	return nil
}

// loopback reports whether addr (host:port) listens on the loopback interface only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// scrubAttr hides the secrets of every string and error a console log line carries.
func scrubAttr(_ []string, at slog.Attr) slog.Attr {
	switch v := at.Value.Any().(type) {
	case string:
		at.Value = slog.StringValue(scrub(v))
	case error:
		at.Value = slog.StringValue(scrub(v.Error()))
	}
	return at
}
