package settle

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"
)

// open opens m's source. An error that says the server could not be reached (a refused
// or dropped connection, a server still loading its data) is logged and the open tried
// again after a backoff, until it succeeds or ctx is done: a consumer started while its
// Redis or database restarts comes up on its own, as a running one reconnects. Any other
// error (a key of the wrong type, a refused permission, a missing table) is returned at
// once: waiting would not fix it.
func (a *App) open(ctx context.Context, m *mount) error {
	var backoff time.Duration
	for {
		err := m.transport.Open(ctx)
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return err
		}
		backoff = nextBackoff(backoff)
		m.logger.ErrorContext(ctx, "settle: open failed: the server is unreachable; retrying", slog.Any(attrError, err), slog.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return err
		}
	}
}

// unreachable reports whether err says the server could not be reached or is not ready
// yet, rather than refusing what was asked.
func unreachable(err error) bool {
	var netErr net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, driver.ErrBadConn), errors.As(err, &netErr):
		return true
	}
	// Redis's answers while it cannot serve yet.
	msg := err.Error()
	for _, prefix := range []string{"LOADING ", "TRYAGAIN ", "CLUSTERDOWN ", "MASTERDOWN "} {
		if strings.HasPrefix(msg, prefix) || strings.Contains(msg, ": "+prefix) {
			return true
		}
	}
	return false
}
