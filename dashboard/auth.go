package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Viewer is who is looking at the dashboard, as Options.Authenticate
// says.
type Viewer struct {
	// Name is shown in the page header.
	Name string
	// Owner is the task owner whose tasks a non-admin viewer sees, in the
	// engine's owner strings: with taskrouter.DefaultOwner a bearer-token
	// user is "user:<UserID>" (the go-sdk TokenInfo's UserID), a stateful
	// HTTP session "session:<id>", stdio and in-memory clients "local".
	// A non-admin viewer with an empty Owner sees no task.
	Owner string
	// Admin viewers see every task and may filter by owner.
	Admin bool
	// CanCancel viewers may cancel the tasks they see that have not ended.
	// Everyone else is read-only.
	CanCancel bool
}

// key identifies the viewer for the CSRF token.
func (v Viewer) key() string {
	return strconv.Quote(v.Name) + "|" + strconv.Quote(v.Owner) + "|" + strconv.FormatBool(v.Admin) + "|" + strconv.FormatBool(v.CanCancel)
}

// mayView reports whether the viewer may see a task of owner. Admins see
// everything; anyone else only tasks whose owner is exactly theirs (tasks
// the engine treats as id-capabilities are not shown to other viewers:
// the dashboard lists tasks, it never acts on an id alone).
func (v Viewer) mayView(owner string) bool {
	return v.Admin || (v.Owner != "" && owner == v.Owner)
}

// CookieName is the cookie the login form sets: it holds the token typed
// in, so that a browser, which cannot send an Authorization header on a
// page load, presents it on every request (HttpOnly, SameSite=Strict,
// Secure on TLS, scoped to the dashboard's path).
const CookieName = "taskbridge_dashboard"

// TokenFrom returns the bearer token of a dashboard request: the
// Authorization header's "Bearer" token, or the login cookie's. Use it in
// Options.Authenticate.
func TokenFrom(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
	}
	if c, err := r.Cookie(CookieName); err == nil {
		if v, err := url.QueryUnescape(c.Value); err == nil {
			return v
		}
	}
	return ""
}

// TokenViewers returns an Authenticate function that looks the request's
// bearer token (TokenFrom) up in viewers, comparing in constant time per
// entry.
func TokenViewers(viewers map[string]Viewer) func(*http.Request) (Viewer, bool) {
	return func(r *http.Request) (Viewer, bool) {
		tok := TokenFrom(r)
		if tok == "" {
			return Viewer{}, false
		}
		var found Viewer
		ok := false
		for t, v := range viewers {
			if subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 {
				found, ok = v, true
			}
		}
		return found, ok
	}
}

// csrfToken is the token every form carries (cancel, rerun, pause,
// resume, a schedule's pause, resume and trigger): an HMAC of the viewer
// under the dashboard's random secret. Forms check it with formTokenOK
// only.
func (d *Dashboard) csrfToken(v Viewer) string {
	m := hmac.New(sha256.New, d.secret[:])
	m.Write([]byte(v.key()))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}

// formTokenOK reports whether tok is viewer v's form token, comparing in
// constant time (as the bearer tokens are): the time a wrong guess takes
// says nothing of the right one.
func (d *Dashboard) formTokenOK(v Viewer, tok string) bool {
	return tok != "" && hmac.Equal([]byte(tok), []byte(d.csrfToken(v)))
}

// sameOrigin refuses cross-site POSTs: a browser sends Sec-Fetch-Site or
// Origin on every POST; when present they must name this site.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}
