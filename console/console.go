// Package console is settle's web console: an http.Handler that shows what the mounts of
// a service hold (Redis streams and lists, SQL inboxes) and acts on it (replay or purge
// dead letters, pause and resume a mount, promote a delayed retry), through the
// operator API of settle/admin and settle/inbox.
//
// A service mounts it in its own mux, behind its own authentication or with
// Options.Auth (a token login or basic auth):
//
//	c, err := console.New(console.Options{
//		Admin:    admin.NewInspector(rdb),
//		Mounts:   []console.Mount{{Name: "refunds", Kind: console.KindStream, Key: "{refunds}", Group: "refunds", Delayed: "{refunds}.delayed", DeadLetter: "{refunds}.dlq"}},
//		Prefix:   "/settle",
//		ReadOnly: true,
//	})
//	mux.Handle("/settle/", auth(c))
//
// The pages are rendered on the server (html/template), the style sheet and one small
// script are embedded; nothing is built. Safe by construction: every response carries
// security headers (nosniff, frame-ancestors 'none', a CSP without inline script); a
// request whose Host is not an IP address, localhost or a name of
// Options.AllowedHosts is refused (DNS rebinding); in read-only mode no action is
// rendered and every POST is refused (403); every action is a POST that passes Go's
// http.CrossOriginProtection and carries a CSRF token (a hidden form field matched
// against a SameSite cookie: it also refuses a forged POST from a browser or extension
// that sends neither Sec-Fetch-Site nor Origin, which CrossOriginProtection lets
// through as a non-browser client); replay and
// purge first show how many entries they will move and ask again; a replay is the
// API's atomic, resumable replay; a list view never shows more than one bounded page
// (Options.PageSize, at most MaxPageSize), paged by id.
//
// A mount's page shows its flow limits (Mount.Limits: RateLimit, RateLimitBy,
// ConcurrencyBy, GlobalConcurrency), each one's rate, what is in use and the key values
// at their limit, read by admin.Inspector.Limits with a bounded scan.
//
// A partitioned stream (Options.Partitioned, settle.PartitionedStream) has a page of its
// own and a row on the overview: each partition's owner, lease time left, fencing token,
// length, lag, pending entries and dead letters, then the group's live members and how
// many partitions each holds, read by admin.Inspector.PartitionedStream in one
// pipelined round.
//
// The search box on every page finds a message by an entry id, its origin id or a header
// name=value (admin.Inspector.Find) and links each of its copies to its page. The
// overview and each mount's page draw the last hour (Options.SampleWindow) of backlog,
// pending, delayed, dead letters and the rates of reads, writes and dead letters as
// server-rendered SVG sparklines, numbers beside them, from the samples Console.Run
// takes every Options.SampleEvery (in a bounded ring of SampleWindow / SampleEvery
// samples a mount): start Run beside the server. Given Options.Prometheus, they are
// drawn from settleotel's metrics over a range the page picks instead.
package console

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/keys"
)

// The kinds of Redis mount, as settle's constructors name them.
const (
	// KindClaimingStream is a settle.ClaimingStream: a stream's consumer group.
	KindClaimingStream = "claiming-stream"
	// KindList is a settle.List.
	KindList = "list"
	// KindReliableList is a settle.ReliableList.
	KindReliableList = "reliable-list"
	// KindStream is a settle.Stream: a stream's consumer group.
	KindStream = "stream"
)

// Page sizes of the list views.
const (
	// DefaultPageSize is how many entries a list view shows when Options.PageSize and the
	// request say nothing.
	DefaultPageSize = 50
	// MaxPageSize bounds every list view, whatever the request asks.
	MaxPageSize = 500
)

// DefaultRefresh is how often the overview reloads itself when Options.Refresh is 0.
const DefaultRefresh = 5 * time.Second

