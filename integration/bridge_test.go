package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/rpcconn"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// bridgeFixture is a built server with a small workflow:
//
//	prepare (server) -> enrich (server, field path) -> approve (client) -> finish (server, needs approve)
type bridgeFixture struct {
	srv       *builder.Server
	url       string
	failures  atomic.Int32 // finish fails while > 0
	gate      chan struct{}
	gateOn    atomic.Bool
	enrichRan chan string // task ids, from the idempotency key, when enrich starts
}

type prepIn struct {
	Topic string `json:"topic"`
}
type prepOut struct {
	Topic string   `json:"topic"`
	Items []string `json:"items"`
}
type enrichIn struct {
	First string `json:"first"`
}
type enrichOut struct {
	Enriched string `json:"enriched"`
}
type approveIn struct {
	Text     string `json:"text"`
	Approver string `json:"approver"`
}
type approveOut struct {
	Approved string `json:"approved"`
}
type finishIn struct {
	Approved string `json:"approved"`
	Approver string `json:"approver,omitempty"`
}

func newBridgeFixture(t *testing.T, dbPath string) *bridgeFixture {
	t.Helper()
	f := &bridgeFixture{gate: make(chan struct{}), enrichRan: make(chan string, 16)}
	f.srv = f.build(t, dbPath)
	return f
}

