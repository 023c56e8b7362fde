package settle

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redislist"
	"github.com/settlekit/settle/internal/source"
)

// ListSource pops items from a Redis list. Make one with List.
type ListSource struct {
	cfg listConfig
	key string
	rdb redis.UniversalClient
}

var _ Source = (*ListSource)(nil)

// List returns a source that pops items from the head of the list key (LPOP, BLPOP when
// idle); producers push to the tail (Publisher.PublishList). A plain list is
// at-most-once: the pop removes the item, so a process that dies while a handler runs
// loses it, and Retry without MaxAttempts cannot be honoured (the message is lost, with
// a warning once per mount and a Settled event with ActionLose each time). Use
// ReliableList when that matters.
func List(rdb redis.UniversalClient, key string, opts ...ListOption) *ListSource {
	cfg := listConfig{batch: DefaultBatch, block: DefaultBlock}
	for _, o := range opts {
		if o != nil {
			o.applyList(&cfg)
		}
	}
	return &ListSource{cfg: cfg, key: key, rdb: rdb}
}

// Transport is for settle's own use and may change in any release.
func (s *ListSource) Transport(env source.Env) source.Transport {
	return redislist.New(env, redislist.Config{Batch: s.cfg.batch, Block: s.cfg.block, Client: s.rdb, Key: s.key})
}

// ReliableListSource moves items from a Redis list into a per-consumer processing list
// while they are handled. Make one with ReliableList.
type ReliableListSource struct {
	cfg reliableListConfig
	key string
	rdb redis.UniversalClient
}

var _ Source = (*ReliableListSource)(nil)

// ReliableList returns a source that moves items from the head of the list key into the
// consumer's own processing list (LMOVE, BLMOVE when idle), where each stays until it is
// settled, each settlement one script over the processing list and its destination.
// Producers push to the tail (Publisher.PublishList). Each consumer keeps a heartbeat
// (see Heartbeat); the items of a consumer whose heartbeat expired are taken over by a
// live one, counting the lost delivery, so a message that kills its worker reaches the
// dead letter. A consumer takes over one item at a time, the next once the last has
// settled, and runs it alone, so that such a message, when it kills the next consumer
// too, costs no other an attempt. The processing list, heartbeat
// and consumer set are named after key (see ProcessingList) and share its cluster slot;
// two live processes must not share a Consumer name.
func ReliableList(rdb redis.UniversalClient, key string, opts ...ReliableListOption) *ReliableListSource {
	cfg := reliableListConfig{batch: DefaultBatch, block: DefaultBlock, heartbeat: DefaultHeartbeat}
	for _, o := range opts {
		if o != nil {
			o.applyReliableList(&cfg)
		}
	}
	return &ReliableListSource{cfg: cfg, key: key, rdb: rdb}
}

// ProcessingList returns the name of the processing list of consumer on the reliable
// list key: key + ":processing:" + consumer when key has a {hash tag}, else
// "{" + key + "}:processing:" + consumer, so that it shares key's cluster slot.
func ProcessingList(key, consumer string) string { return keys.ListProcessing(key, consumer) }

// Transport is for settle's own use and may change in any release.
func (s *ReliableListSource) Transport(env source.Env) source.Transport {
	c := redislist.Config{Batch: s.cfg.batch, Block: s.cfg.block, Client: s.rdb, Key: s.key}
	return redislist.NewReliable(env, redislist.ReliableConfig{Config: c, Consumer: s.cfg.consumer, Heartbeat: s.cfg.heartbeat})
}

// ListOption configures a List source.
type ListOption interface {
	applyList(*listConfig)
}

type listConfig struct {
	batch int
	block time.Duration
}

// ReliableListOption configures a ReliableList source.
type ReliableListOption interface {
	applyReliableList(*reliableListConfig)
}

type reliableListConfig struct {
	batch     int
	block     time.Duration
	consumer  string
	heartbeat time.Duration
}

// DefaultHeartbeat is how long a reliable list consumer's heartbeat lives unless
// Heartbeat says otherwise.
const DefaultHeartbeat = 15 * time.Second

type reliableListOptionFunc func(*reliableListConfig)

func (f reliableListOptionFunc) applyReliableList(c *reliableListConfig) { f(c) }

// Heartbeat sets how long a reliable list consumer's heartbeat key lives (SET … PX ttl).
// The consumer refreshes it every ttl/3 and, every ttl, looks for consumers of the same
// list whose heartbeat has expired and recovers their processing lists. A dead
// consumer's items come back between ttl and 2×ttl after it died. It must be at least
// 100ms. Defaults to DefaultHeartbeat.
func Heartbeat(ttl time.Duration) ReliableListOption {
	return reliableListOptionFunc(func(c *reliableListConfig) { c.heartbeat = ttl })
}
