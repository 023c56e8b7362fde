package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

var summaryRE = regexp.MustCompile(`^settled ([0-9]+): acked ([0-9]+), dropped ([0-9]+), dead-lettered ([0-9]+), reviewed ([0-9]+)$`)

func TestMailerSettlesEveryMailAndReviewsDeadLetters(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-n", "60", "-review"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	m := summaryRE.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		t.Fatalf("last line %q does not match %s", lines[len(lines)-1], summaryRE)
	}
	if m[1] != "60" || m[4] != m[5] {
		t.Fatalf("got %q, want 60 settled and every dead letter reviewed", lines[len(lines)-1])
	}
}
