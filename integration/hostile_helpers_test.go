package integration

// Helpers of the hostile-input suite (hostile_test.go): the stores every
// family runs on, damaging a stored record in place, and answers reduced
// to comparable outcomes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// hostileStores are the stores the families whose outcome depends on the
// store run on: a bbolt file and a fresh PostgreSQL database.
var hostileStores = []struct {
	name string
	spec func(t *testing.T) string
}{
	{"bbolt", func(t *testing.T) string { return filepath.Join(t.TempDir(), "tasks.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }},
}

// hostilePaths are the two ways an HTTP request is served: the fast path
// and the SDK's own handlers.
var hostilePaths = []struct {
	name   string
	noFast bool
}{{"fast", false}, {"sdk", true}}

// hostileDamage makes the stored JSON of task id invalid, in place, in the
// store spec names (stopped, for a bbolt file): part "result" damages its
// result, "error" its error's data. The record stays decodable by the
// store: only the JSON it holds is broken, as a bad disk sector or a
// hand edit leaves it.
func hostileDamage(t *testing.T, spec, id, part string) {
	t.Helper()
	marker := map[string][]byte{"result": []byte(`{"content"`), "error": []byte(`{"why"`)}[part]
	require.NotNil(t, marker, "part %q", part)
	if builder.IsPostgresDSN(spec) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, spec)
		require.NoError(t, err)
		defer conn.Close(ctx)
		col := map[string]string{"result": "result", "error": "error_data"}[part]
		tag, err := conn.Exec(ctx, fmt.Sprintf("UPDATE %s.tasks SET %s = $2 WHERE id = $1", postgres.DefaultSchema, col), id, []byte(`!"broken`))
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected(), "task %s", id)
		return
	}
	db, err := bolt.Open(spec, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("results"))
		v := append([]byte(nil), b.Get([]byte(id))...)
		i := bytes.Index(v, marker)
		if i < 0 {
			return fmt.Errorf("task %s: no %s in its stored result %q", id, part, v)
		}
		v[i] = '!' // same length: the record still decodes
		return b.Put([]byte(id), v)
	}))
}

// hookServer is an in-process server with the webhook handler mounted,
// serving the workflow "approve": a client step (tool "decide", which
// takes {approved: boolean, reason: string}, both required) an outside
// system may perform through the webhook, then an event "shipped" whose
// payload is {version: string}.
type hookServer struct {
	srv   *builder.Server
	mcp   string // the MCP endpoint
	hooks string // the webhook handler's base URL
}

type hookDecideIn struct {
	Approved bool   `json:"approved"`
	Reason   string `json:"reason"`
}

