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
	}, taskrouter.ToolOptions{})
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
