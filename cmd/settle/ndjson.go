package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/wire"
)

// exported is one line of dlq export and dlq import: an entry's id (informative: an
// import appends with new ids), its headers (settle's dead-letter headers included), its
// payload (base64; null for an entry without a payload field). A header name or value
// that is not valid UTF-8 (or that starts with the marker) is written as the marker
// "base64:" and its bytes in base64, so that every byte comes back.
type exported struct {
	Headers byteHeaders `json:"headers"`
	ID      string      `json:"id,omitempty"`
	Payload []byte      `json:"payload"`
}

// byteHeaders are headers that JSON carries byte for byte (see exported).
type byteHeaders map[string]string

// bytesMarker starts a header name or value written in base64.
const bytesMarker = "base64:"

func (h byteHeaders) MarshalJSON() ([]byte, error) {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[toJSONText(k)] = toJSONText(v)
	}
	return json.Marshal(out)
}

func (h *byteHeaders) UnmarshalJSON(b []byte) error {
	var in map[string]string
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*h = make(byteHeaders, len(in))
	for k, v := range in {
		name, err := fromJSONText(k)
		if err != nil {
			return fmt.Errorf("header name %q: %w", k, err)
		}
		if (*h)[name], err = fromJSONText(v); err != nil {
			return fmt.Errorf("header %q: %w", name, err)
		}
	}
	return nil
}

// toJSONText is s as JSON text carries it exactly: itself, or the marker and its bytes
// in base64 when it is not valid UTF-8 or starts with the marker.
func toJSONText(s string) string {
	if utf8.ValidString(s) && !strings.HasPrefix(s, bytesMarker) {
		return s
	}
	return bytesMarker + base64.StdEncoding.EncodeToString([]byte(s))
}

// fromJSONText undoes toJSONText.
func fromJSONText(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, bytesMarker)
	if !ok {
		return s, nil
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return "", fmt.Errorf("after %q, not base64: %w", bytesMarker, err)
	}
	return string(b), nil
}

// replayable returns why an entry of l could never be replayed ("" when it could): a
// replay writes its headers as stream fields beside the payload field, in one script.
func (l exported) replayable() string {
	if _, clash := l.Headers[wire.FieldPayload]; clash {
		return fmt.Sprintf("a header named %q, the stream field that holds the payload (a replay would drop it, or abort without a payload)", wire.FieldPayload)
	}
	if len(l.Headers) > settle.MaxHeaders {
		return fmt.Sprintf("%d headers, more than the %d a replay can write (settle.MaxHeaders)", len(l.Headers), settle.MaxHeaders)
	}
	return ""
}

func (a *app) dlqExportCommand() *cobra.Command {
	var ff filterFlags
	var limit int
	c := &cobra.Command{
		Use:   "export KEY",
		Short: "Write dead letters of KEY to stdout as NDJSON",
		Long: `Write the dead letters of the dead-letter stream KEY that the filters select (all
without a filter) to stdout, oldest first, one JSON object per line:
  {"headers":{"settle-dead-reason":"...",...},"id":"1700000000000-0","payload":"<base64>"}
dlq import reads the same lines. Nothing is changed.`,
		Args: exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := a.selectedIn(cmd.Context(), &ff)
			if err != nil {
				return err
			}
			dls, err := a.insp.DeadLetters(cmd.Context(), args[0], f, limit)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(a.stdout)
			enc := json.NewEncoder(w)
			for _, d := range dls {
				line := exported{Headers: byteHeaders(d.Headers), ID: d.ID}
				if d.HasPayload {
					line.Payload = d.Payload
					if line.Payload == nil {
						line.Payload = []byte{}
					}
				}
				if err := enc.Encode(line); err != nil {
					return err
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "exported %d dead letters of %s\n", len(dls), args[0])
			return nil
		},
	}
	ff.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "export at most `N`, oldest first (0: all)")
	return c
}

// importJSON is what dlq import --json prints (one object): how many entries were
// appended (or, in a dry run, would be) and their new ids.
type importJSON struct {
	DryRun  bool     `json:"dry_run"`
	Entries int      `json:"entries"`
	IDs     []string `json:"ids"`
	Key     string   `json:"key"`
}

