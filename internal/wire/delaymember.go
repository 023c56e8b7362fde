package wire

import (
	"errors"
	"strconv"
	"strings"
)

// A delay member is one retry copy parked in a durable delay set (delayed.DurableZset).
// Lua must turn it back into XADD arguments with string operations only (miniredis's Lua
// has no cmsgpack and no struct), so it is laid out as:
//
//	<original entry id> "\n" ( <decimal length> ":" <bytes> )*
//
// the bytes being the stream entry's field/value pairs in StreamValues order. The
// length prefixes make it binary-safe (any payload, NUL bytes and invalid UTF-8
// included), and the original entry id first makes members unique per stream entry.

// ErrDelayMember reports a delay member that does not parse.
var ErrDelayMember = errors.New("invalid delay member")

// DelayMember encodes the retry copy of entry id (payload and headers as they should be
// written back) as a delay set member.
func DelayMember(id string, payload []byte, headers map[string]string) string {
	vals := StreamValues(payload, headers)
	var b strings.Builder
	n := len(id) + 1
	for _, v := range vals {
		n += 8 + lenOf(v)
	}
	b.Grow(n)
	b.WriteString(id)
	b.WriteByte('\n')
	for _, v := range vals {
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		}
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	return b.String()
}

func lenOf(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case []byte:
		return len(v)
	}
	return 0
}

// ParseDelayMember decodes a delay member into the original entry id and the stream
// field/value pairs it holds, as FromStream reads them.
func ParseDelayMember(m string) (id string, payload []byte, ok bool, headers map[string]string, err error) {
	nl := strings.IndexByte(m, '\n')
	if nl < 0 {
		return "", nil, false, nil, ErrDelayMember
	}
	id, rest := m[:nl], m[nl+1:]
	var parts []string
	for len(rest) > 0 {
		c := strings.IndexByte(rest, ':')
		if c < 0 {
			return "", nil, false, nil, ErrDelayMember
		}
		n, aerr := strconv.Atoi(rest[:c])
		if aerr != nil || n < 0 || c+1+n > len(rest) {
			return "", nil, false, nil, ErrDelayMember
		}
		parts = append(parts, rest[c+1:c+1+n])
		rest = rest[c+1+n:]
	}
	if len(parts) == 0 || len(parts)%2 != 0 {
		return "", nil, false, nil, ErrDelayMember
	}
	values := make(map[string]any, len(parts)/2)
	for i := 0; i < len(parts); i += 2 {
		values[parts[i]] = parts[i+1]
	}
	payload, ok, headers = FromStream(values)
	return id, payload, ok, headers, nil
}

// A value delay member is one retry copy of a list item or channel message parked in a
// durable delay set. The copy is one value (its envelope, encoded by Go), so the member
// is that value behind a token that makes it unique in the set (two copies with the same
// bytes must not collapse into one member):
//
//	<token> "\n" <value bytes>
//
// The sweep script pushes (or publishes) everything after the first "\n" as it is.

// ValueDelayMember encodes the retry copy value as a delay set member under token,
// which must be unique per park and must not contain "\n" (a "\n" in it is replaced by
// "_", so the value always starts after the first one).
func ValueDelayMember(token string, value []byte) string {
	token = strings.ReplaceAll(token, "\n", "_")
	var b strings.Builder
	b.Grow(len(token) + 1 + len(value))
	b.WriteString(token)
	b.WriteByte('\n')
	b.Write(value)
	return b.String()
}

// ParseValueDelayMember splits a value delay member into its token and value.
func ParseValueDelayMember(m string) (token string, value []byte, err error) {
	nl := strings.IndexByte(m, '\n')
	if nl < 0 {
		return "", nil, ErrDelayMember
	}
	return m[:nl], []byte(m[nl+1:]), nil
}
