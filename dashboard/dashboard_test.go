package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"github.com/taskbridge/taskbridge/mcptask"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/dashboard"
	"github.com/taskbridge/taskbridge/internal/tests/obstest"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// env is a fixture server with a dashboard on 127.0.0.1.
type env struct {
	f    *obstest.Fixture
	feed *dashboard.Feed
	d    *dashboard.Dashboard
	web  *httptest.Server
}

const (
	adminToken = "admin-secret"
	aliceToken = "alice-secret"
	bobToken   = "bob-secret"
	peekToken  = "peek-secret" // alice, read-only
	localToken = "local-secret"
)

// newEnv serves a dashboard over obstest's fixture; extra adds to the
// fixture's builder (tools of a test's own).
func newEnv(t *testing.T, opts dashboard.Options, extra ...func(*builder.Builder)) *env {
	t.Helper()
	feed := dashboard.NewFeed()
	f := obstest.New(t, memory.New(nil), func(b *builder.Builder) {
		b.WithObserver(feed)
		for _, add := range extra {
			add(b)
		}
	})
	opts.Feed = feed
	opts.Forker = f.Srv.Bridge
	d, err := dashboard.New(f.Srv.Router, &opts)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/dashboard/", d)
	web := httptest.NewServer(mux)
	t.Cleanup(func() {
		d.Close()
		web.Close()
	})
	return &env{f: f, feed: feed, d: d, web: web}
}

func usersOptions() dashboard.Options {
	return dashboard.Options{Token: adminToken, Authenticate: dashboard.TokenViewers(map[string]dashboard.Viewer{
		aliceToken: {Name: "alice", Owner: "user:alice", CanCancel: true},
		bobToken:   {Name: "bob", Owner: "user:bob", CanCancel: true},
		peekToken:  {Name: "alice (read-only)", Owner: "user:alice"},
		localToken: {Name: "local", Owner: taskrouter.LocalOwner, CanCancel: true},
	})}
}