func (f *bridgeFixture) build(t *testing.T, dbPath string) *builder.Server {
	t.Helper()
	if dbPath == "" {
		dbPath = filepath.Join(t.TempDir(), "tasks.db")
	}
	b := builder.New("bridge-test", "1").WithDB(dbPath).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond})
	var router atomic.Pointer[taskrouter.Router]
	builder.Tool(b, &mcp.Tool{Name: "prepare"}, func(ctx context.Context, _ *mcp.CallToolRequest, in prepIn) (*mcp.CallToolResult, prepOut, error) {
		return nil, prepOut{Topic: in.Topic, Items: []string{in.Topic + "-1", in.Topic + "-2"}}, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "enrich"}, func(ctx context.Context, req *mcp.CallToolRequest, in enrichIn) (*mcp.CallToolResult, enrichOut, error) {
		if key, ok := req.Params.GetMeta()[mcptask.MetaIdempotencyKey].(string); ok {
			id, _, _ := strings.Cut(key, "/")
			select {
			case f.enrichRan <- id:
			default:
			}
		}
		if f.gateOn.Load() {
			select {
			case <-f.gate:
			case <-ctx.Done():
				return nil, enrichOut{}, ctx.Err()
			}
		}
		return nil, enrichOut{Enriched: "enriched " + in.First}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "approve"}, func(ctx context.Context, _ *mcp.CallToolRequest, in approveIn) (*mcp.CallToolResult, approveOut, error) {
		return nil, approveOut{Approved: in.Text + " (approved by " + in.Approver + ")"}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "finish"}, func(ctx context.Context, _ *mcp.CallToolRequest, in finishIn) (*mcp.CallToolResult, any, error) {
		if f.failures.Load() > 0 {
			f.failures.Add(-1)
			return nil, nil, errors.New("finish: downstream unavailable")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "finished: " + in.Approved + " / " + in.Approver}}}, nil, nil
	}, nil)
	wf := func(name string) *workflow.Definition {
		return workflow.New(name, "prepare, enrich, approve, finish").
			Arg("topic", "what to work on", true).
			Step(
				workflow.Server("prepare", "prepare").Bind("topic", workflow.PromptArg("topic")).As("prep"),
				workflow.Server("enrich", "enrich").Bind("first", workflow.StepOutput("prep", "items.0")),
				workflow.Client("approve", "approve").Bind("text", workflow.StepOutput("enrich", "enriched")).
					Bind("approver", workflow.FromClient("your name")).WithGuidance("Approve the enriched text."),
				workflow.Server("finish", "finish").Bind("approved", workflow.StepOutput("approve", "approved")).
					Bind("approver", workflow.TaskVar("approver")).WithRetry(),
			)
	}
	b.TaskWorkflow(wf("flow")).PlainWorkflow(wf("flow_plain"))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	router.Store(srv.Router)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func (f *bridgeFixture) serveHTTP(t *testing.T) string {
	t.Helper()
	if f.url != "" {
		return f.url
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", f.srv.HTTPHandler(nil))
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	f.url = "http://" + ln.Addr().String() + "/mcp"
	return f.url
}

// taskGet is the extension-dialect tasks/get reply.
type taskGet struct {
	mcp.ResultBase
	TaskID        string          `json:"taskId"`
	Status        string          `json:"status"`
	StatusMessage string          `json:"statusMessage"`
	Result        json.RawMessage `json:"result"`
}

// sdkClient connects a go-sdk client (2026-07-28, declaring the tasks
// extension) over memory or HTTP.
func (f *bridgeFixture) sdkClient(t *testing.T, overHTTP bool) *mcp.ClientSession {
	t.Helper()
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(mcptask.ExtensionID, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, &mcp.ClientOptions{Capabilities: caps})
	require.NoError(t, mcp.AddSendingCustomMethod[*taskrouter.TaskIDParams, *taskGet](c, "tasks/get"))
	require.NoError(t, mcp.AddSendingCustomMethod[*taskrouter.TaskIDParams, *taskGet](c, "tasks/cancel"))
	var tr mcp.Transport
	if overHTTP {
		tr = &mcp.StreamableClientTransport{Endpoint: f.serveHTTP(t), MaxRetries: -1}
	} else {
		var err error
		tr, err = f.srv.Connect(context.Background())
		require.NoError(t, err)
	}
	cs, err := c.Connect(context.Background(), tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func getTask(t *testing.T, cs *mcp.ClientSession, id string) *taskGet {
	t.Helper()
	res, err := mcp.CallCustomMethod[*taskrouter.TaskIDParams, *taskGet](context.Background(), cs, "tasks/get", &taskrouter.TaskIDParams{TaskID: id})
	require.NoError(t, err)
	return res
}

func startFlow(t *testing.T, cs *mcp.ClientSession, topic string) (*mcp.GetPromptResult, *handoff.Document) {
	t.Helper()
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "flow", Arguments: map[string]string{"topic": topic}})
	require.NoError(t, err)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	return res, doc
}

func approve(t *testing.T, cs *mcp.ClientSession, id string, vars map[string]any) (*mcp.CallToolResult, error) {
	t.Helper()
	meta := mcp.Meta{mcptask.MetaTaskID: id}
	if vars != nil {
		meta[mcptask.MetaTaskVars] = vars
	}
	return cs.CallTool(context.Background(), &mcp.CallToolParams{Meta: meta, Name: "approve",
		Arguments: map[string]any{"text": "enriched t-1", "approver": "ada"}})
}

func progressOf(t *testing.T, st store.Store, id string) (*store.Task, *workflow.Progress) {
	t.Helper()
	task, err := st.Get(context.Background(), id)
	require.NoError(t, err)
	var p workflow.Progress
	require.NoError(t, json.Unmarshal(task.Variables[workflow.VarProgress], &p))
	return task, &p
}

// TestBridgeLifecycle is create -> execute -> handoff -> continue ->
// complete through a real server and go-sdk client (FNDX-01, EXEC-02,
// HAND-01..03, CONT-01..03, ADVW-01), in memory and over HTTP.
func TestBridgeLifecycle(t *testing.T) {
	for _, overHTTP := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "http"}[overHTTP], func(t *testing.T) {
			f := newBridgeFixture(t, "")
			cs := f.sdkClient(t, overHTTP)
			res, doc := startFlow(t, cs, "t")

			// HAND-01/02: the final assistant message is prose + JSON and
			// names the task; the same document is in _meta.
			last := res.Messages[len(res.Messages)-1]
			require.Equal(t, mcp.Role("assistant"), last.Role)
			text := last.Content.(*mcp.TextContent).Text
			require.Contains(t, text, doc.TaskID)
			require.Contains(t, text, "```json")
			require.Contains(t, res.Meta, mcptask.MetaHandoff)
			parsed, err := handoff.Parse(text)
			require.NoError(t, err)
			require.Equal(t, doc.TaskID, parsed.TaskID)

			// EXEC-02: paused at the client step, task still working.
			require.Equal(t, "working", doc.Status)
			require.Equal(t, []string{"prepare", "enrich"}, stepNames(doc.CompletedSteps))
			require.Len(t, doc.RemainingSteps, 2)
			rs := doc.RemainingSteps[0]
			require.Equal(t, "approve", rs.Name)
			require.Equal(t, mcptask.ExecClient, rs.Execution)
			// HAND-03: resolved arguments where known, placeholders otherwise.
			require.JSONEq(t, `"enriched t-1"`, string(rs.Arguments["text"]))
			require.True(t, handoff.IsPlaceholder(rs.Arguments["approver"]))
			require.Equal(t, "Approve the enriched text.", rs.Guidance)
			require.Equal(t, mcptask.ExecServer, doc.RemainingSteps[1].Execution)
			require.Equal(t, "working", getTask(t, cs, doc.TaskID).Status)

			// FNDX-03: progress is in the task variables.
			_, p := progressOf(t, f.srv.Store, doc.TaskID)
			require.Equal(t, []string{"prepare", "enrich"}, p.CompletedSteps)
			require.Equal(t, []string{"approve", "finish"}, p.RemainingSteps)
			require.JSONEq(t, `{"topic":"t","items":["t-1","t-2"]}`, string(p.Outputs["prep"]))

			// CONT-01/02: continue with _task_id; ADVW-01: _task_vars feeds
			// the TaskVar source of the last step.
			out, err := approve(t, cs, doc.TaskID, map[string]any{"approver": "ada"})
			require.NoError(t, err)
			require.False(t, out.IsError)
			summary := out.Meta[mcptask.MetaWorkflow].(map[string]any)
			require.Equal(t, "completed", summary["status"])

			// CONT-03: the task is completed with the workflow's result.
			got := getTask(t, cs, doc.TaskID)
			require.Equal(t, "completed", got.Status)
			var final mcp.GetPromptResult
			require.NoError(t, json.Unmarshal(got.Result, &final))
			fdoc, err := handoff.FromPromptResult(&final)
			require.NoError(t, err)
			require.Equal(t, "completed", fdoc.Status)
			require.Empty(t, fdoc.RemainingSteps)
			require.Equal(t, []string{"prepare", "enrich", "approve", "finish"}, stepNames(fdoc.CompletedSteps))
			require.Contains(t, string(fdoc.CompletedSteps[3].Result), "finished: enriched t-1 (approved by ada) / ada")
		})
	}
}

