package dashboard

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// DefaultPrefix is where the dashboard is mounted unless Options.Prefix
// says otherwise.
const DefaultPrefix = "/dashboard"

// DefaultPageSize is the number of tasks in a table page.
const DefaultPageSize = 50

// Options configure New; nil means the defaults (a dashboard that is off:
// see New).
type Options struct {
	// Prefix is the URL path the dashboard is mounted at, without a
	// trailing slash; "" means DefaultPrefix. Mount the handler at
	// Prefix+"/" (mux.Handle("/dashboard/", d)); it strips the prefix
	// itself.
	Prefix string
	// Token, when set, admits requests bearing it (Authorization: Bearer,
	// or the login form's cookie) as an admin viewer who may cancel.
	Token string
	// Authenticate, when set, says who a request's viewer is; false
	// refuses the request. TokenFrom reads the bearer token of the
	// request, TokenViewers maps tokens to viewers. It is asked after
	// Token.
	Authenticate func(r *http.Request) (Viewer, bool)
	// Feed, when set, is the router's observer that makes the pages live
	// and counts tasks per minute (see Feed). Without it, the pages learn
	// of changes only through the store's change feed (store.Notifier,
	// PostgreSQL) when there is one, and otherwise refresh every few
	// seconds.
	Feed *Feed
	// PageSize is the number of tasks in a table page; zero means
	// DefaultPageSize (capped at store.MaxPageSize).
	PageSize int
	// Logger reports failures; nil means the router's logger.
	Logger *slog.Logger
	// Forker, when set (a *workflow.Bridge), gives admins a "rerun from
	// here" button on the steps of a workflow task's timeline: it forks
	// the task at that step (see workflow.Bridge.Fork) and opens the new
	// task.
	Forker Forker
}

// A Forker runs a workflow task again from a step; *workflow.Bridge is
// one.
type Forker interface {
	Fork(ctx context.Context, id string, o *workflow.ForkOptions) (*store.Task, error)
	ForkPoints(t *store.Task) []string
}

// Dashboard is the operator dashboard: an http.Handler over a router's
// tasks. See the package documentation for its routes.
type Dashboard struct {
	r       *taskrouter.Router
	opts    Options
	prefix  string
	auth    func(*http.Request) (Viewer, bool)
	feed    *Feed
	live    bool // a Feed or a store.Notifier makes pages live
	log     *slog.Logger
	secret  [32]byte
	tmpl    *template.Template
	static  http.Handler
	notify  sync.Once
	stopSub func()

	versionsMu sync.Mutex
	versions   versionCensus // active workflow tasks per version, cached
}

// New returns the dashboard of router r. It is a function rather than a
// method of taskrouter.Router because package dashboard imports
// taskrouter (and workflow, for the progress timeline); a method would be
// an import cycle.
//
// The dashboard is off unless opts sets Token or Authenticate: without
// either, every request gets 404. A nil opts means the defaults; New
// fails, naming the field, on a Prefix that is no absolute path or a
// negative PageSize.
func New(r *taskrouter.Router, opts *Options) (*Dashboard, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.validate(r); err != nil {
		return nil, err
	}
	d := &Dashboard{r: r, opts: o, prefix: strings.TrimSuffix(o.Prefix, "/"), feed: o.Feed, log: o.Logger}
	if d.prefix == "" {
		d.prefix = DefaultPrefix
	}
	if d.log == nil {
		d.log = r.Logger()
	}
	if d.opts.PageSize <= 0 {
		d.opts.PageSize = DefaultPageSize
	}
	d.opts.PageSize = min(d.opts.PageSize, store.MaxPageSize)
	var admins func(*http.Request) (Viewer, bool)
	if o.Token != "" {
		admins = TokenViewers(map[string]Viewer{o.Token: {Name: "admin", Admin: true, CanCancel: true}})
	}
	switch {
	case admins != nil && o.Authenticate != nil:
		d.auth = func(r *http.Request) (Viewer, bool) {
			if v, ok := admins(r); ok {
				return v, true
			}
			return o.Authenticate(r)
		}
	case admins != nil:
		d.auth = admins
	default:
		d.auth = o.Authenticate
	}
	_, notifier := r.Store().(store.Notifier)
	d.live = d.feed != nil || notifier
	if d.feed == nil {
		d.feed = NewFeed()
	}
	if _, err := rand.Read(d.secret[:]); err != nil {
		panic(fmt.Sprintf("dashboard: no randomness: %v", err))
	}
	d.tmpl = template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
	sub, _ := fs.Sub(staticFS, "static")
	d.static = http.StripPrefix(d.prefix+"/static/", http.FileServerFS(sub))
	return d, nil
}

// validate refuses what cannot work, naming the field.
func (o Options) validate(r *taskrouter.Router) error {
	var errs []error
	if r == nil {
		errs = append(errs, errors.New("dashboard: New: the router is required"))
	}
	if o.Prefix != "" && !strings.HasPrefix(o.Prefix, "/") {
		errs = append(errs, fmt.Errorf("dashboard: Prefix %q is no absolute URL path: start it with /", o.Prefix))
	}
	if o.PageSize < 0 {
		errs = append(errs, fmt.Errorf("dashboard: PageSize is negative (%d)", o.PageSize))
	}
	return errors.Join(errs...)
}

