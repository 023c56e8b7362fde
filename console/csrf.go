package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
)

// csrfCookie names the cookie that a form's CSRF token is matched against.
const csrfCookie = "settle_console_csrf"

// csrfField names the hidden form field that carries the token.
const csrfField = "csrf"

// token returns the CSRF token of the browser's cookie (HMAC of it under the console's
// secret), setting a new random cookie (SameSite=Strict, HttpOnly) when it has none.
func (c *Console) token(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) == 32 {
		return c.sign(ck.Value)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	v := hex.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: v, Path: c.opts.Prefix + "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	return c.sign(v)
}

func (c *Console) sign(v string) string {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

// guard refuses a POST in read-only mode, or without the CSRF token of its cookie
// (403 Forbidden, nothing done), and otherwise calls next.
func (c *Console) guard(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.opts.ReadOnly {
			c.fail(w, r, http.StatusForbidden, "Refused", errReadOnly)
			return
		}
		ck, err := r.Cookie(csrfCookie)
		got := r.PostFormValue(csrfField)
		if err != nil || got == "" || !hmac.Equal([]byte(got), []byte(c.sign(ck.Value))) {
			c.fail(w, r, http.StatusForbidden, "Refused", errCSRF)
			return
		}
		next(w, r)
	}
}