func newHookServer(t *testing.T, spec string) *hookServer {
	t.Helper()
	mux := http.NewServeMux()
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	b := builder.New("hooks", "1").WithDB(spec).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond}).
		WithWorkflowOptions(workflow.Options{WebhookURL: hs.URL + "/hooks"})
	builder.Tool(b, &mcp.Tool{Name: "decide"}, func(ctx context.Context, _ *mcp.CallToolRequest, in hookDecideIn) (*mcp.CallToolResult, hookDecideIn, error) {
		return nil, in, nil
	}, nil)
	b.TaskWorkflow(workflow.New("approve", "approve, then wait for the shipment").Step(
		workflow.Client("decide", "decide").Bind("approved", workflow.FromClient("true to approve")).
			Bind("reason", workflow.FromClient("why")).AcceptsWebhook(),
		workflow.Event("shipped", "the release shipped").WithPayload(map[string]any{
			"type": "object", "properties": map[string]any{"version": map[string]any{"type": "string"}}, "required": []any{"version"}}),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	mux.Handle("/hooks/", http.StripPrefix("/hooks", srv.Bridge.WebhookHandler()))
	t.Cleanup(func() { _ = srv.Close() })
	return &hookServer{srv: srv, mcp: hs.URL + "/mcp", hooks: hs.URL + "/hooks"}
}

// post sends body to the webhook of task id's step with token; it
// returns the HTTP status and the decoded JSON answer.
func (h *hookServer) post(t *testing.T, id, step, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.hooks+"/"+id+"/"+step, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// hostileFamilies is the hostile-input suite: what a hostile client tries,
// family by family, and the tests that try it (TestHostileFamilies keeps
// every name pointing at a test). README "Security" says what each
// family may and may not achieve.
var hostileFamilies = []struct {
	family string
	tests  []string
}{
	{"malformed params.task (types, negative, NaN, overflow, escaped key, duplicates)", []string{"TestHostileInput"}},
	{"malformed bodies (not JSON, two values, trailing bytes, empty, deep, over 8 MiB, jsonrpc 1.0)", []string{"TestHostileInput"}},
	{"unknown, forged and odd task ids (random, 10 KiB, NUL and RTL, wrong JSON type)", []string{"TestHostileInput"}},
	{"forged, foreign, truncated and oversized list cursors", []string{"TestHostileInput"}},
	{"continuation abuse (_task_id types, a tool task's id, _task_vars)", []string{"TestHostileInput"}},
	{"dialect rules (methods a dialect lacks, no extension declared, missing params)", []string{"TestHostileInput", "TestHostileUnknownMethod2026"}},
	{"headers (Mcp-Name mismatched or twice, DNS rebinding, unknown protocol version)", []string{"TestHostileInput"}},
	{"Mcp-Name against a body naming its task twice in different case", []string{"TestHostileNameHeaderAmbiguousBody"}},
	{"owners on every path (tasks/*, task tools, continuations, resume, fork, listen)", []string{"TestHostileOwnersEveryPath", "TestIsolationBetweenOwners", "TestTokenOwnersAcrossRestarts"}},
	{"authentication (no token, unknown token, another user's token on a session)", []string{"TestHostileInput"}},
	{"differential: the fast path and the SDK's answer alike", []string{"TestHostileInput", "TestHostileDamagedRecords", "TestHostileRequestIDs", "TestHostileNameHeaderAmbiguousBody", "TestHostileSessionDeleteEndsWaits"}},
	{"quotas per kind of task (tool, workflow prompt, workflow tool, fork) and across a SIGKILL", []string{"TestHostileQuotasPerKind", "TestHostileWorkflowFloodAcrossSIGKILL", "TestStatelessFloodIsBoundedPerAddress"}},
	{"workflow steps beyond MaxConcurrent", []string{"TestHostileStepsBounded"}},
	{"concurrent forks of one task", []string{"TestHostileConcurrentForks"}},
	{"forks cut by a SIGKILL; replies lost (orphans)", []string{"TestHostileForksCutBySIGKILL"}},
	{"extreme numbers (ttl 1e300 and 2^53, sleep lengths NaN, Inf, 1e308, MaxInt64, ids 1e300, 2^53+1, 2.5)", []string{"TestHostileInput", "TestHostileOddLengths", "TestHostileRequestIDs"}},
	{"damaged stored records (result, error data) on bbolt and PostgreSQL", []string{"TestHostileDamagedRecords"}},
	{"writes the store refuses for good (oversized outputs and results)", []string{"TestHostilePermanentWriteFailure", "TestHostileInput"}},
	{"webhook bodies (not JSON, not an object, not matching the step)", []string{"TestHostileWebhookBodies"}},
	{"stdio lines go-sdk cannot read", []string{"TestHostileStdioLines"}},
	{"errors without a code (code 0)", []string{"TestHostileNoCodeZero"}},
	{"a session deleted while a request waits", []string{"TestHostileSessionDeleteEndsWaits"}},
	{"what /metrics tells without a token", []string{"TestHostileMetricsAreCountsOnly"}},
	{"stream resumption ids (Last-Event-ID carrying an object, null, 1e300, 2.5, 2^53+1)", []string{"TestHostileStreamResumeIDs"}},
	{"webhooks and deliveries of other owners (anonymous stateless, sessions, tokens; caps, expiry) on bbolt and PostgreSQL", []string{"TestHostileWebhookOwners"}},
	{"webhook secrets read again (tasks/get, tasks/result, task_result, the dashboard's read)", []string{"TestHostileWebhookOwners"}},
	{"webhook addresses (local-use NAT64, 6to4, translated loopback)", []string{"TestHostileWebhookAddresses"}},
	{"a receiver that accepts and never answers (timers of other owners, held connections, circuits)", []string{"TestHostileSilentReceiverDelaysNoTimer"}},
	{"queue keys, debounce and holders across owners; priorities at extremes (1e308, -5), on bbolt and PostgreSQL", []string{"TestHostileQueueOwners"}},
	{"a child waiting for room under the task limits; a user's child reached anonymously", []string{"TestHostileChildWaitsForRoom"}},
	{"dashboard form tokens (missing, a byte off, prefix, longer) on every form", []string{"TestHostileDashboardFormTokens"}},
	{"the server's schedules and the tasks they start, to anonymous clients and other users", []string{"TestHostileScheduleOwners"}},
}

// onPaths runs f once per path (hostilePaths), as a subtest, with a server
// of o serving that path.
func onPaths(t *testing.T, o relServerOptions, f func(t *testing.T, path string, s *relServer)) {
	for _, p := range hostilePaths {
		t.Run(p.name, func(t *testing.T) {
			o := o
			o.httpOpts = &taskrouter.HTTPOptions{DisableFastPath: p.noFast}
			f(t, p.name, newRelServer(t, o))
		})
	}
}

// hostileUsers requires bearer tokens: "a" is alice, "b" is bob.
func hostileUsers() func(http.Handler) http.Handler {
	return auth.RequireBearerToken(relTokens(map[string]string{"a": "alice", "b": "bob"}), nil)
}

// hostileClients are alice's and bob's clients of s, in both dialects
// (the core ones initialized).
func hostileClients(t *testing.T, ctx context.Context, s *relServer) (aCore, aExt, bCore, bExt *relClient) {
	t.Helper()
	hc := newRelHTTPClient(8)
	aCore, aExt = newRelClient(s.url, hc, relCore, "a"), newRelClient(s.url, hc, relExt, "a")
	bCore, bExt = newRelClient(s.url, hc, relCore, "b"), newRelClient(s.url, hc, relExt, "b")
	require.NoError(t, aCore.initialize(ctx))
	require.NoError(t, bCore.initialize(ctx))
	return aCore, aExt, bCore, bExt
}

// serveBuilder builds b and serves it over Streamable HTTP on 127.0.0.1
// until t ends; it returns the server and its MCP endpoint.
func serveBuilder(t *testing.T, b *builder.Builder) (*builder.Server, string) {
	t.Helper()
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	hs := httptest.NewServer(srv.HTTPHandler(nil))
	t.Cleanup(hs.Close)
	return srv, hs.URL
}
