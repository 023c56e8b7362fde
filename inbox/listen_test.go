package inbox

import (
	"context"
	"errors"
	"testing"
)

// The method set of pgx's stdlib.Conn that the listener reaches by reflection, in
// miniature: stdConn.Conn() returns a *pgxConn whose WaitForNotification returns a
// *notification with Channel and Payload.
type (
	notification struct {
		PID     uint32
		Channel string
		Payload string
	}
	pgxConn struct {
		next *notification
		err  error
		ctx  context.Context // the context the last wait got
	}
	stdConn struct{ c *pgxConn }
)

func (c *pgxConn) WaitForNotification(ctx context.Context) (*notification, error) {
	c.ctx = ctx
	return c.next, c.err
}

func (c *stdConn) Conn() *pgxConn { return c.c }

// Shapes that are not pgx's.
type (
	noConn         struct{}
	connTakesArg   struct{}
	connOfNoWaiter struct{}
	waitNoContext  struct{}
	waiterOfWait   struct{}
	waitWrongField struct{}
	badNotice      struct{ Channel []byte }
	nilConn        struct{}
)

func (connTakesArg) Conn(int) *pgxConn           { return &pgxConn{} }
func (connOfNoWaiter) Conn() *struct{}           { return &struct{}{} }
func (waitNoContext) Conn() waitNoContext        { return waitNoContext{} }
func (waitNoContext) WaitForNotification() error { return nil }
func (waiterOfWait) Conn() waiterOfWait          { return waiterOfWait{} }
func (waiterOfWait) WaitForNotification(context.Context) (notification, error) {
	return notification{}, nil
}
func (waitWrongField) Conn() waitWrongField { return waitWrongField{} }
func (waitWrongField) WaitForNotification(context.Context) (*badNotice, error) {
	return nil, nil
}
func (nilConn) Conn() *pgxConn { return nil }

func TestNotificationWaiterReachesPgxShapedConnectionsOnly(t *testing.T) {
	t.Parallel()
	type key struct{}
	pc := &pgxConn{next: &notification{PID: 7, Channel: "mail_jobs", Payload: "emails"}}
	wait, ok := notificationWaiter(&stdConn{c: pc})
	if !ok {
		t.Fatal("notificationWaiter: got ok false for pgx's method set, want true")
	}
	ctx := context.WithValue(context.Background(), key{}, "mine")
	ch, payload, err := wait(ctx)
	if ch != "mail_jobs" || payload != "emails" || err != nil {
		t.Fatalf("wait: got (%q, %q, %v), want (mail_jobs, emails, nil)", ch, payload, err)
	}
	if pc.ctx.Value(key{}) != "mine" {
		t.Fatal("wait did not pass its context to WaitForNotification")
	}
	lost := errors.New("conn closed")
	pc.next, pc.err = nil, lost
	if _, _, err := wait(ctx); !errors.Is(err, lost) {
		t.Fatalf("wait on a lost connection: got %v, want %v", err, lost)
	}

	for _, tt := range []struct {
		name string
		conn any
	}{
		{"Nil", nil},
		{"NoConnMethod", noConn{}},
		{"ConnTakesAnArgument", connTakesArg{}},
		{"ConnOfNoWaiter", connOfNoWaiter{}},
		{"WaitWithoutContext", waitNoContext{}},
		{"WaitReturnsNoPointer", waiterOfWait{}},
		{"NotificationFieldsNotStrings", waitWrongField{}},
		{"ConnReturnsNil", nilConn{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := notificationWaiter(tt.conn); ok {
				t.Fatalf("notificationWaiter(%T): got ok true, want false", tt.conn)
			}
		})
	}
}