func stepNames(steps []handoff.CompletedStep) []string {
	out := []string{}
	for _, s := range steps {
		out = append(out, s.Name)
	}
	return out
}

// TestBridgeCoreDialectResult follows the workflow with a core-dialect
// client over HTTP: tasks/result blocks and returns the workflow result.
func TestBridgeCoreDialectResult(t *testing.T) {
	f := newBridgeFixture(t, "")
	c, err := rpcconn.Dial(context.Background(), &mcp.StreamableClientTransport{Endpoint: f.serveHTTP(t), MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	require.NoError(t, c.Call(ctx, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "core", "version": "1"}}, nil))
	require.NoError(t, c.Notify(ctx, "notifications/initialized", map[string]any{}))
	var prompt mcp.GetPromptResult
	require.NoError(t, c.Call(ctx, "prompts/get", map[string]any{"name": "flow", "arguments": map[string]string{"topic": "t"}}, &prompt))
	doc, err := handoff.FromPromptResult(&prompt)
	require.NoError(t, err)
	require.Equal(t, "tasks/result", doc.Continuation.ResultMethod)

	waited := make(chan json.RawMessage, 1)
	go func() {
		var raw json.RawMessage
		if err := c.Call(ctx, "tasks/result", map[string]any{"taskId": doc.TaskID}, &raw); err == nil {
			waited <- raw
		}
		close(waited)
	}()
	var out mcp.CallToolResult
	require.NoError(t, c.Call(ctx, "tools/call", map[string]any{"name": "approve", "arguments": map[string]any{"text": "x", "approver": "bo"},
		"_meta": map[string]any{"_task_id": doc.TaskID, "_task_vars": map[string]any{"approver": "bo"}}}, &out))
	select {
	case raw, ok := <-waited:
		require.True(t, ok, "tasks/result failed")
		var final mcp.GetPromptResult
		require.NoError(t, json.Unmarshal(raw, &final))
		fdoc, err := handoff.FromPromptResult(&final)
		require.NoError(t, err)
		require.Equal(t, "completed", fdoc.Status)
		require.Contains(t, string(raw), mcptask.MetaRelatedTask)
	case <-time.After(30 * time.Second):
		t.Fatal("tasks/result did not return after the workflow completed")
	}
}

