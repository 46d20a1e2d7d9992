package integration

// The fixture of hostile_owners_test.go: a server that takes anonymous
// requests (stateless, and on sessions) and bearer tokens alike, with
// workflows on queues (keyed, debounced, prioritized), a workflow that
// starts a child, and one that sleeps.

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/dashboard"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// ownersServer is the fixture's server over Streamable HTTP on 127.0.0.1.
type ownersServer struct {
	srv   *builder.Server
	st    store.Store
	url   string
	close func()

	mu    sync.Mutex
	gates map[string]chan struct{} // repo -> closed when its deploys may end
}

// gate returns the channel the deploys of repo wait on.
func (s *ownersServer) gate(repo string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gates[repo]
	if g == nil {
		g = make(chan struct{})
		s.gates[repo] = g
	}
	return g
}

// release lets the deploys of repo end.
func (s *ownersServer) release(repo string) { close(s.gate(repo)) }

// ownersOptions configure the fixture.
type ownersOptions struct {
	db     string // a bbolt file or a postgres:// DSN; empty: a new bbolt file
	router taskrouter.Options
	// sharedKeys declares the keys of the "deploys" queue shared across
	// owners.
	sharedKeys bool
}

// ownersDashboardToken is the fixture's dashboard's admin token.
const ownersDashboardToken = "dashboard-admin-token"

// Tokens of the fixture: "a" is alice, "b" is bob; a request without
// one is anonymous.
var ownersTokens = map[string]string{"a": "alice", "b": "bob"}

// optionalBearer checks a bearer token when the request carries one and
// lets a request without one through anonymously: a server open to
// anonymous clients that also knows some users.
func optionalBearer(next http.Handler) http.Handler {
	authed := auth.RequireBearerToken(relTokens(ownersTokens), nil)(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			next.ServeHTTP(w, r)
			return
		}
		authed.ServeHTTP(w, r)
	})
}

type ownersDeployIn struct {
	Repo string `json:"repo"`
}

