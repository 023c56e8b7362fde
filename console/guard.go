package console

import (
	"crypto/hmac"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// securityHeaders are set on every response, static files and errors included: no
// content sniffing, no framing, no inline script or style, nothing sent to other sites.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
	"Cross-Origin-Opener-Policy": "same-origin",
	"Referrer-Policy":            "no-referrer",
	"X-Content-Type-Options":     "nosniff",
	"X-Frame-Options":            "DENY",
}

// Auth is how a console asks who is there. Its zero value asks nothing (the service
// authenticates in front of it).
type Auth struct {
	// Token, when set, is a shared secret: a person signs in once on the console's login
	// page (a session cookie, HttpOnly and SameSite=Strict, follows), a script sends it
	// as "Authorization: Bearer <token>".
	Token string
	// User and Password, when set, are HTTP basic-auth credentials every request must
	// carry.
	User, Password string
}

func (a Auth) enabled() bool { return a.Token != "" || a.User != "" || a.Password != "" }

// sessionCookie names the cookie a token login sets.
const sessionCookie = "settle_console_session"

// errHost refuses a request whose Host the console does not serve.
var errHost = errors.New("this console does not serve that host name (DNS rebinding?): allow it with Options.AllowedHosts (settle web --allow-host)")

// hostAllowed reports whether host (a request's Host, port and all) is one the console
// serves: an IP address, localhost, or a name of Options.AllowedHosts ("*": any). A
// name an attacker controls (DNS rebinding) is none of these.
func (c *Console) hostAllowed(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.ToLower(strings.Trim(h, "[]"))
	switch {
	case h == "":
		return false
	case net.ParseIP(h) != nil, h == "localhost", strings.HasSuffix(h, ".localhost"):
		return true
	}
	return slices.ContainsFunc(c.opts.AllowedHosts, func(a string) bool {
		return a == "*" || strings.EqualFold(a, h) || strings.EqualFold(a, host)
	})
}

// protect wraps the console's mux in its guards, outermost first: the security headers
// on every response, the Host check, the login (Options.Auth), and Go's cross-origin
// protection of every POST (Sec-Fetch-Site, else Origin against Host).
func (c *Console) protect(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusForbidden, "Refused", errCrossOrigin)
	}))
	inner := c.login(cop.Handler(next))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		if !c.hostAllowed(r.Host) {
			c.log.Warn("settle console: host refused", "host", r.Host, "path", r.URL.Path)
			http.Error(w, errHost.Error(), http.StatusMisdirectedRequest)
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// errCrossOrigin refuses a POST from another origin.
var errCrossOrigin = errors.New("a request from another site was refused (cross-origin)")

// login asks for Options.Auth before next: basic auth, or a token's session cookie or
// bearer header (else the login page for a GET, 401 for anything else).
func (c *Console) login(next http.Handler) http.Handler {
	a := c.opts.Auth
	if !a.enabled() {
		return next
	}
	loginPath := c.path("login")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.User != "" || a.Password != "" {
			u, p, ok := r.BasicAuth()
			if !ok || !equal(u, a.User) || !equal(p, a.Password) {
				w.Header().Set("WWW-Authenticate", `Basic realm="settle console", charset="UTF-8"`)
				http.Error(w, "settle console: sign in", http.StatusUnauthorized)
				return
			}
			if a.Token == "" {
				next.ServeHTTP(w, r)
				return
			}
		}
		switch {
		case c.signedIn(r):
			next.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, c.path("static")+"/"):
			next.ServeHTTP(w, r) // the style sheet of the login page
		case r.URL.Path == loginPath && r.Method == http.MethodPost:
			c.signIn(w, r)
		case r.URL.Path == loginPath, r.Method == http.MethodGet:
			c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Data: loginPage{Action: loginPath}})
		default:
			http.Error(w, "settle console: sign in first", http.StatusUnauthorized)
		}
	})
}

// loginPage is the token login form.
type loginPage struct {
	// Action is the form's target.
	Action string
	// Failed says the last token given was wrong.
	Failed bool
}

// signedIn reports whether r carries the session cookie or the token itself.
func (c *Console) signedIn(r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return equal(tok, c.opts.Auth.Token)
	}
	ck, err := r.Cookie(sessionCookie)
	return err == nil && hmac.Equal([]byte(ck.Value), []byte(c.sign("session:"+c.opts.Auth.Token)))
}

// signIn checks the login form's token (cross-origin protection applies to it too) and
// sets the session cookie.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		c.fail(w, r, http.StatusForbidden, "Refused", errCrossOrigin)
		return
	}
	if !equal(r.PostFormValue("token"), c.opts.Auth.Token) {
		time.Sleep(200 * time.Millisecond) // slow down guessing
		c.log.Warn("settle console: login refused", "remote", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Data: loginPage{Action: c.path("login"), Failed: true}})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: c.sign("session:" + c.opts.Auth.Token), Path: c.opts.Prefix + "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, c.path(), http.StatusSeeOther)
}

// equal compares secrets in constant time.
func equal(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