// TestBridgeStepByStepWrites checks EXEC-01: each server step's result and
// the progress are committed before the next step starts.
func TestBridgeStepByStepWrites(t *testing.T) {
	f := newBridgeFixture(t, "")
	cs := f.sdkClient(t, false)
	f.gateOn.Store(true)
	done := make(chan *handoff.Document, 1)
	go func() {
		_, doc := startFlow(t, cs, "s")
		done <- doc
	}()
	// While "enrich" is blocked, "prepare" is already durable.
	var taskID string
	require.Eventually(t, func() bool {
		page, err := f.srv.Store.List(context.Background(), store.ListOptions{Owner: taskrouter.LocalOwner})
		if err != nil || len(page.Tasks) == 0 {
			return false
		}
		taskID = page.Tasks[0].ID
		_, p := progressOf(t, f.srv.Store, taskID)
		return len(p.CompletedSteps) == 1
	}, 30*time.Second, 5*time.Millisecond)
	_, p := progressOf(t, f.srv.Store, taskID)
	require.Equal(t, []string{"prepare"}, p.CompletedSteps)
	require.Contains(t, p.Outputs, "prep")
	require.NotContains(t, p.Outputs, "enrich")
	close(f.gate)
	doc := <-done
	require.Equal(t, taskID, doc.TaskID)
}

// TestBridgeFailingStepThenRetry: a retryable server step that fails once
// is retried by the server at once, and the workflow completes; the
// attempts are recorded.
func TestBridgeFailingStepThenRetry(t *testing.T) {
	f := newBridgeFixture(t, "")
	cs := f.sdkClient(t, false)
	_, doc := startFlow(t, cs, "t")
	f.failures.Store(1)
	out, err := approve(t, cs, doc.TaskID, map[string]any{"approver": "ada"})
	require.NoError(t, err)
	summary := out.Meta[mcptask.MetaWorkflow].(map[string]any)
	require.Equal(t, "completed", summary["status"])
	task, p := progressOf(t, f.srv.Store, doc.TaskID)
	require.Equal(t, mcptask.StatusCompleted, task.Status)
	fin := p.Steps[3]
	require.Equal(t, 2, fin.Attempts)
	require.Len(t, fin.History, 2)
	require.Equal(t, workflow.ReasonFirst, fin.History[0].Reason)
	require.Equal(t, workflow.OutcomeError, fin.History[0].Outcome)
	require.Equal(t, workflow.ReasonRetry, fin.History[1].Reason)
	require.Equal(t, workflow.OutcomeOK, fin.History[1].Outcome)
	require.Len(t, p.Errors, 1)
}

// TestBridgeGiveUpThenResume: when the server gives up on a step (its
// retries are spent), the task stays working with the error recorded, the
// handoff hands the step to the client, and a resume (prompts/get with
// _meta._task_id) makes the server try again.
func TestBridgeGiveUpThenResume(t *testing.T) {
	f := newBridgeFixture(t, "")
	cs := f.sdkClient(t, false)
	_, doc := startFlow(t, cs, "t")
	f.failures.Store(3)
	out, err := approve(t, cs, doc.TaskID, map[string]any{"approver": "ada"})
	require.NoError(t, err)
	summary := out.Meta[mcptask.MetaWorkflow].(map[string]any)
	require.Equal(t, "working", summary["status"])
	require.Contains(t, summary["pauseReason"], "downstream unavailable")
	require.Equal(t, []any{"finish"}, summary["clientSteps"])
	task, p := progressOf(t, f.srv.Store, doc.TaskID)
	require.Equal(t, mcptask.StatusWorking, task.Status)
	require.Contains(t, task.StatusMessage, `step "finish" (tool "finish") failed after 3 attempt(s): finish: downstream unavailable; the client may perform it`)
	require.Len(t, p.Errors, 3)
	require.True(t, p.Steps[3].HandedToClient)

	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID}, Name: "flow"})
	require.NoError(t, err)
	rdoc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	require.Equal(t, doc.TaskID, rdoc.TaskID)
	require.Equal(t, []string{"prepare", "enrich", "approve", "finish"}, stepNames(rdoc.CompletedSteps), "resume re-ran the step")
	require.Equal(t, "completed", getTask(t, cs, doc.TaskID).Status)
	_, p = progressOf(t, f.srv.Store, doc.TaskID)
	require.Equal(t, 4, p.Steps[3].Attempts)
	require.Equal(t, workflow.ReasonResume, p.Steps[3].History[3].Reason)
}

