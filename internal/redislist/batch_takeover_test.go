package redislist_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestABatchHandlerRunsEachItemTakenOverFromADeadConsumerInABatchOfOne: the engine runs
// a delivery taken over from a dead consumer alone, and a batch handler keeps it so: it
// runs in a batch of its own, so a message that killed its process charges no
// batch-mate, while the fresh items beside them are gathered into batches.
func TestABatchHandlerRunsEachItemTakenOverFromADeadConsumerInABatchOfOne(t *testing.T) {
	t.Parallel()
	const items, fresh, size = 3, 8, 4
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("jobs")
	jobs := make([]string, items)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("job-%02d", i)
	}
	sourcetest.DeadListConsumerLeft(t, r.Client, key, "dead", jobs...) // no heartbeat: taken over
	for i := range fresh {
		if err := settle.NewPublisher(r.Client).PublishList(ctx, key, fmt.Sprintf("fresh-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}

	rec := sourcetest.NewRecorder()
	app := sourcetest.NewApp(t, rec, nil)
	var mu sync.Mutex
	var problems []string
	largest := 0
	app.Mount(settle.ReliableList(r.Client, key, settle.Consumer("live"), settle.Heartbeat(time.Hour)),
		settle.TypedBatch(size, 100*time.Millisecond, func(_ context.Context, _ []*settle.Message, vs []string) error {
			mu.Lock()
			defer mu.Unlock()
			largest = max(largest, len(vs))
			for _, v := range vs {
				if strings.HasPrefix(v, "job-") && len(vs) != 1 {
					problems = append(problems, fmt.Sprintf("%s ran in a batch of %d: %v", v, len(vs), vs))
				}
			}
			return nil
		}), settle.Concurrency(size), settle.MaxAttempts(5))
	stop := sourcetest.StartApp(t, app)
	rec.WaitFor(t, sourcetest.WaitTimeout, "every item acked", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == items+fresh })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "; "))
	}
	if largest < 2 || largest > size {
		t.Fatalf("the largest batch held %d items, want the fresh ones gathered, at most %d", largest, size)
	}
	for _, e := range rec.Events() {
		if e.Action != settle.ActionAck {
			t.Fatalf("got %+v, want every item acked", e)
		}
	}
}
