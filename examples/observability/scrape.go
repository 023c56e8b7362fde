package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// printScrape scrapes url (this process's /metrics) and prints the dead letters'
// settle_settlements_total series and settle_dead_letters, and checks them against the
// count of dead letters the run settled, deadLettered, and the dead-letter stream's
// length, dlqLen.
func printScrape(ctx context.Context, w io.Writer, url string, deadLettered int, dlqLen int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	fmt.Fprintf(w, "\nscraped %s:\n", url)
	var settled, gauge float64
	var sawGauge bool
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		dead := strings.HasPrefix(line, "settle_settlements_total{") && strings.Contains(line, `settle_action="dead_letter"`)
		if !dead && !strings.HasPrefix(line, "settle_dead_letters{") {
			continue
		}
		fmt.Fprintln(w, line)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return fmt.Errorf("scrape: %q: %w", line, err)
		}
		if dead {
			settled += v
		} else {
			gauge, sawGauge = v, true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	fmt.Fprintf(w, "dead-letter stream length %d\n", dlqLen)
	if settled != float64(deadLettered) {
		return fmt.Errorf("settle_settlements_total{settle_action=\"dead_letter\"} is %v, the run dead-lettered %d", settled, deadLettered)
	}
	if !sawGauge || gauge != float64(dlqLen) {
		return fmt.Errorf("settle_dead_letters is %v, the dead-letter stream holds %d", gauge, dlqLen)
	}
	fmt.Fprintf(w, "settle_settlements_total{settle_action=\"dead_letter\"} = %v = dead-lettered %d; settle_dead_letters = %v = the stream's length %d\n", settled, deadLettered, gauge, dlqLen)
	return nil
}