// TestBridgeClientRetriesFailedStep: the client performs a server step the
// server gave up on by calling its tool with _task_id.
func TestBridgeClientRetriesFailedStep(t *testing.T) {
	f := newBridgeFixture(t, "")
	cs := f.sdkClient(t, false)
	_, doc := startFlow(t, cs, "t")
	f.failures.Store(3)
	_, err := approve(t, cs, doc.TaskID, map[string]any{"approver": "ada"})
	require.NoError(t, err)
	out, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID}, Name: "finish",
		Arguments: map[string]any{"approved": "by hand", "approver": "ada"}})
	require.NoError(t, err)
	require.False(t, out.IsError)
	require.Equal(t, "completed", out.Meta[mcptask.MetaWorkflow].(map[string]any)["status"])
	require.Equal(t, "completed", getTask(t, cs, doc.TaskID).Status)
}

// TestBridgePlainWorkflowUnchanged: a plain workflow next to the task-aware
// one runs its server steps during prompts/get and creates no task (INTG-02).
func TestBridgePlainWorkflowUnchanged(t *testing.T) {
	f := newBridgeFixture(t, "")
	cs := f.sdkClient(t, false)
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "flow_plain", Arguments: map[string]string{"topic": "p"}})
	require.NoError(t, err)
	require.NotContains(t, res.Meta, mcptask.MetaHandoff)
	var all []string
	for _, m := range res.Messages {
		all = append(all, m.Content.(*mcp.TextContent).Text)
	}
	require.Contains(t, fmt.Sprint(all), `Result of step "enrich"`)
	require.Contains(t, res.Messages[len(res.Messages)-1].Content.(*mcp.TextContent).Text, `approve (performed by you)`)
	page, err := f.srv.Store.List(context.Background(), store.ListOptions{Owner: taskrouter.LocalOwner})
	require.NoError(t, err)
	require.Empty(t, page.Tasks)
	_, err = cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "flow_plain"})
	require.Error(t, err, "a missing required argument is an error")
}

// TestBridgeRestartMidWorkflow closes everything while the workflow waits
// for the client, reopens the bbolt file, and continues (ADVW-02).
func TestBridgeRestartMidWorkflow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	f := newBridgeFixture(t, path)
	cs := f.sdkClient(t, false)
	_, doc := startFlow(t, cs, "r")
	require.NoError(t, cs.Close())
	require.NoError(t, f.srv.Close())

	f2 := newBridgeFixture(t, path)
	cs2 := f2.sdkClient(t, false)
	require.Equal(t, "working", getTask(t, cs2, doc.TaskID).Status)
	out, err := approve(t, cs2, doc.TaskID, map[string]any{"approver": "ada"})
	require.NoError(t, err)
	require.Equal(t, "completed", out.Meta[mcptask.MetaWorkflow].(map[string]any)["status"])
}

// TestBridgeRestartResumesServerSteps: a server step was running when the
// server stopped; on start the engine re-runs it (recorded as a re-run
// after a restart, with the same idempotency key) and completes the
// workflow with no client action.
func TestBridgeRestartResumesServerSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	f := newBridgeFixture(t, path)
	cs := f.sdkClient(t, false)
	f.gateOn.Store(true)
	started := make(chan *handoff.Document, 1)
	go func() {
		res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "flow", Arguments: map[string]string{"topic": "r"}})
		if err == nil {
			doc, _ := handoff.FromPromptResult(res)
			started <- doc
		}
		close(started)
	}()
	taskID := <-f.enrichRan // enrich is running, blocked on the gate
	require.NoError(t, f.srv.Close())
	<-started

	st, err := bboltstore.Open(path, nil)
	require.NoError(t, err)
	_, p := progressOf(t, st, taskID)
	require.NoError(t, st.Close())
	require.Equal(t, mcptask.StepPending, p.Steps[1].Status, "a graceful stop hands the running step back")
	require.Equal(t, workflow.OutcomeStopped, p.Steps[1].History[0].Outcome)
	require.Zero(t, p.Steps[1].Interrupted, "a graceful stop is not a crash")

	f2 := newBridgeFixture(t, path)
	cs2 := f2.sdkClient(t, false)
	require.Eventually(t, func() bool {
		_, p := progressOf(t, f2.srv.Store, taskID)
		return p.Steps[1].Status == mcptask.StepCompleted
	}, 30*time.Second, 10*time.Millisecond)
	tk, p := progressOf(t, f2.srv.Store, taskID)
	require.Equal(t, mcptask.StatusWorking, tk.Status, "now waiting for the client")
	enrich := p.Steps[1]
	require.Equal(t, 2, enrich.Attempts)
	require.Equal(t, workflow.ReasonRestart, enrich.History[1].Reason)
	require.Equal(t, taskID+"/enrich", enrich.IdempotencyKey)
	out, err := approve(t, cs2, taskID, map[string]any{"approver": "ada"})
	require.NoError(t, err)
	require.Equal(t, "completed", out.Meta[mcptask.MetaWorkflow].(map[string]any)["status"])
}

