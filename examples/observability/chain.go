package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settleotel"
)

// counter counts the refunds that reached a final settlement, by message key (one key
// across a refund's copies), and remembers the first one dead-lettered.
type counter struct {
	mu    sync.Mutex
	done  chan struct{}
	final map[string]settle.Action
	dead  []string // message keys dead-lettered, in order
	n     int
}

func newCounter(n int) *counter {
	return &counter{done: make(chan struct{}), final: map[string]settle.Action{}, n: n}
}

// settled is the App's OnSettled.
func (c *counter) settled(_ context.Context, s settle.Settled) {
	if !s.Final() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.final[s.MessageKey]; seen {
		return
	}
	c.final[s.MessageKey] = s.Action
	if s.Action == settle.ActionDeadLetter {
		c.dead = append(c.dead, s.MessageKey)
	}
	if len(c.final) == c.n {
		close(c.done)
	}
}

// summary counts the refunds by how they ended.
func (c *counter) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	acked := 0
	for _, a := range c.final {
		if a == settle.ActionAck {
			acked++
		}
	}
	return fmt.Sprintf("settled %d: acked %d, dead-lettered %d", len(c.final), acked, len(c.dead))
}

// deadLettered counts the refunds dead-lettered.
func (c *counter) deadLettered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.dead)
}

// firstDead is the message key of the first refund dead-lettered ("" if none was).
func (c *counter) firstDead() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.dead) == 0 {
		return ""
	}
	return c.dead[0]
}

// keptSpans is a span processor that keeps every ended span, to print a chain from.
type keptSpans struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (k *keptSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (k *keptSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	k.mu.Lock()
	k.spans = append(k.spans, s)
	k.mu.Unlock()
}
func (k *keptSpans) Shutdown(context.Context) error   { return nil }
func (k *keptSpans) ForceFlush(context.Context) error { return nil }

func (k *keptSpans) all() []sdktrace.ReadOnlySpan {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.spans)
}

// printChain prints the spans of message key as a tree: its publish, each attempt
// below the one it links to, the dead letter below the last attempt, with every link.
func printChain(w io.Writer, spans []sdktrace.ReadOnlySpan, key string) error {
	if key == "" {
		return fmt.Errorf("no refund was dead-lettered")
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var chain []sdktrace.ReadOnlySpan // the attempts, then the dead letter
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
		if attr(s, settleotel.AttrMessageKey).AsString() == key {
			chain = append(chain, s)
		}
	}
	slices.SortFunc(chain, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	if len(chain) == 0 {
		return fmt.Errorf("no span of message %s", key)
	}
	label := map[trace.SpanID]string{}
	var publish sdktrace.ReadOnlySpan
	for _, l := range chain[0].Links() {
		if p, ok := byID[l.SpanContext.SpanID()]; ok && linkKind(l) == settleotel.LinkProducer {
			publish = p
			label[p.SpanContext().SpanID()] = "publish"
		}
	}
	var steps []string
	if publish != nil {
		steps = append(steps, "publish")
	}
	for _, s := range chain {
		l := "dead letter"
		if s.SpanKind() == trace.SpanKindConsumer {
			l = fmt.Sprintf("attempt %d", attr(s, settleotel.AttrAttempt).AsInt64())
		}
		label[s.SpanContext().SpanID()] = l
		steps = append(steps, l)
	}
	fmt.Fprintf(w, "\nrefund message %s: %s\n", key, strings.Join(steps, " → "))
	depth := 0
	if publish != nil {
		printSpan(w, publish, "publish", depth, label)
		depth++
	}
	for _, s := range chain {
		printSpan(w, s, label[s.SpanContext().SpanID()], depth, label)
		depth++
	}
	return nil
}

func printSpan(w io.Writer, s sdktrace.ReadOnlySpan, label string, depth int, labels map[trace.SpanID]string) {
	indent := strings.Repeat("   ", depth)
	branch := ""
	if depth > 0 {
		indent = strings.Repeat("   ", depth-1)
		branch = "└─ "
	}
	sc := s.SpanContext()
	var extra []string
	for _, k := range []attribute.Key{settleotel.AttrAction, settleotel.AttrOutcome} {
		if v := attr(s, k).AsString(); v != "" {
			extra = append(extra, fmt.Sprintf("%s=%s", k, v))
		}
	}
	fmt.Fprintf(w, "%s%s%-12s %-40s %-8s trace=%s span=%s %s\n", indent, branch, label, s.Name(), s.SpanKind(), sc.TraceID(), sc.SpanID(), strings.Join(extra, " "))
	pad := indent + strings.Repeat(" ", len([]rune(branch)))
	if p := s.Parent(); p.IsValid() {
		fmt.Fprintf(w, "%s   parent: %s (%s)\n", pad, p.SpanID(), labels[p.SpanID()])
	}
	for _, l := range s.Links() {
		fmt.Fprintf(w, "%s   link %s → span %s (%s)\n", pad, linkKind(l), l.SpanContext.SpanID(), labels[l.SpanContext.SpanID()])
	}
}

func linkKind(l sdktrace.Link) string {
	for _, kv := range l.Attributes {
		if kv.Key == settleotel.AttrLink {
			return kv.Value.AsString()
		}
	}
	return "link"
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}