func newOwnersServer(t *testing.T, o ownersOptions) *ownersServer {
	t.Helper()
	spec := o.db
	if spec == "" {
		spec = filepath.Join(t.TempDir(), "tasks.db")
	}
	st, err := builder.OpenStore(context.Background(), spec, nil)
	require.NoError(t, err)
	cfg := o.router
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	b := builder.New("owners", "1").WithStore(st).WithoutEnv().WithRouterOptions(cfg).
		WithWorkflowOptions(workflow.Options{PromptWait: 100 * time.Millisecond})
	s := &ownersServer{st: st, gates: map[string]chan struct{}{}}
	hold := make(chan struct{})
	builder.Tool(b, &mcp.Tool{Name: "work", Description: "sleeps ms, then answers"}, func(ctx context.Context, _ *mcp.CallToolRequest, in relWorkIn) (*mcp.CallToolResult, any, error) {
		if in.Ms > 0 {
			select {
			case <-time.After(time.Duration(in.Ms) * time.Millisecond):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done " + in.Label}}}, nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "deploy", Description: "deploys until the server closes"}, func(ctx context.Context, _ *mcp.CallToolRequest, in ownersDeployIn) (*mcp.CallToolResult, any, error) {
		select {
		case <-hold:
		case <-s.gate(in.Repo):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed " + in.Repo}}}, nil, nil
	}, nil)
	deploys := &workflow.Queue{Name: "deploys", PerKey: 1, SharedKeys: o.sharedKeys}
	b.TaskWorkflow(workflow.New("deploy", "deploy a repo, one at a time per repo").Arg("repo", "the repo", true).
		Arg("priority", "its priority", false).Step(
		workflow.Server("deploy", "deploy").Bind("repo", workflow.PromptArg("repo")),
	).OnQueue(deploys, workflow.QueueKey(workflow.PromptArg("repo")), workflow.QueuePriority(workflow.PromptArg("priority"))))
	b.TaskWorkflow(workflow.New("ordered", "one run at a time, by priority").Arg("repo", "the repo", true).
		Arg("priority", "its priority", false).Step(
		workflow.Server("deploy", "deploy").Bind("repo", workflow.PromptArg("repo")),
	).OnQueue(&workflow.Queue{Name: "one", Concurrency: 1, SharedKeys: true}, workflow.QueuePriority(workflow.PromptArg("priority"))))
	b.TaskWorkflow(workflow.New("notify", "notify a user, the last of close starts").Arg("user", "who", true).Step(
		workflow.Server("notify", "work").Bind("label", workflow.PromptArg("user")),
	).OnQueue(&workflow.Queue{Name: "notify", Debounce: time.Hour}, workflow.QueueKey(workflow.PromptArg("user"))))
	b.TaskWorkflow(workflow.New("notes", "a child's work").Arg("repo", "the repo", true).Step(
		workflow.Server("collect", "work").Bind("label", workflow.PromptArg("repo")),
	))
	b.TaskWorkflow(workflow.New("train", "the notes, as a child workflow").Arg("repo", "the repo", true).Step(
		workflow.Child("notes", "notes").Bind("repo", workflow.PromptArg("repo")),
	))
	b.TaskWorkflow(workflow.New("nightly_report", "the nightly report").Arg("scheduled_at", "when", true).Step(
		workflow.Server("say", "work").Bind("label", workflow.PromptArg("scheduled_at"))))
	b.Schedule(workflow.Schedule{Name: "nightly", Workflow: "nightly_report", Cron: "0 2 * * *", Description: "the nightly report"})
	b.TaskWorkflow(workflow.New("nap", "sleep, then note").Step(
		workflow.Sleep("nap", 2*time.Second),
		workflow.Server("after", "work"),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", optionalBearer(srv.HTTPHandler(nil)))
	d, err := dashboard.New(srv.Router, &dashboard.Options{Token: ownersDashboardToken})
	require.NoError(t, err)
	mux.Handle("/dashboard/", d)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	s.srv, s.url = srv, "http://"+ln.Addr().String()+"/mcp"
	s.close = sync.OnceFunc(func() {
		close(hold)
		_ = hs.Close()
		_ = srv.Close()
		_ = st.Close()
	})
	t.Cleanup(s.close)
	return s
}

// ownersClients are the fixture's kinds of client: anonymous stateless
// (two: one would be a victim, one an attacker), anonymous with a
// session (two), and the two users (both dialects).
type ownersClients struct {
	anonA, anonB       *relClient // extension dialect, no token: stateless
	sessA, sessB       *relClient // core dialect, no token: a session each
	alice, bob         *relClient // extension dialect, tokens
	aliceCore, bobCore *relClient // core dialect, tokens
}

func (s *ownersServer) clients(t *testing.T, ctx context.Context) *ownersClients {
	t.Helper()
	hc := newRelHTTPClient(8)
	c := &ownersClients{
		anonA: newRelClient(s.url, hc, relExt, ""), anonB: newRelClient(s.url, hc, relExt, ""),
		sessA: newRelClient(s.url, hc, relCore, ""), sessB: newRelClient(s.url, hc, relCore, ""),
		alice: newRelClient(s.url, hc, relExt, "a"), bob: newRelClient(s.url, hc, relExt, "b"),
		aliceCore: newRelClient(s.url, hc, relCore, "a"), bobCore: newRelClient(s.url, hc, relCore, "b"),
	}
	for _, cc := range []*relClient{c.sessA, c.sessB, c.aliceCore, c.bobCore} {
		require.NoError(t, cc.initialize(ctx))
	}
	return c
}

// ownersTask reads task id as its owner's client sees it (tasks/get).
func ownersTask(t *testing.T, ctx context.Context, c *relClient, id string) map[string]any {
	t.Helper()
	return c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
}

// ownersWait waits (bounded) until task id, read by c, satisfies ok; it
// returns the task as last read.
func ownersWait(t *testing.T, ctx context.Context, c *relClient, id string, what string, ok func(task map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		task := ownersTask(t, ctx, c, id)
		if ok(task) {
			return task
		}
		require.True(t, time.Now().Before(deadline), "task %s: %s; last read %v", id, what, task)
		time.Sleep(20 * time.Millisecond)
	}
}
