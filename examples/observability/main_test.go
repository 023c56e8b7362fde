package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The example prints one dead-lettered refund's chain (publish, five attempts each
// linked to the one before, the dead letter as the last attempt's child) and the
// scraped dead-letter series, which agree with the run's summary and the dead-letter
// stream; with -serve its /metrics, scraped here, renders every settleotel metric
// under its Prometheus name with mount, transport and destination.
func TestExamplePrintsTheChainAndServesEveryMetric(t *testing.T) {
	prefix := "obs-test-" + time.Now().Format("150405.000000") + ":"
	args := []string{"-n", "16", "-serve", "-prefix", prefix}
	if url := os.Getenv("SETTLE_REDIS_URL"); url != "" {
		args = append(args, "-redis", url)
		t.Cleanup(func() { deleteKeys(t, url, prefix) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := run(ctx, args, w, io.Discard)
		_ = w.CloseWithError(err)
		errc <- err
	}()
	var out []string
	var body string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		out = append(out, line)
		if url, ok := strings.CutPrefix(line, "serving "); ok && strings.HasSuffix(url, " until interrupted") {
			body = scrape(t, strings.TrimSuffix(url, " until interrupted"))
			cancel()
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("run: %v\n%s", err, strings.Join(out, "\n"))
	}
	text := strings.Join(out, "\n")
	for _, want := range []string{
		"settled 16: acked 14, dead-lettered 2",
		"publish → attempt 1 → attempt 2 → attempt 3 → attempt 4 → attempt 5 → dead letter",
		"link previous_attempt → span",
		"link producer → span",
		`= dead-lettered 2; settle_dead_letters = 2 = the stream's length 2`,
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("output lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "link previous_attempt"); n != 4 {
		t.Fatalf("%d previous-attempt links, want 4 (attempts 2 to 5):\n%s", n, text)
	}
	for _, name := range []string{
		"messaging_client_consumed_messages_total", "settle_settlements_total", "messaging_process_duration_seconds_bucket",
		"messaging_client_operation_duration_seconds_bucket", "settle_attempts_bucket", "settle_in_flight",
		"settle_delay_lateness_seconds_bucket", "settle_backlog", "settle_consumer_group_lag", "settle_pending",
		"settle_pending_oldest_idle_seconds", "settle_delayed", "settle_delayed_overdue", "settle_dead_letters",
	} {
		re := regexp.MustCompile(`(?m)^` + name + `\{.*messaging_destination_name="[^"]+".*messaging_system="redis".*settle_mount="refunds".*settle_transport="stream"`)
		if !re.MatchString(body) {
			t.Fatalf("/metrics has no %s series with messaging_destination_name, messaging_system, settle_mount and settle_transport:\n%s", name, body)
		}
	}
	if strings.Contains(body, "msg_id") || strings.Contains(body, "error=") {
		t.Fatalf("/metrics carries an id or an error as a label:\n%s", body)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// deleteKeys deletes the keys the test made on the shared server at url (those under
// prefix), and no other.
func deleteKeys(t *testing.T, url, prefix string) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan %s*: %v", prefix, err)
	}
}
