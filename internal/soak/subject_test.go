package soak

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/ledger"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/wire"
)

// subject is one transport under a soak: its keys (or table), how to publish to it,
// whether it is drained, and its dead letters.
type subject struct {
	cfg workerConfig
	// publish publishes one message: payload and (where there are headers) the id header.
	publish func(ctx context.Context, id string, payload []byte) error
	// drained reports whether nothing is left to deliver, in flight, pending, delayed or
	// leased; consumers names every consumer that ever ran.
	drained func(ctx context.Context, consumers []string) (bool, error)
	// dead reads the dead letters.
	dead func(ctx context.Context) ([]ledger.Dead, error)
}

// redisSubject returns a subject on the test's real Redis (skipping without one).
func redisSubject(t *testing.T, transport string) subject {
	t.Helper()
	redistest.RealOnly(t)
	r := redistest.New(t)
	return redisSubjectOn(r.Client, os.Getenv(redistest.EnvURL), r.Key, transport)
}

// redisSubjectOn returns a subject on the Redis server rdb talks to, whose workers
// connect to url, with its keys named by key.
func redisSubjectOn(rdb *redis.Client, url string, key func(string) string, transport string) subject {
	cfg := workerConfig{
		Cap:        5,
		DeadLetter: key("dlq"),
		Delays:     key("delays"),
		Key:        key("in"),
		RedisURL:   url,
		Transport:  transport,
	}
	pub := settle.NewPublisher(rdb)
	s := subject{cfg: cfg}
	if transport == transportReliable {
		s.publish = func(ctx context.Context, id string, payload []byte) error {
			return pub.PublishListBytes(ctx, cfg.Key, payload, settle.Headers(map[string]string{headerID: id}))
		}
		s.drained = func(ctx context.Context, consumers []string) (bool, error) {
			cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.LLen(ctx, cfg.Key)
				for _, c := range consumers {
					p.LLen(ctx, settle.ProcessingList(cfg.Key, c))
				}
				return nil
			})
			if err != nil {
				return false, err
			}
			for _, c := range cmds {
				if c.(*redis.IntCmd).Val() != 0 {
					return false, nil
				}
			}
			return true, nil
		}
		s.dead = func(ctx context.Context) ([]ledger.Dead, error) {
			vals, err := rdb.LRange(ctx, cfg.DeadLetter, 0, -1).Result()
			if err != nil {
				return nil, err
			}
			var out []ledger.Dead
			for _, v := range vals {
				_, headers, _, err := wire.FromEnvelope([]byte(v))
				if err != nil {
					return nil, fmt.Errorf("dead letter %q: %w", v, err)
				}
				out = append(out, deadOf(headers))
			}
			return out, nil
		}
		return s
	}
	s.publish = func(ctx context.Context, id string, payload []byte) error {
		_, err := pub.PublishBytes(ctx, cfg.Key, payload, settle.Headers(map[string]string{headerID: id}))
		return err
	}
	s.drained = func(ctx context.Context, _ []string) (bool, error) {
		var info *redis.XInfoStreamCmd
		var groups *redis.XInfoGroupsCmd
		var delays *redis.IntCmd
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			info = p.XInfoStream(ctx, cfg.Key)
			groups = p.XInfoGroups(ctx, cfg.Key)
			delays = p.ZCard(ctx, cfg.Delays)
			return nil
		})
		if err != nil {
			return false, err
		}
		if delays.Val() != 0 {
			return false, nil
		}
		for _, g := range groups.Val() {
			if g.Name == "g" {
				return g.Pending == 0 && g.LastDeliveredID == info.Val().LastGeneratedID, nil
			}
		}
		return false, nil // the group is made by the first worker
	}
	s.dead = func(ctx context.Context) ([]ledger.Dead, error) {
		msgs, err := rdb.XRange(ctx, cfg.DeadLetter, "-", "+").Result()
		if err != nil {
			return nil, err
		}
		var out []ledger.Dead
		for _, m := range msgs {
			_, _, headers := wire.FromStream(m.Values)
			out = append(out, deadOf(headers))
		}
		return out, nil
	}
	return s
}

// deadOf reads a dead letter's message id and attempts spent from its headers.
func deadOf(headers map[string]string) ledger.Dead {
	n, _ := strconv.Atoi(headers[settle.HeaderRetryCount])
	return ledger.Dead{Attempt: n, Delivery: headers[settle.HeaderDeadID], ID: headers[headerID]}
}

// inboxSubject returns a subject on an inbox table of the test's own on PostgreSQL
// (skipping without SETTLE_POSTGRES_URL); the table is dropped when the test ends.
func inboxSubject(t *testing.T) subject {
	t.Helper()
	url := os.Getenv("SETTLE_POSTGRES_URL")
	if url == "" {
		t.Skip("needs PostgreSQL: set SETTLE_POSTGRES_URL (e.g. postgres://root@127.0.0.1:5432/test?sslmode=disable)")
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	table := "soak_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+` (
		id bigserial PRIMARY KEY,
		grp text NOT NULL,
		attempt integer NOT NULL DEFAULT 1,
		retry_after timestamptz,
		locked_until timestamptz,
		payload bytea NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), `DROP TABLE `+table); err != nil {
			t.Logf("drop %s: %v", table, err)
		}
		_ = db.Close()
	})
	ib := inbox.New(db, inbox.Postgres, inboxTable(table))
	return subject{
		cfg: workerConfig{Cap: 5, DeadLetter: "dead", Key: table, PostgresURL: url, Transport: transportInbox},
		publish: func(ctx context.Context, _ string, payload []byte) error {
			_, err := ib.PublishBytes(ctx, "work", payload)
			return err
		},
		drained: func(ctx context.Context, _ []string) (bool, error) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE grp = 'work'`).Scan(&n)
			return n == 0, err
		},
		dead: func(ctx context.Context) ([]ledger.Dead, error) {
			rows, err := db.QueryContext(ctx, `SELECT payload, attempt FROM `+table+` WHERE grp = 'dead'`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []ledger.Dead
			for rows.Next() {
				var payload []byte
				var d ledger.Dead
				if err := rows.Scan(&payload, &d.Attempt); err != nil {
					return nil, err
				}
				d.ID = string(payload)
				out = append(out, d)
			}
			return out, rows.Err()
		},
	}
}