// Close ends the pages' live streams (see Feed.Close) and the store
// subscription, if any. Call it before shutting the HTTP server down.
func (d *Dashboard) Close() {
	d.feed.Close()
	d.notify.Do(func() {}) // waits for a subscription under way, and stops later ones
	if d.stopSub != nil {
		d.stopSub()
	}
}

// ServeHTTP implements http.Handler.
//
//	GET  {prefix}/                    overview: counts, rates, oldest working task, task table
//	GET  {prefix}/tasks/{id}          one task: history, variables, workflow timeline, result
//	POST {prefix}/tasks/{id}/cancel   cancel the task (CSRF token, same origin)
//	POST {prefix}/tasks/{id}/fork     admins: run a workflow task again from the step
//	                                  the form's "from" names (Options.Forker)
//	POST {prefix}/tasks/{id}/pause    pause a workflow task ("reason", "cut"), or
//	POST {prefix}/tasks/{id}/resume   resume it (viewers who may cancel it)
//	GET  {prefix}/schedules           schedules (an admin's all, a viewer's own) and,
//	                                  for admins, queues with their waiting and holding runs
//	POST {prefix}/schedules/{name}/pause|resume|trigger   act on a schedule
//	GET  {prefix}/events              server-sent events (?task=ID for one task)
//	GET  {prefix}/tasks/{id}/events   the task's event log, live (server-sent events)
//	GET  {prefix}/login, POST {prefix}/login, POST {prefix}/logout
//	GET  {prefix}/static/...          the script and the style sheet
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer browsers send "Origin:
	// null" on form posts, which the same-origin check must refuse.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if d.auth == nil {
		http.Error(w, "the dashboard is disabled: set dashboard.Options.Token or Authenticate", http.StatusNotFound)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, d.prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	switch {
	case path == "" && r.Method == http.MethodGet:
		http.Redirect(w, r, d.prefix+"/", http.StatusFound)
		return
	case strings.HasPrefix(path, "/static/"):
		h.Set("Cache-Control", "public, max-age=300")
		d.static.ServeHTTP(w, r)
		return
	case path == "/login":
		d.login(w, r)
		return
	case path == "/logout" && r.Method == http.MethodPost:
		if !sameOrigin(r) {
			http.Error(w, "cross-site request refused", http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: d.prefix + "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, d.prefix+"/login", http.StatusSeeOther)
		return
	}
	v, ok := d.auth(r)
	if !ok {
		if r.Method == http.MethodGet && r.URL.Query().Get("partial") == "" && path != "/events" {
			w.WriteHeader(http.StatusUnauthorized)
			d.render(w, "login", loginData{page: d.page(Viewer{}, "Sign in")})
			return
		}
		h.Set("WWW-Authenticate", `Bearer realm="taskbridge dashboard"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	switch {
	case path == "/" && r.Method == http.MethodGet:
		d.overview(w, r, v)
	case path == "/events" && r.Method == http.MethodGet:
		d.events(w, r, v)
	case path == "/schedules" && r.Method == http.MethodGet:
		d.schedules(w, r, v)
	case strings.HasPrefix(path, "/schedules/") && r.Method == http.MethodPost:
		d.scheduleAction(w, r, v, strings.TrimPrefix(path, "/schedules/"))
	case strings.HasPrefix(path, "/tasks/"):
		rest := strings.TrimPrefix(path, "/tasks/")
		if id, ok := strings.CutSuffix(rest, "/cancel"); ok && r.Method == http.MethodPost {
			d.cancel(w, r, v, id)
		} else if id, ok := strings.CutSuffix(rest, "/fork"); ok && r.Method == http.MethodPost {
			d.fork(w, r, v, id)
		} else if id, ok := strings.CutSuffix(rest, "/pause"); ok && r.Method == http.MethodPost {
			d.pause(w, r, v, id, false)
		} else if id, ok := strings.CutSuffix(rest, "/resume"); ok && r.Method == http.MethodPost {
			d.pause(w, r, v, id, true)
		} else if id, ok := strings.CutSuffix(rest, "/events"); ok && r.Method == http.MethodGet {
			d.taskEvents(w, r, v, id) // events.go
		} else if !strings.Contains(rest, "/") && r.Method == http.MethodGet {
			d.task(w, r, v, rest)
		} else {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	default:
		http.NotFound(w, r)
	}
}

// page is what every page template gets.
type page struct {
	Prefix string
	Title  string
	Viewer Viewer
	Live   bool
}

func (d *Dashboard) page(v Viewer, title string) page {
	return page{Prefix: d.prefix, Title: title, Viewer: v, Live: d.live}
}

func (d *Dashboard) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := d.tmpl.ExecuteTemplate(w, name, data); err != nil {
		d.log.Error("dashboard: rendering", "template", name, "err", err)
	}
}

type loginData struct {
	page
	Error string
}

// login shows the token form and, on POST, checks the token and sets the
// cookie.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		d.render(w, "login", loginData{page: d.page(Viewer{}, "Sign in")})
	case http.MethodPost:
		if !sameOrigin(r) {
			http.Error(w, "cross-site request refused", http.StatusForbidden)
			return
		}
		tok := strings.TrimSpace(r.PostFormValue("token"))
		probe := r.Clone(r.Context())
		probe.Header = r.Header.Clone()
		probe.Header.Set("Authorization", "Bearer "+tok)
		if _, ok := d.auth(probe); !ok || tok == "" {
			w.WriteHeader(http.StatusUnauthorized)
			d.render(w, "login", loginData{page: d.page(Viewer{}, "Sign in"), Error: "That token is not accepted."})
			return
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: url.QueryEscape(tok), Path: d.prefix + "/",
			HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, d.prefix+"/", http.StatusSeeOther)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// cancel cancels a task through the router (its handler is stopped).
func (d *Dashboard) cancel(w http.ResponseWriter, r *http.Request, v Viewer, id string) {
	if !d.checkForm(w, r, v, v.CanCancel, "cancel tasks") {
		return
	}
	t, ok := d.viewable(w, r, v, id)
	if !ok {
		return
	}
	result := "cancelled"
	if t.Status.Terminal() {
		result = "ended"
	} else if _, err := d.r.CancelTask(r.Context(), id, "cancelled by request"); err != nil {
		if !errors.Is(err, store.ErrTerminal) {
			d.log.Error("dashboard: cancelling", "task", id, "err", err)
			http.Error(w, "cancelling failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		result = "ended"
	}
	http.Redirect(w, r, d.prefix+"/tasks/"+url.PathEscape(id)+"?done="+result, http.StatusSeeOther)
}

// fork runs a workflow task again from a step (admins only) and opens
// the new task.
func (d *Dashboard) fork(w http.ResponseWriter, r *http.Request, v Viewer, id string) {
	if !d.checkForm(w, r, v, v.Admin && d.opts.Forker != nil, "rerun workflow tasks (only an admin may)") {
		return
	}
	if _, err := d.r.Task(r.Context(), id); err != nil {
		http.NotFound(w, r)
		return
	}
	nt, err := d.opts.Forker.Fork(r.Context(), id, &workflow.ForkOptions{From: r.PostFormValue("from")})
	if err != nil {
		http.Error(w, "the task cannot be run again from there: "+err.Error(), http.StatusConflict)
		return
	}
	http.Redirect(w, r, d.prefix+"/tasks/"+url.PathEscape(nt.ID)+"?done=forked", http.StatusSeeOther)
}

// events streams changes to a page as server-sent events: "task" events
// ({"id","status","kind"}) for the tasks the viewer may see, "refresh"
// when the page should re-read (a change it may not know the owner of, or
// missed events).
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request, v Viewer) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	only := r.URL.Query().Get("task")
	if only != "" {
		if _, ok := d.viewable(w, r, v, only); !ok {
			return
		}
	}
	d.subscribeStore()
	sub := d.feed.subscribe()
	if sub == nil {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	defer d.feed.unsubscribe(sub)
	startEvents(w, fl, "event: hello\ndata: {}\n\n")
	heartbeat := time.NewTicker(15 * time.Second)
	defer heartbeat.Stop()
	var poll <-chan time.Time
	if !d.live {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		poll = t.C
	}
	send := func(event string, c change) bool {
		b, _ := json.Marshal(c)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-poll:
			if !send("refresh", change{Kind: "refresh"}) {
				return
			}
		case c, ok := <-sub.ch:
			if !ok {
				return
			}
			if d.feed.takeDropped(sub) {
				c = change{Kind: "refresh"}
			}
			c, ok = visibleChange(c, only, v)
			if !ok {
				continue
			}
			event := "task"
			if c.Kind == "refresh" {
				event = "refresh"
			}
			if !send(event, c) {
				return
			}
		}
	}
}

// visibleChange is what a page of viewer v following only (a task id, or
// "" for every task) may be told of change c; ok is false when nothing.
func visibleChange(c change, only string, v Viewer) (change, bool) {
	switch {
	case c.Kind == "refresh":
	case only != "" && c.ID != only:
		return c, false
	case only != "":
		// The viewer was allowed to see this task when the stream opened;
		// owners never change.
	case c.known && !v.mayView(c.Owner):
		return c, false
	case !c.known && !v.Admin:
		// Another process's write: the owner is unknown here, so tell a
		// non-admin page to re-read, without the id.
		return change{Kind: "refresh"}, true
	}
	return c, true
}

// subscribeStore relays the store's change feed (a shared store's writes
// by other processes) into the dashboard's feed, once.
func (d *Dashboard) subscribeStore() {
	n, ok := d.r.Store().(store.Notifier)
	if !ok {
		return
	}
	d.notify.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stop, err := n.Subscribe(ctx, d.feed.storeChange)
		if err != nil {
			d.log.Warn("dashboard: no store change feed; pages learn of other replicas' writes only on reload", "err", err)
			return
		}
		d.stopSub = stop
	})
}
