// Package faults is a TCP proxy for tests that puts connection faults between a client
// and its server: it listens on a loopback port and forwards each connection to the
// server, and on demand resets every connection, refuses new ones for a while, delays
// the bytes of one direction, or cuts a connection right after the server answered a
// chosen request, dropping the answer (the command ran; the client never learns it).
//
// It is a few hundred lines of our own rather than toxiproxy (whose Go module is served,
// but whose proxy is built for a control server and pulls in its HTTP API, metrics and
// logging): the one fault toxiproxy cannot make, and the one that matters most to an
// at-least-once consumer, is a reply lost after the server executed the command.
package faults

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Direction is one direction of a proxied connection.
type Direction int

// The directions.
const (
	// ToServer is the client's requests on their way to the server.
	ToServer Direction = iota
	// ToClient is the server's replies on their way to the client.
	ToClient
)

// Teardown is how the proxy ends a connection it cuts.
type Teardown int

// The teardowns.
const (
	// Reset ends the client's side with a TCP RST: the client reads ECONNRESET.
	Reset Teardown = iota
	// Close ends the client's side with a FIN, as a server does on CLIENT KILL or an
	// idle timeout: the client reads EOF.
	Close
)

// Proxy forwards loopback connections to one server and injects faults into them.
// Make one with Start; it is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu          sync.Mutex
	closed      bool
	latency     [2]time.Duration
	links       map[*link]struct{}
	refuseUntil time.Time
	rule        *Rule // armed reply cut, nil when none
	accepted    int
	watches     []watch
}

// watch is one Observe call waiting for its request.
type watch struct {
	ch    chan struct{}
	match func([]byte) bool
}

// Start starts a proxy on 127.0.0.1 (a free port) to the server at target (host:port).
// It is closed when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faults: listen: %v", err)
	}
	p := &Proxy{ln: ln, links: map[*link]struct{}{}, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Accepted returns how many connections the proxy accepted, refused ones included.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, cuts every connection and waits for all of the proxy's
// goroutines to return. It may be called more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.cutAll(Reset)
	p.wg.Wait()
}

// CloseAll ends every open connection with a FIN, as a server closing its clients does;
// it returns how many it ended.
func (p *Proxy) CloseAll() int { return p.cutAll(Close) }

// Conns returns how many connections are open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// CutReply arms r: the next request that matches it is forwarded, and once the server's
// reply comes (the command ran), the reply is dropped and the connection cut. Only one
// rule is armed at a time; arming another replaces it. Watch r.Done to learn when it fired.
func (p *Proxy) CutReply(r *Rule) {
	r.once.Do(func() { r.done = make(chan struct{}) })
	p.mu.Lock()
	p.rule = r
	p.mu.Unlock()
}

// Observe returns a channel closed once the proxy reads a client request that match
// accepts (from now on), before forwarding it: a test learns that a command is on its way.
func (p *Proxy) Observe(match func(req []byte) bool) <-chan struct{} {
	ch := make(chan struct{})
	p.mu.Lock()
	p.watches = append(p.watches, watch{ch: ch, match: match})
	p.mu.Unlock()
	return ch
}

// observed closes the watches req matches.
func (p *Proxy) observed(req []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.watches[:0]
	for _, w := range p.watches {
		if w.match(req) {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	p.watches = kept
}

// Refuse makes the proxy reset every connection it accepts during d from now, before
// a byte is forwarded (the dial succeeds; the first command fails).
func (p *Proxy) Refuse(d time.Duration) {
	p.mu.Lock()
	p.refuseUntil = time.Now().Add(d)
	p.mu.Unlock()
}

// ResetAll ends every open connection with a TCP RST and returns how many it ended.
func (p *Proxy) ResetAll() int { return p.cutAll(Reset) }

// SetLatency delays every chunk of bytes going in dir by d from when the proxy read it
// (0: none); the order of the bytes is kept. It applies to connections open and new.
func (p *Proxy) SetLatency(dir Direction, d time.Duration) {
	p.mu.Lock()
	p.latency[dir] = d
	p.mu.Unlock()
}

func (p *Proxy) delay(dir Direction) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency[dir]
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		p.accepted++
		refuse := time.Now().Before(p.refuseUntil) || p.closed
		p.mu.Unlock()
		if refuse {
			teardown(c, Reset)
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			teardown(c, Reset)
			continue
		}
		l := &link{client: c, dead: make(chan struct{}), p: p, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			teardown(c, Reset)
			_ = s.Close()
			continue
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { l.pump(ToServer) })
		p.wg.Go(func() { l.pump(ToClient) })
	}
}