// TestBridgeBadTaskID: every bad _task_id gets -32602 and records nothing.
func TestBridgeBadTaskID(t *testing.T) {
	f := newBridgeFixture(t, "")
	cs := f.sdkClient(t, false)
	_, doc := startFlow(t, cs, "b")
	// A finished workflow task.
	_, done := startFlow(t, cs, "d")
	_, err := approve(t, cs, done.TaskID, map[string]any{"approver": "x"})
	require.NoError(t, err)
	// A task that is not a workflow task.
	plainTask, err := f.srv.Router.CreateTask(context.Background(), nil, store.Request{Method: "tools/call", Name: "prepare"}, &taskrouter.CreateOptions{Kind: taskrouter.KindTool})
	require.NoError(t, err)

	before, _ := progressOf(t, f.srv.Store, doc.TaskID)
	cases := []struct {
		name string
		meta mcp.Meta
		tool string
		want string
	}{
		{"number", mcp.Meta{"_task_id": 42}, "approve", "must be a non-empty string"},
		{"empty", mcp.Meta{"_task_id": ""}, "approve", "must be a non-empty string"},
		{"unknown", mcp.Meta{"_task_id": "0123456789abcdef0123456789abcdef"}, "approve", "unknown workflow task"},
		{"finished", mcp.Meta{"_task_id": done.TaskID}, "approve", "already done"},
		{"not a workflow", mcp.Meta{"_task_id": plainTask.ID}, "approve", "not a workflow task"},
		{"no matching step", mcp.Meta{"_task_id": doc.TaskID}, "prepare", "matches no remaining step"},
		{"reserved variable", mcp.Meta{"_task_id": doc.TaskID, "_task_vars": map[string]any{"_workflow.progress": 1}}, "approve", "reserved"},
		{"variables not an object", mcp.Meta{"_task_id": doc.TaskID, "_task_vars": "x"}, "approve", "must be an object"},
	}
	for _, c := range cases {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Meta: c.meta, Name: c.tool, Arguments: map[string]any{"text": "x", "approver": "y", "topic": "z"}})
		var je *jsonrpc.Error
		require.ErrorAs(t, err, &je, c.name)
		require.EqualValues(t, jsonrpc.CodeInvalidParams, je.Code, c.name)
		require.Contains(t, je.Message, c.want, c.name)
	}
	after, _ := progressOf(t, f.srv.Store, doc.TaskID)
	require.Equal(t, before.Version, after.Version, "bad continuations recorded nothing")
}

// sdkClientCore is a core-dialect raw client over HTTP (its own session,
// so its own owner).
func (f *bridgeFixture) sdkClientCore(t *testing.T) *rpcconn.Conn {
	t.Helper()
	c, err := rpcconn.Dial(context.Background(), &mcp.StreamableClientTransport{Endpoint: f.serveHTTP(t), MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Call(context.Background(), "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "other", "version": "1"}}, nil))
	require.NoError(t, c.Notify(context.Background(), "notifications/initialized", map[string]any{}))
	return c
}

// TestBridgeConcurrentContinuations: four clients race to perform the same
// step with the same arguments; exactly one runs and records it, and the
// others get the recorded result (a retry is idempotent).
func TestBridgeConcurrentContinuations(t *testing.T) {
	f := newBridgeFixture(t, "")
	cs := f.sdkClient(t, false)
	_, doc := startFlow(t, cs, "c")
	var wg sync.WaitGroup
	var ran, replayed atomic.Int32
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := approve(t, cs, doc.TaskID, map[string]any{"approver": "ada"})
			if !assert.NoError(t, err) {
				return
			}
			if out.Meta[mcptask.MetaWorkflow].(map[string]any)["replayed"] == true {
				replayed.Add(1)
			} else {
				ran.Add(1)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1, ran.Load())
	require.EqualValues(t, 3, replayed.Load())
	_, p := progressOf(t, f.srv.Store, doc.TaskID)
	require.Equal(t, 1, p.Steps[2].Attempts)
}
