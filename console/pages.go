package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/settlekit/settle/internal/redact"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pages are the console's templates, each page parsed with the layout.
type pages struct {
	byName map[string]*template.Template
}

// funcs are the helpers the templates call.
var funcs = template.FuncMap{
	"dur":  showDuration,
	"num":  showNumber,
	"inum": func(n int) string { return showNumber(int64(n)) },
	"time": showTime,
	"add":  func(a, b int) int { return a + b },
}

// parsePages parses every page of templates/ (but the layout) with the layout.
func parsePages() (*pages, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		p.byName[strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")] = t
	}
	return p, nil
}

// page is what the layout renders around a page's own data.
type page struct {
	// Crumbs lead from the overview to the page.
	Crumbs []crumb
	// Data is the page's own.
	Data any
	// Prefix is Options.Prefix, for links.
	Prefix string
	// ReadOnly hides the actions.
	ReadOnly bool
	// Refresh is the seconds after which the page reloads itself (0: never).
	Refresh int
	// Title is the page's title.
	Title string
	// Token is the CSRF token every action form carries.
	Token string
}

// crumb is one link of the breadcrumbs.
type crumb struct{ Href, Label string }

// render writes page name with status, its layout filled from p.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t := c.pages.byName[name]
	p.Prefix, p.ReadOnly = c.opts.Prefix, c.opts.ReadOnly
	if !c.opts.ReadOnly {
		p.Token = c.token(w, r)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, p); err != nil {
		c.log.Error("settle console: render", "page", name, "err", err)
		http.Error(w, "settle console: cannot render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail renders the error page: what failed and why.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, what string, err error) {
	msg := redact.Text(err.Error()) // a driver's error may name a URL with its password
	if status >= 500 {
		c.log.Error("settle console: "+what, "path", r.URL.Path, "err", msg)
	}
	c.render(w, r, status, "error", page{Title: what, Data: msg, Crumbs: []crumb{{c.path(), "Overview"}}})
}

// path is the console's path to the segments given, each escaped.
func (c *Console) path(segments ...string) string {
	var b strings.Builder
	b.WriteString(c.opts.Prefix)
	b.WriteString("/")
	for k, s := range segments {
		if k > 0 {
			b.WriteString("/")
		}
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// showNumber writes n with thin spaces between thousands, and "–" for a negative n
// (a figure Redis cannot tell).
func showNumber(n int64) string {
	if n < 0 {
		return "–"
	}
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for k, r := range s {
		if k > 0 && (len(s)-k)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(r)
	}
	return b.String()
}

// showDuration writes d for a person, to the second above a minute ("–" for 0).
func showDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// showTime writes t in UTC to the millisecond ("–" for the zero time).
func showTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}
