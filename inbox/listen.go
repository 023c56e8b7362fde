package inbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// The listener: on PostgreSQL, one connection of an Inbox's pool LISTENing on the
// table's channel for the Inbox's queues (see "Waking up" in the package doc).
// database/sql cannot wait for a notification and the library imports no driver, so
// the connection is reached with (*sql.Conn).Raw and recognised by its method set (see
// notificationWaiter). It never goes back to the pool: once it has LISTENed, a
// connection that served other queries would pile up notifications nobody reads.

// listenCheck is how long the listener waits for a notification before it pings its
// connection (a peer that vanished without closing the socket).
const listenCheck = 30 * time.Second

// errNoNotifications: the driver's connection cannot wait for notifications.
var errNoNotifications = errors.New("the driver's connection cannot wait for notifications")

// listener is an Inbox's LISTEN connection, shared by its queues on PostgreSQL.
type listener struct {
	cancel context.CancelFunc
	done   chan struct{}
	env    source.Env // the first queue's: its logger and mount name
	ib     *Inbox
	users  int // the queues listening; guarded by ib.mu
}

// listen counts one more queue of the inbox waiting for notifications, starting the
// listener for the first, and returns the stop that counts it out (the last one stops
// the listener and waits for it).
func (ib *Inbox) listen(ctx context.Context, env source.Env) (stop func()) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	l := ib.listener
	if l == nil {
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		l = &listener{cancel: cancel, done: make(chan struct{}), env: env, ib: ib}
		ib.listener = l
		go l.run(lctx)
	}
	l.users++
	return func() {
		ib.mu.Lock()
		l.users--
		last := l.users == 0
		if last {
			ib.listener = nil
		}
		ib.mu.Unlock()
		if last {
			l.cancel()
			<-l.done
		}
	}
}

// run listens until its context ends, connecting again after each loss.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	channel := l.ib.table.Name
	attrs := []any{slog.String(source.AttrMount, l.env.Mount), slog.String(source.AttrKey, channel)}
	if len(channel) > 63 {
		l.env.Logger.WarnContext(ctx, "settle: inbox: the table name is longer than PostgreSQL's 63-byte channel names: the queues do not LISTEN; they find rows by polling", attrs...)
		return
	}
	if l.ib.db.Stats().MaxOpenConnections == 1 {
		l.env.Logger.InfoContext(ctx, "settle: inbox: the pool allows one connection, which LISTEN would hold: the queues find rows by polling", attrs...)
		return
	}
	backoff, lost := time.Duration(0), false
	for {
		err := l.session(ctx, channel, func() {
			backoff = 0
			if lost {
				lost = false
				l.env.Logger.InfoContext(ctx, "settle: inbox: listening for notifications again", attrs...)
			}
		})
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNoNotifications) {
			l.env.Logger.InfoContext(ctx, "settle: inbox: the PostgreSQL driver is not pgx's stdlib, whose connections can wait for notifications: the queues find rows by polling", attrs...)
			return
		}
		if !lost {
			lost = true
			l.env.Logger.WarnContext(ctx, "settle: inbox: the LISTEN connection failed; the queues poll until it is back", append(attrs, slog.Any(source.AttrError, err))...)
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// session takes a connection of the pool, LISTENs on channel, calls listening, wakes
// every queue of the inbox, and then wakes a group's queues at each notification until
// the connection fails or ctx ends. The connection never goes back to the pool: it is
// closed, LISTEN and all.
func (l *listener) session(ctx context.Context, channel string, listening func()) error {
	conn, err := l.ib.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // discards it
		_ = conn.Close()
	}()
	supported := false
	if err := conn.Raw(func(dc any) error { _, supported = notificationWaiter(dc); return nil }); err != nil {
		return err
	}
	if !supported {
		return errNoNotifications
	}
	if _, err := conn.ExecContext(ctx, `LISTEN `+quoteWith(channel, '"')); err != nil {
		return fmt.Errorf("LISTEN: %w", err)
	}
	listening()
	l.ib.notifyAll() // rows published while nobody listened
	for {
		check, cancel := context.WithTimeout(ctx, listenCheck)
		var waitErr error
		err := conn.Raw(func(dc any) error {
			wait, _ := notificationWaiter(dc)
			for {
				ch, group, err := wait(check)
				if err != nil {
					waitErr = err
					return nil
				}
				if ch == channel {
					l.ib.notify(group)
				}
			}
		})
		checked := check.Err() != nil
		cancel()
		switch {
		case err != nil:
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case !checked:
			return fmt.Errorf("wait for a notification: %w", waitErr)
		}
		if err := conn.PingContext(ctx); err != nil {
			return fmt.Errorf("ping: %w", err)
		}
	}
}

var (
	contextType = reflect.TypeFor[context.Context]()
	errorType   = reflect.TypeFor[error]()
	stringType  = reflect.TypeFor[string]()
)

// notificationWaiter returns a function that waits for the next notification on
// driverConn, a database/sql driver connection (as (*sql.Conn).Raw hands it over, and
// usable only inside Raw's callback), and its channel and payload. ok is false unless
// driverConn has the method set of pgx's stdlib.Conn, which it reaches without
// importing pgx: a method Conn() returning one value (*pgx.Conn) that has a method
// WaitForNotification(context.Context) returning a pointer to a struct
// (*pgconn.Notification) with string fields Channel and Payload, and an error.
func notificationWaiter(driverConn any) (wait func(ctx context.Context) (channel, payload string, err error), ok bool) {
	v := reflect.ValueOf(driverConn)
	if !v.IsValid() {
		return nil, false
	}
	conn := v.MethodByName("Conn")
	if !conn.IsValid() || conn.Type().NumIn() != 0 || conn.Type().NumOut() != 1 {
		return nil, false
	}
	pc := conn.Call(nil)[0]
	if k := pc.Kind(); (k == reflect.Pointer || k == reflect.Interface) && pc.IsNil() {
		return nil, false
	}
	w := pc.MethodByName("WaitForNotification")
	if !w.IsValid() {
		return nil, false
	}
	wt := w.Type()
	if wt.NumIn() != 1 || wt.In(0) != contextType || wt.NumOut() != 2 || wt.Out(1) != errorType {
		return nil, false
	}
	nt := wt.Out(0)
	if nt.Kind() != reflect.Pointer || nt.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	chField, okc := nt.Elem().FieldByName("Channel")
	plField, okp := nt.Elem().FieldByName("Payload")
	if !okc || !okp || chField.Type != stringType || plField.Type != stringType {
		return nil, false
	}
	return func(ctx context.Context) (string, string, error) {
		out := w.Call([]reflect.Value{reflect.ValueOf(&ctx).Elem()})
		if err, _ := out[1].Interface().(error); err != nil {
			return "", "", err
		}
		n := out[0]
		if n.IsNil() {
			return "", "", nil
		}
		return n.Elem().FieldByIndex(chField.Index).String(), n.Elem().FieldByIndex(plField.Index).String(), nil
	}, true
}