func (a *app) dlqImportCommand() *cobra.Command {
	var af actionFlags
	var file string
	c := &cobra.Command{
		Use:   "import KEY",
		Short: "Append dead letters read as NDJSON (dlq export's lines) to KEY",
		Long: `Read lines as dlq export writes them from stdin (or --file) and append one entry per
line to the stream KEY (made if missing), with new ids, in one MULTI/EXEC. Every line is
read and checked first: a line that does not parse, or whose entry no replay could move
(more headers than settle.MaxHeaders, a header named "payload"), is refused, naming its
number, and nothing is written. Header names and values that are not UTF-8 travel as
"base64:<bytes in base64>", and come back exact. Reading stdin leaves no one to ask: give --yes (or --dry-run).`,
		Args: exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			in := a.stdin
			name := "stdin"
			if file != "-" {
				fh, err := os.Open(file)
				if err != nil {
					return err
				}
				defer fh.Close()
				in, name = fh, file
			}
			lines, err := readExported(in, name)
			if err != nil {
				return err
			}
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			if err := a.mustBeStreamOrMissing(cmd.Context(), key); err != nil {
				return err
			}
			if af.dryRun || len(lines) == 0 {
				return a.printImport(key, len(lines), nil, af.dryRun)
			}
			if file == "-" && !af.yes {
				return fmt.Errorf("refusing to import %d entries into %q without confirmation: stdin carries the entries, so there is no one to ask; give --yes (or --dry-run, or --file)", len(lines), key)
			}
			if err := a.confirm(fmt.Sprintf("append %d entries to %q", len(lines), key), af.yes); err != nil {
				return err
			}
			ids, err := a.appendAll(cmd.Context(), key, lines)
			if err != nil {
				return err
			}
			return a.printImport(key, len(ids), ids, false)
		},
	}
	af.add(c)
	c.Flags().StringVar(&file, "file", "-", "read the lines from this `FILE` (-: stdin)")
	return c
}

// readExported reads every line of in (named name in errors); blank lines are skipped.
func readExported(in io.Reader, name string) ([]exported, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 64<<20)
	var out []exported
	n := 0
	for sc.Scan() {
		n++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var line exported
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&line); err != nil {
			return nil, fmt.Errorf("%s line %d does not parse (want {\"headers\":{...},\"payload\":\"<base64>\"}): %w; nothing was written", name, n, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("%s line %d does not parse: more than one JSON value on the line; nothing was written", name, n)
		}
		if line.Payload == nil && len(line.Headers) == 0 {
			return nil, fmt.Errorf("%s line %d has neither a payload nor headers; nothing was written", name, n)
		}
		if why := line.replayable(); why != "" {
			return nil, fmt.Errorf("%s line %d cannot be replayed: %s; nothing was written", name, n, why)
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s after line %d: %w; nothing was written", name, n, err)
	}
	return out, nil
}

// mustBeStreamOrMissing refuses a key that holds something other than a stream.
func (a *app) mustBeStreamOrMissing(ctx context.Context, key string) error {
	typ, err := a.rdb.Type(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("stream %q: type: %w", key, err)
	}
	if typ != "stream" && typ != "none" {
		return fmt.Errorf("%w: stream %q holds a %s, not a stream", admin.ErrWrongType, key, typ)
	}
	return nil
}

// appendAll XADDs one entry per line to key in one MULTI/EXEC and returns the new ids.
func (a *app) appendAll(ctx context.Context, key string, lines []exported) ([]string, error) {
	cmds, err := a.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, l := range lines {
			p.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: wire.StreamValues(l.Payload, l.Headers)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("import into %q: %w", key, err)
	}
	ids := make([]string, 0, len(cmds))
	for _, c := range cmds {
		x, ok := c.(*redis.StringCmd)
		if !ok {
			return ids, errors.New("import: unexpected reply")
		}
		ids = append(ids, x.Val())
	}
	return ids, nil
}

func (a *app) printImport(key string, n int, ids []string, dryRun bool) error {
	if a.json {
		if ids == nil {
			ids = []string{}
		}
		return a.printJSON(importJSON{DryRun: dryRun, Entries: n, IDs: ids, Key: key})
	}
	if dryRun {
		fmt.Fprintf(a.stdout, "would append %d entries to %s\n", n, key)
		return nil
	}
	fmt.Fprintf(a.stdout, "appended %d entries to %s\n", n, key)
	return nil
}
