package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/console"
	"github.com/settlekit/settle/inbox"
)

// webFlags are the flags of settle web.
type webFlags struct {
	addr     string
	dsn      string
	prefix   string
	readOnly bool
	reclaim  time.Duration
}

// webShutdown bounds how long settle web waits for requests in flight when it stops.
const webShutdown = 5 * time.Second

func (a *app) webCommand() *cobra.Command {
	var wf webFlags
	c := &cobra.Command{
		Use:   "web",
		Short: "Serve the web console for the mounts and inboxes of --config",
		Long: `Serve settle's web console (github.com/settlekit/settle/console) for every mount and
inbox --config names: an overview refreshing on its own, each mount's consumers, delay set
and dead letters (filter, replay with a rate, purge, each confirmed first), each inbox's
groups and dead rows, pause and resume. It prints the address it serves on, then serves
until interrupted (SIGINT, SIGTERM), letting requests in flight finish.

The console has no authentication of its own: it listens on the loopback interface by
default; put it behind a proxy that authenticates before exposing it. --read-only hides
and refuses every action.`,
		Example: `  settle web --config settle.json --addr 127.0.0.1:8080
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
	fs.StringVar(&wf.dsn, "dsn", "", "database `DSN` of the inboxes (default $"+EnvDSN+", else the dsn of --config)")
	fs.StringVar(&wf.prefix, "prefix", "", "serve the console under this `PATH` (e.g. /settle)")
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
	o := console.Options{Prefix: wf.prefix, ReadOnly: wf.readOnly, Logger: slog.New(slog.NewTextHandler(a.stderr, nil))}
	if len(fc.Mounts) > 0 {
		if err := a.connect(ctx); err != nil {
			return err
		}
		o.Admin = a.insp
		for _, mc := range fc.Mounts {
			o.Mounts = append(o.Mounts, console.Mount{
				DeadLetter: mc.DeadLetter, Delayed: mc.Delayed, Group: mc.Group, Key: mc.Key,
				Kind: mc.Kind, Name: mc.Name, ReclaimIdle: wf.reclaim,
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
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(a.stdout, "settle console on http://%s%s/\n", ln.Addr(), wf.prefix)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), webShutdown)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stop serving %s: %w", ln.Addr(), err)
	}
	return nil
}
