// Package pace spaces an operator's actions at a rate (the replays of settle/admin and
// settle/inbox).
package pace

import (
	"context"
	"time"
)

// Pacer spaces actions at a rate; the zero Pacer does not wait.
type Pacer struct{ tick *time.Ticker }

// New returns a Pacer of perSecond actions a second (<= 0: no wait). Stop it when done.
func New(perSecond float64) *Pacer {
	every := time.Duration(float64(time.Second) / perSecond)
	if perSecond <= 0 || every <= 0 {
		return &Pacer{}
	}
	return &Pacer{tick: time.NewTicker(every)}
}

// Stop releases the pacer's ticker.
func (p *Pacer) Stop() {
	if p.tick != nil {
		p.tick.Stop()
	}
}

// Wait returns at the pacer's next tick (at once without a rate), or with ctx's error.
func (p *Pacer) Wait(ctx context.Context) error {
	if p.tick == nil {
		return ctx.Err()
	}
	select {
	case <-p.tick.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