// Options configures a console.
type Options struct {
	// AllowedHosts are the host names (with or without a port) the console answers to
	// besides IP addresses and localhost; a request with another Host is refused (421),
	// so that a name an attacker points at a loopback console (DNS rebinding) reaches
	// nothing. "*" allows any, for a console behind a proxy that checks the name.
	// Defaults to none.
	AllowedHosts []string
	// Admin inspects and acts on the Redis that Mounts and Partitioned name. Required
	// when either is not empty.
	Admin *admin.Inspector
	// Auth asks who is there: a token login or basic auth. Defaults to none (the
	// service authenticates in front of the console).
	Auth Auth
	// Clock is the clock the samples are taken by. Defaults to time.Now.
	Clock func() time.Time
	// Codec decodes payloads for display. Defaults to settle.Msgpack.
	Codec settle.Codec
	// Inboxes are the SQL inboxes to show.
	Inboxes []Inbox
	// Logger receives a line for each action taken and each page that failed. Defaults
	// to slog.Default().
	Logger *slog.Logger
	// Mounts are the Redis mounts to show.
	Mounts []Mount
	// PageSize is how many entries a list view shows by default (a request may ask for
	// up to MaxPageSize). Defaults to DefaultPageSize.
	PageSize int
	// Partitioned are the partitioned streams to show, each with its group.
	Partitioned []PartitionedStream
	// Prefix is the path the console is served under ("/settle": its overview is
	// "/settle/"), which the service's mux routes to it. Defaults to "": the root.
	Prefix string
	// Prometheus is the address of a Prometheus (its HTTP API: "http://prom:9090") that
	// scrapes settleotel's metrics of the mounts: the charts are then drawn from it over
	// a range the page chooses (15m, 1h, 6h, 24h), settlements a second by action
	// included, instead of from the console's own samples (drawn when it fails).
	// Defaults to "": the samples.
	Prometheus string
	// PrometheusClient queries Prometheus. Defaults to http.DefaultClient.
	PrometheusClient *http.Client
	// ReadOnly hides every action and refuses every POST with 403 Forbidden.
	ReadOnly bool
	// Refresh is how often the overview reloads itself; negative: never. Defaults to
	// DefaultRefresh.
	Refresh time.Duration
	// SampleEvery is how often Console.Run samples every mount and inbox for the charts
	// of the last SampleWindow; negative: never (Run returns at once). Defaults to
	// DefaultSampleEvery.
	SampleEvery time.Duration
	// SampleWindow is how far back the charts reach: SampleWindow / SampleEvery samples
	// of each mount are kept, no more. Defaults to DefaultSampleWindow.
	SampleWindow time.Duration
}

// Mount is one Redis mount: the keys one settle mount reads and writes.
type Mount struct {
	// DeadLetter names its dead letter: a stream for a stream kind, a list for a list
	// kind ("": none).
	DeadLetter string
	// Delayed names its durable delay set ("": none).
	Delayed string
	// Group is a stream kind's consumer group (required there; a list has none).
	Group string
	// Key is the stream or list it reads (required).
	Key string
	// Kind is KindStream, KindClaimingStream, KindList or KindReliableList.
	Kind string
	// Limits are its flow limits as its App declares them, in the same order (their
	// state is named by kind and rank): its page shows each one's rate, what is in use
	// and the key values at their limit (admin.Inspector.Limits). Defaults to none.
	Limits []admin.FlowLimit
	// Name names it in the console (defaults to Key); names are unique.
	Name string
	// ReclaimIdle is the idle past which a consumer holding entries counts as dead
	// (the mount's settle.Reclaim). Defaults to settle.DefaultReclaim.
	ReclaimIdle time.Duration
	// Replies name the streams its handlers reply to: the search finds the replies to a
	// message there. Defaults to none.
	Replies []string
}

// isStream reports whether m reads a stream's consumer group.
func (m Mount) isStream() bool { return m.Kind == KindStream || m.Kind == KindClaimingStream }

// Inbox is one SQL inbox: its table, the groups its mounts read and its dead letters.
type Inbox struct {
	// Dead names its dead letters: dead-letter groups, or dead-letter tables.
	Dead []string
	// Groups names the groups its mounts read ("" alone for a table without a group
	// column).
	Groups []string
	// Inbox is the inbox (required).
	Inbox *inbox.Inbox
	// Name names it in the console (defaults to its table's name); names are unique
	// among the inboxes.
	Name string
}

// Console is the web console: an http.Handler. It is safe for concurrent use.
type Console struct {
	history     *history
	inboxes     []Inbox
	log         *slog.Logger
	mounts      []Mount
	handler     http.Handler // mux behind the guards
	mux         *http.ServeMux
	opts        Options
	pages       *pages
	partitioned []PartitionedStream // Options.Partitioned, named
	refresh     time.Duration
	secret      []byte // the CSRF tokens' key, random per console
	pageSize    int
}