// get fetches path with a bearer token and returns the status and body.
func (e *env) get(t *testing.T, token, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.web.URL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// post submits a form with a bearer token and optional extra headers; it
// does not follow redirects.
func (e *env) post(t *testing.T, token, path string, form url.Values, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.web.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// ownedTask creates a working task (no handler) for owner.
func (e *env) ownedTask(t *testing.T, owner, name string) *store.Task {
	t.Helper()
	task, err := e.f.Srv.Router.CreateTask(t.Context(), &taskrouter.Request{Owner: owner, Authenticated: true},
		store.Request{Method: "tools/call", Name: name}, &taskrouter.CreateOptions{Kind: taskrouter.KindTool})
	require.NoError(t, err)
	return task
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestOffByDefault(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	code, body := e.get(t, adminToken, "/dashboard/")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "disabled")
}

// TestNewRefusesOptionsThatCannotWork: New names the field that cannot
// work; nil options make a dashboard that is off.
func TestNewRefusesOptionsThatCannotWork(t *testing.T) {
	f := obstest.New(t, memory.New(nil), nil)
	_, err := dashboard.New(f.Srv.Router, &dashboard.Options{Prefix: "dashboard", PageSize: -1, Token: "x"})
	require.ErrorContains(t, err, "Prefix \"dashboard\" is no absolute URL path")
	require.ErrorContains(t, err, "PageSize is negative")
	_, err = dashboard.New(nil, nil)
	require.ErrorContains(t, err, "the router is required")
	d, err := dashboard.New(f.Srv.Router, nil)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/dashboard/", nil))
	require.Equal(t, http.StatusNotFound, rec.Code, "off without a Token or Authenticate")
}

func TestSignIn(t *testing.T) {
	e := newEnv(t, usersOptions())
	code, body := e.get(t, "", "/dashboard/")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, `name="token"`, "the login form")
	code, _ = e.get(t, "wrong", "/dashboard/events")
	require.Equal(t, http.StatusUnauthorized, code)

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar}
	resp, err := c.PostForm(e.web.URL+"/dashboard/login", url.Values{"token": {"nope"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, err = c.PostForm(e.web.URL+"/dashboard/login", url.Values{"token": {aliceToken}})
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "redirected to the overview, signed in by the cookie")
	require.Contains(t, string(b), "user:alice")
	u, _ := url.Parse(e.web.URL + "/dashboard/")
	cookies := jar.Cookies(u)
	require.Len(t, cookies, 1)
	require.Equal(t, dashboard.CookieName, cookies[0].Name)

	// A cross-site login post is refused.
	resp2 := e.post(t, "", "/dashboard/login", url.Values{"token": {aliceToken}}, map[string]string{"Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, resp2.StatusCode)
}

// TestOwnersRules: a non-admin viewer sees only tasks whose owner is
// theirs, in the table, on task pages and on the event stream; an admin
// sees every task and may filter by owner.
func TestOwnersRules(t *testing.T) {
	e := newEnv(t, usersOptions())
	alice := e.ownedTask(t, "user:alice", "echo")
	bob := e.ownedTask(t, "user:bob", "echo")

	code, body := e.get(t, aliceToken, "/dashboard/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, alice.ID)
	require.NotContains(t, body, bob.ID)
	require.NotContains(t, body, `id="count-total"`, "store-wide counts are for admins")
	// A non-admin's owner filter is ignored: it is always their own.
	_, body = e.get(t, aliceToken, "/dashboard/?owner=user:bob")
	require.NotContains(t, body, bob.ID)
	require.Contains(t, body, alice.ID)
	code, body = e.get(t, aliceToken, "/dashboard/tasks/"+bob.ID)
	require.Equal(t, http.StatusNotFound, code)
	require.NotContains(t, body, bob.ID)
	code, _ = e.get(t, aliceToken, "/dashboard/events?task="+bob.ID)
	require.Equal(t, http.StatusNotFound, code)
	resp := e.post(t, aliceToken, "/dashboard/tasks/"+bob.ID+"/cancel", url.Values{"csrf": {"x"}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a forged form token is refused first")

	code, body = e.get(t, adminToken, "/dashboard/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, alice.ID)
	require.Contains(t, body, bob.ID)
	require.Contains(t, body, `id="count-working">2<`)
	_, body = e.get(t, adminToken, "/dashboard/?owner=user:bob")
	require.Contains(t, body, bob.ID)
	require.NotContains(t, body, alice.ID)
	_, body = e.get(t, adminToken, "/dashboard/?status=completed")
	require.NotContains(t, body, bob.ID)
	require.Contains(t, body, "No tasks match.")
	// The oldest working task is alice's (created first).
	require.Regexp(t, `id="oldest">`+alice.ID[:12]+`<`, body)
}

// TestEventsFollowOwners: the event stream tells a viewer of their own
// tasks' changes and of nobody else's.
func TestEventsFollowOwners(t *testing.T) {
	e := newEnv(t, usersOptions())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.web.URL+"/dashboard/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "{}" {
				events <- data
			}
		}
		close(events)
	}()
	next := func() map[string]string {
		select {
		case ev := <-events:
			var m map[string]string
			require.NoError(t, json.Unmarshal([]byte(ev), &m))
			return m
		case <-ctx.Done():
			t.Fatal("no event")
			return nil
		}
	}
	// The stream is open once "hello" was sent; wait for the subscription.
	time.Sleep(50 * time.Millisecond)
	bob := e.ownedTask(t, "user:bob", "echo")
	alice := e.ownedTask(t, "user:alice", "echo")
	ev := next()
	require.Equal(t, alice.ID, ev["id"], "bob's task is not announced to alice")
	require.Equal(t, "created", ev["kind"])
	_, err = e.f.Srv.Router.Fail(t.Context(), bob.ID, "x", nil)
	require.NoError(t, err)
	_, err = e.f.Srv.Router.Fail(t.Context(), alice.ID, "x", nil)
	require.NoError(t, err)
	ev = next()
	require.Equal(t, alice.ID, ev["id"])
	require.Equal(t, "failed", ev["status"])
}

// TestCancel: the cancel button stops the task's handler, through the
// router; read-only viewers, cross-site posts and missing form tokens are
// refused.
func TestCancel(t *testing.T) {
	e := newEnv(t, usersOptions())
	c := e.f.Client(t)
	id := obstest.Start(t, c, "slow", map[string]any{"text": "cancel me", "ms": 60000})
	path := "/dashboard/tasks/" + id
	code, body := e.get(t, localToken, path)
	require.Equal(t, http.StatusOK, code)
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "a cancel form with a token")
	token := m[1]

	require.Equal(t, http.StatusForbidden, e.post(t, localToken, path+"/cancel", url.Values{}, nil).StatusCode, "no form token")
	require.Equal(t, http.StatusForbidden, e.post(t, localToken, path+"/cancel", url.Values{"csrf": {token}},
		map[string]string{"Origin": "http://evil.example"}).StatusCode, "cross-origin")
	require.Equal(t, http.StatusForbidden, e.post(t, localToken, path+"/cancel", url.Values{"csrf": {token}},
		map[string]string{"Sec-Fetch-Site": "cross-site"}).StatusCode, "cross-site")
	require.Equal(t, http.StatusForbidden, e.post(t, aliceToken, path+"/cancel", url.Values{"csrf": {token}}, nil).StatusCode,
		"another viewer's form token")
	require.Equal(t, http.StatusForbidden, e.post(t, peekToken, path+"/cancel", url.Values{"csrf": {token}}, nil).StatusCode, "read-only")
	require.Equal(t, mcptask.StatusWorking, e.f.Wait(t, id, mcptask.StatusWorking).Status)

	resp := e.post(t, localToken, path+"/cancel", url.Values{"csrf": {token}}, map[string]string{"Origin": e.web.URL})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "done=cancelled")
	e.f.Wait(t, id, mcptask.StatusCancelled)
	select {
	case got := <-e.f.Cancelled:
		require.Equal(t, "cancel me", got, "the handler's context was cancelled")
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was not stopped")
	}
	_, body = e.get(t, localToken, path)
	require.NotContains(t, body, `id="cancel"`, "no cancel button on an ended task")
	resp = e.post(t, localToken, path+"/cancel", url.Values{"csrf": {token}}, nil)
	require.Contains(t, resp.Header.Get("Location"), "done=ended")
}

// TestTaskPageShowsTheWorkflow: the task page of a workflow task draws
// each step with who runs it and its state, and the attempts.
func TestTaskPageShowsTheWorkflow(t *testing.T) {
	e := newEnv(t, usersOptions())
	c := e.f.Client(t)
	_, doc := obstest.Handoff(t, c, "page")
	code, body := e.get(t, adminToken, "/dashboard/tasks/"+doc.TaskID)
	require.Equal(t, http.StatusOK, code)
	for step, state := range map[string]string{"fetch": "done", "draft": "done", "review": "waiting", "publish": "pending"} {
		require.Regexp(t, `data-step="`+step+`" data-state="`+state+`"`, body)
	}
	require.Contains(t, body, "waiting for the client")
	require.Contains(t, body, `id="cancel"`)
	// The real deadline and why (the handoff was delivered: the idle
	// allowance, moved by every recorded step), and the version.
	require.Contains(t, body, `id="deadline"`)
	require.Contains(t, body, "idle allowance")
	require.Contains(t, body, `id="version"`)
	// The overview counts active workflow tasks per version (admins).
	_, over := e.get(t, adminToken, "/dashboard/?partial=1")
	require.Contains(t, over, `id="versions"`)
	// The live part alone.
	_, part := e.get(t, adminToken, "/dashboard/tasks/"+doc.TaskID+"?partial=1")
	require.NotContains(t, part, "<html")
	require.Contains(t, part, `id="timeline"`)
}

func TestRates(t *testing.T) {
	e := newEnv(t, usersOptions())
	c := e.f.Client(t)
	for range 3 {
		_, err := c.CallToolAndWait(t.Context(), "echo", map[string]any{"text": "x"}, nil)
		require.NoError(t, err)
	}
	r := e.feed.Rates(2)
	require.Len(t, r, 2)
	require.GreaterOrEqual(t, r[0].Created+r[1].Created, 3)
	require.GreaterOrEqual(t, r[0].Finished+r[1].Finished, 3)
	_, body := e.get(t, adminToken, "/dashboard/?partial=1")
	require.Contains(t, body, `id="rate-created"`)
}

// TestForkFromTheTimeline: an admin reruns a workflow task from a step of
// its timeline; the new task's page names its origin, the origin's lists
// it. Other viewers see no button and are refused.
func TestForkFromTheTimeline(t *testing.T) {
	e := newEnv(t, usersOptions())
	c := e.f.Client(t)
	_, doc := obstest.Handoff(t, c, "fork me")
	path := "/dashboard/tasks/" + doc.TaskID
	_, body := e.get(t, adminToken, path)
	require.Equal(t, 3, strings.Count(body, "Rerun from here"), "fetch, draft and review may be rerun; publish waits for review")
	token := csrfRE.FindStringSubmatch(body)[1]
	_, other := e.get(t, localToken, path)
	require.NotContains(t, other, "Rerun from here")
	require.Equal(t, http.StatusForbidden, e.post(t, localToken, path+"/fork", url.Values{"csrf": {token}, "from": {"draft"}}, nil).StatusCode)
	require.Equal(t, http.StatusForbidden, e.post(t, adminToken, path+"/fork", url.Values{"from": {"draft"}}, nil).StatusCode, "no form token")
	require.Equal(t, http.StatusConflict, e.post(t, adminToken, path+"/fork", url.Values{"csrf": {token}, "from": {"publish"}}, nil).StatusCode,
		"review has not ended")

	resp := e.post(t, adminToken, path+"/fork", url.Values{"csrf": {token}, "from": {"draft"}}, map[string]string{"Origin": e.web.URL})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc := resp.Header.Get("Location")
	require.Contains(t, loc, "done=forked")
	newID := strings.TrimPrefix(strings.Split(loc, "?")[0], "/dashboard/tasks/")
	require.NotEqual(t, doc.TaskID, newID)
	_, page := e.get(t, adminToken, "/dashboard/tasks/"+newID)
	require.Contains(t, page, `id="forked-from"`)
	require.Contains(t, page, doc.TaskID)
	_, orig := e.get(t, adminToken, path)
	require.Contains(t, orig, `id="forks"`)
	require.Contains(t, orig, newID)
}
