// Package redact keeps passwords out of what the operator tools print: one function
// finds the secrets of a Redis URL, a list of them or a database DSN, another hides
// them in any text (an error, a log line), in every form they may appear in.
package redact

import (
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Mask is what a secret is replaced with.
const Mask = "xxxxx"

// keywordPassword is the password of a keyword DSN (host=db password='p w' ...).
var keywordPassword = regexp.MustCompile(`(?i)(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// urlUserinfo is the password part of a URL's userinfo anywhere in a text.
var urlUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s",]*:)[^\s",]*@`)

// Secrets returns the passwords raw holds: raw is a URL (redis://, postgres://, parsed
// or not: a password with '%', '@' or a space is still found), a comma-separated list
// of URLs or addresses (a cluster's nodes: each one's), a keyword DSN ("host=db
// password=s3cret"), or a MySQL DSN ("user:p@ss@tcp(host:3306)/db").
func Secrets(raw string) []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		out = append(out, s)
		if u, err := url.PathUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(raw, -1) {
		v := m[1]
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			add(v[1 : len(v)-1]) // as written, escapes and all
			v = strings.ReplaceAll(strings.ReplaceAll(v[1:len(v)-1], `\'`, `'`), `\\`, `\`)
		}
		add(v)
	}
	parts := []string{raw}
	if strings.Count(raw, "://") > 1 || (strings.Contains(raw, ",") && !strings.Contains(raw, "(")) {
		parts = strings.Split(raw, ",")
	}
	for _, p := range parts {
		add(password(strings.TrimSpace(p)))
	}
	return out
}

// password is the password of one URL or MySQL DSN ("" when it names none).
func password(p string) string {
	if _, rest, ok := strings.Cut(p, "://"); ok {
		// The userinfo ends at the last '@' before the query (a password may hold '@').
		rest, _, _ = strings.Cut(rest, "?")
		return userinfoPassword(rest)
	}
	if strings.Contains(p, "=") && !strings.Contains(p, "@") {
		return "" // a keyword DSN: found above
	}
	// MySQL: user:password@protocol(address)/db or user:password@/db.
	end := len(p)
	if i := strings.Index(p, "("); i >= 0 {
		end = i
	} else if i := strings.LastIndex(p, "/"); i >= 0 {
		end = i
	}
	return userinfoPassword(p[:end])
}

// userinfoPassword is the password of "user:password@host": what follows the first ':'
// before the last '@' ("" without either).
func userinfoPassword(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return ""
	}
	_, pass, ok := strings.Cut(s[:at], ":")
	if !ok {
		return ""
	}
	return pass
}

// Text returns s with each of secrets hidden (as given, URL-escaped, and as %q shows
// it), and the password of any URL written in s hidden too.
func Text(s string, secrets ...string) string {
	var forms []string
	for _, sec := range secrets {
		if sec == "" {
			continue
		}
		q := strconv.Quote(sec)
		forms = append(forms, sec, url.QueryEscape(sec), url.PathEscape(sec), url.UserPassword("", sec).String()[1:], q[1:len(q)-1])
	}
	sort.Slice(forms, func(a, b int) bool { return len(forms[a]) > len(forms[b]) })
	for _, f := range forms {
		if f != "" && f != ":" {
			s = strings.ReplaceAll(s, f, Mask)
		}
	}
	return urlUserinfo.ReplaceAllString(s, "${1}"+Mask+"@")
}

// DSN returns raw (a URL, a list of them, a DSN) with its passwords hidden.
func DSN(raw string) string { return Text(raw, Secrets(raw)...) }