// New returns the console Options describe, or an error naming what is wrong with
// them: a mount without a key, of an unknown kind, a stream without its group or a list
// with one, a partitioned stream without its key or group, two mounts, two inboxes or
// two partitioned streams of one name, mounts without an Admin, an inbox without its
// Inbox.
func New(o Options) (*Console, error) {
	c := &Console{opts: o, log: o.Logger, refresh: o.Refresh, pageSize: o.PageSize}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.refresh == 0 {
		c.refresh = DefaultRefresh
	}
	if c.pageSize <= 0 {
		c.pageSize = DefaultPageSize
	}
	c.pageSize = min(c.pageSize, MaxPageSize)
	if o.Prefix != "" && (!strings.HasPrefix(o.Prefix, "/") || strings.HasSuffix(o.Prefix, "/")) {
		return nil, fmt.Errorf("console: Prefix %q must start with / and not end with one (\"/settle\")", o.Prefix)
	}
	var errs []error
	kinds := []string{KindStream, KindClaimingStream, KindList, KindReliableList}
	seen := map[string]bool{}
	for k, m := range o.Mounts {
		if m.Name == "" {
			m.Name = m.Key
		}
		if m.ReclaimIdle <= 0 {
			m.ReclaimIdle = settle.DefaultReclaim
		}
		what := fmt.Sprintf("console: mount %d (%q)", k+1, m.Name)
		switch {
		case m.Key == "":
			errs = append(errs, fmt.Errorf("%s has no Key", what))
		case !slices.Contains(kinds, m.Kind):
			errs = append(errs, fmt.Errorf("%s: unknown Kind %q (one of %s)", what, m.Kind, strings.Join(kinds, ", ")))
		case m.isStream() && m.Group == "":
			errs = append(errs, fmt.Errorf("%s: a %s needs its Group", what, m.Kind))
		case !m.isStream() && m.Group != "":
			errs = append(errs, fmt.Errorf("%s: a %s has no Group (got %q)", what, m.Kind, m.Group))
		case seen[m.Name]:
			errs = append(errs, fmt.Errorf("console: two mounts are named %q", m.Name))
		}
		seen[m.Name] = true
		c.mounts = append(c.mounts, m)
	}
	seen = map[string]bool{}
	for k, ps := range o.Partitioned {
		if ps.Name == "" {
			ps.Name = ps.Key
		}
		what := fmt.Sprintf("console: partitioned stream %d (%q)", k+1, ps.Name)
		switch {
		case ps.Key == "":
			errs = append(errs, fmt.Errorf("%s has no Key (the name given to settle.PartitionedStream)", what))
		case keys.CheckPartitionName(ps.Key) != nil:
			errs = append(errs, fmt.Errorf("%s: %w", what, keys.CheckPartitionName(ps.Key)))
		case ps.Group == "":
			errs = append(errs, fmt.Errorf("%s needs its Group", what))
		case seen[ps.Name]:
			errs = append(errs, fmt.Errorf("console: two partitioned streams are named %q", ps.Name))
		}
		seen[ps.Name] = true
		c.partitioned = append(c.partitioned, ps)
	}
	if (len(o.Mounts) > 0 || len(o.Partitioned) > 0) && o.Admin == nil {
		errs = append(errs, errors.New("console: Mounts and Partitioned need Admin, the Inspector of their Redis"))
	}
	seen = map[string]bool{}
	for k, ib := range o.Inboxes {
		if ib.Inbox == nil {
			errs = append(errs, fmt.Errorf("console: inbox %d (%q) has no Inbox", k+1, ib.Name))
			continue
		}
		if ib.Name == "" {
			ib.Name = ib.Inbox.Table().Name
		}
		if len(ib.Groups) == 0 && ib.Inbox.Table().Group == "" {
			ib.Groups = []string{""}
		}
		if seen[ib.Name] {
			errs = append(errs, fmt.Errorf("console: two inboxes are named %q", ib.Name))
		}
		seen[ib.Name] = true
		c.inboxes = append(c.inboxes, ib)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	every, window := o.SampleEvery, o.SampleWindow
	if every <= 0 {
		every = DefaultSampleEvery
	}
	if window <= 0 {
		window = DefaultSampleWindow
	}
	c.history = newHistory(every, window)
	c.secret = make([]byte, 32)
	_, _ = rand.Read(c.secret) // crypto/rand.Read never fails (Go 1.24+)
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	c.pages = p
	c.routes()
	c.handler = c.protect(c.mux)
	return c, nil
}

// ServeHTTP serves the console's pages under Options.Prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.handler.ServeHTTP(w, r)
}

// now is the time of a sample: Options.Clock, else the host's.
func (c *Console) now() time.Time {
	if c.opts.Clock != nil {
		return c.opts.Clock()
	}
	return time.Now()
}

// mount returns the mount named name.
func (c *Console) mount(name string) (Mount, bool) {
	for _, m := range c.mounts {
		if m.Name == name {
			return m, true
		}
	}
	return Mount{}, false
}

// inbox returns the inbox named name.
func (c *Console) inbox(name string) (Inbox, bool) {
	for _, ib := range c.inboxes {
		if ib.Name == name {
			return ib, true
		}
	}
	return Inbox{}, false
}