func (p *Proxy) cutAll(how Teardown) int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.cut(how)
	}
	return len(ls)
}

// takeRule returns the armed rule if req matches it, disarming it.
func (p *Proxy) takeRule(req []byte) *Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rule == nil || !p.rule.Request(req) {
		return nil
	}
	r := p.rule
	p.rule = nil
	return r
}

// rearm arms r again (its reply did not match), unless another rule was armed since.
func (p *Proxy) rearm(r *Rule) {
	p.mu.Lock()
	if p.rule == nil {
		p.rule = r
	}
	p.mu.Unlock()
}

// Rule picks a reply to drop: see Proxy.CutReply.
type Rule struct {
	// Reply, when set, must also match the first chunk of the reply; a reply that does
	// not match is forwarded and the rule waits for the next matching request.
	Reply func(reply []byte) bool
	// Request matches a chunk of a client's bytes (usually one whole RESP request).
	Request func(req []byte) bool
	// Teardown is how the connection is cut. Defaults to Reset.
	Teardown Teardown

	once sync.Once
	done chan struct{}
	req  []byte
}

// Done is closed once the rule fired: a reply was dropped and its connection cut.
func (r *Rule) Done() <-chan struct{} {
	r.once.Do(func() { r.done = make(chan struct{}) })
	return r.done
}

// Dropped returns the request whose reply was dropped (after Done).
func (r *Rule) Dropped() []byte { return r.req }

// link is one proxied connection.
type link struct {
	client, server net.Conn
	dead           chan struct{} // closed once cut
	p              *Proxy

	mu       sync.Mutex
	awaiting *Rule // a request matched: drop the next reply and cut
	cutOnce  sync.Once
}

// chunk is bytes read in one direction, to be written once due.
type chunk struct {
	b   []byte
	due time.Time
}

// pump copies one direction until either side ends or the link is cut. A writer
// goroutine writes each chunk once due (its latency passed), keeping their order.
func (l *link) pump(dir Direction) {
	from, to := l.client, l.server
	if dir == ToClient {
		from, to = l.server, l.client
	}
	queue := make(chan chunk, 256)
	var writer sync.WaitGroup
	writer.Go(func() { l.write(to, queue) })
	fired := l.read(dir, from, queue)
	close(queue)
	if fired {
		writer.Wait()
		return
	}
	// One side ended: end the other once what was read is written.
	writer.Wait()
	l.cut(Close)
}

// read reads from until it fails or a rule fires (it reports which), queueing chunks.
func (l *link) read(dir Direction, from net.Conn, queue chan<- chunk) (fired bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			b := append([]byte(nil), buf[:n]...)
			if dir == ToServer {
				l.p.observed(b)
				if r := l.p.takeRule(b); r != nil {
					r.req = b
					l.mu.Lock()
					l.awaiting = r
					l.mu.Unlock()
				}
			} else {
				l.mu.Lock()
				r := l.awaiting
				l.awaiting = nil
				l.mu.Unlock()
				if r != nil {
					if r.Reply == nil || r.Reply(b) {
						l.cut(r.Teardown)
						r.Done()
						close(r.done)
						return true
					}
					l.p.rearm(r)
				}
			}
			select {
			case queue <- chunk{b: b, due: time.Now().Add(l.p.delay(dir))}:
			case <-l.dead:
				return false
			}
		}
		if err != nil {
			return false
		}
	}
}

// write writes each chunk once due, until queue closes; after a failed write or a cut
// it discards the rest.
func (l *link) write(to net.Conn, queue <-chan chunk) {
	for c := range queue {
		if d := time.Until(c.due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.dead:
				t.Stop()
			}
		}
		select {
		case <-l.dead:
			continue
		default:
		}
		if _, err := to.Write(c.b); err != nil {
			l.cut(Reset)
		}
	}
}

// cut ends both sides once and forgets the link.
func (l *link) cut(how Teardown) {
	l.cutOnce.Do(func() {
		close(l.dead)
		teardown(l.client, how)
		_ = l.server.Close()
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}

// teardown closes c, with an RST when how is Reset.
func teardown(c net.Conn, how Teardown) {
	if tc, ok := c.(*net.TCPConn); ok && how == Reset {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
