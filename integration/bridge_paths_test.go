package integration

// Every path through a workflow ends somewhere sensible (the "never
// dead-ends" issue): optional arguments, failed server steps handed to the
// client, inputs that do not exist yet, honest status messages,
// dialect-true handoffs, private _meta keys, validation before a task
// exists, and cancellation. Each numbered item of that issue has a test
// here, named after it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/rpcconn"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

type shipFetchIn struct {
	Repo  string `json:"repo"`
	Since string `json:"since,omitempty"`
}
type shipFetchOut struct {
	Repo  string `json:"repo"`
	Since string `json:"since"`
	Count int    `json:"count"`
}
type shipTagIn struct {
	Repo    string `json:"repo"`
	Version string `json:"version"`
}
type shipTagOut struct {
	Tag string `json:"tag"`
}
type shipAnnounceIn struct {
	Tag     string `json:"tag"`
	Message string `json:"message"`
}
type shipAnnounceOut struct {
	Announced string `json:"announced"`
}
type shipCountIn struct {
	N int `json:"n"`
}

// shipFixture serves a workflow with an optional prompt argument, a server
// step that fails on bad input (handed to the client), a client step that
// needs its output, and a slow server step for cancellation; plus a prompt
// and tools that record the _meta their handlers see.
type shipFixture struct {
	srv      *builder.Server
	url      string
	mu       sync.Mutex
	sinceArg []string // the since argument fetch saw, "<absent>" when left out
	metas    []mcp.Meta
	slowRan  chan struct{}
}

var semverRE = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

func newShipFixture(t *testing.T, configure ...func(*builder.Builder)) *shipFixture {
	t.Helper()
	f := &shipFixture{slowRan: make(chan struct{}, 8)}
	b := builder.New("ship-test", "1").WithDB(filepath.Join(t.TempDir(), "tasks.db")).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "fetch"}, func(ctx context.Context, req *mcp.CallToolRequest, in shipFetchIn) (*mcp.CallToolResult, shipFetchOut, error) {
		var raw map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &raw)
		since := "<absent>"
		if v, ok := raw["since"].(string); ok {
			since = v
		}
		f.mu.Lock()
		f.sinceArg = append(f.sinceArg, since)
		f.mu.Unlock()
		return nil, shipFetchOut{Repo: in.Repo, Since: in.Since, Count: 3}, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "create_tag"}, func(ctx context.Context, _ *mcp.CallToolRequest, in shipTagIn) (*mcp.CallToolResult, shipTagOut, error) {
		if !semverRE.MatchString(in.Version) {
			return nil, shipTagOut{}, fmt.Errorf("version %q is not a semantic version like v1.2.3", in.Version)
		}
		return nil, shipTagOut{Tag: in.Repo + "@" + in.Version}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "announce"}, func(ctx context.Context, _ *mcp.CallToolRequest, in shipAnnounceIn) (*mcp.CallToolResult, shipAnnounceOut, error) {
		return nil, shipAnnounceOut{Announced: in.Tag + ": " + in.Message}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		f.slowRan <- struct{}{}
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "count"}, func(ctx context.Context, req *mcp.CallToolRequest, in shipCountIn) (*mcp.CallToolResult, any, error) {
		f.record(req.Params.GetMeta())
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(in.N)}}}, nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	b.Setup(func(s *mcp.Server) {
		s.AddPrompt(&mcp.Prompt{Name: "own"}, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			f.record(req.Params.GetMeta())
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}}, nil
		})
	})
	ship := func(name string) *workflow.Definition {
		return workflow.New(name, "fetch, tag, announce").
			Arg("repo", "repository", true).
			Arg("since", "tag to start from", false).
			Arg("version", "version to tag", false).
			Step(
				workflow.Server("fetch", "fetch").Bind("repo", workflow.PromptArg("repo")).Bind("since", workflow.PromptArg("since")),
				workflow.Server("tag", "create_tag").Bind("repo", workflow.PromptArg("repo")).
					Bind("version", workflow.PromptArg("version").WithDefault("next")),
				workflow.Client("announce", "announce").Bind("tag", workflow.StepOutput("tag", "tag")).
					Bind("message", workflow.FromClient("the announcement")),
			)
	}
	b.TaskWorkflow(ship("ship")).PlainWorkflow(ship("ship_plain"))
	b.TaskWorkflow(workflow.New("slowflow", "a slow server step").Step(
		workflow.Server("wait", "slow"),
		workflow.Client("after", "announce").Bind("tag", workflow.Const("x")).Bind("message", workflow.FromClient("m")),
	))
	b.TaskWorkflow(workflow.New("strict", "a step whose failure fails the workflow").Arg("version", "v", true).Step(
		workflow.Server("tag", "create_tag").Bind("repo", workflow.Const("r")).Bind("version", workflow.PromptArg("version")).FailsWorkflow(),
	))
	for _, c := range configure {
		c(b)
	}
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	f.srv = srv
	return f
}

func (f *shipFixture) record(m mcp.Meta) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := mcp.Meta{}
	for k, v := range m {
		c[k] = v
	}
	f.metas = append(f.metas, c)
}

func (f *shipFixture) bridge() *bridgeFixture { return &bridgeFixture{srv: f.srv, url: f.url} }

func (f *shipFixture) serveHTTP(t *testing.T) string {
	if f.url == "" {
		bf := f.bridge()
		f.url = bf.serveHTTP(t)
	}
	return f.url
}

// shipClient is a go-sdk client in the extension dialect (in memory or over
// HTTP) or the core dialect (raw, over HTTP).
type shipClient struct {
	name string
	ext  *mcp.ClientSession
	core *rpcconn.Conn
}

func (f *shipFixture) clients(t *testing.T) []*shipClient {
	bf := f.bridge()
	out := []*shipClient{
		{name: "extension/memory", ext: bf.sdkClient(t, false)},
		{name: "extension/http", ext: bf.sdkClient(t, true)},
	}
	f.url = bf.url
	out = append(out, &shipClient{name: "core/http", core: bf.sdkClientCore(t)})
	return out
}

func (c *shipClient) getPrompt(ctx context.Context, name string, args map[string]string, meta mcp.Meta) (*mcp.GetPromptResult, error) {
	if c.ext != nil {
		return c.ext.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: args, Meta: meta})
	}
	var res mcp.GetPromptResult
	params := map[string]any{"name": name}
	if args != nil {
		params["arguments"] = args
	}
	if meta != nil {
		params["_meta"] = meta
	}
	err := c.core.Call(ctx, "prompts/get", params, &res)
	return &res, err
}

func (c *shipClient) callTool(ctx context.Context, name string, args map[string]any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	if c.ext != nil {
		return c.ext.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	}
	var res mcp.CallToolResult
	params := map[string]any{"name": name, "arguments": args}
	if meta != nil {
		params["_meta"] = meta
	}
	err := c.core.Call(ctx, "tools/call", params, &res)
	return &res, err
}

func (c *shipClient) task(t *testing.T, id string) (status, message string) {
	t.Helper()
	var res struct {
		Status        string `json:"status"`
		StatusMessage string `json:"statusMessage"`
	}
	if c.ext != nil {
		r := getTask(t, c.ext, id)
		return r.Status, r.StatusMessage
	}
	require.NoError(t, c.core.Call(context.Background(), "tasks/get", map[string]any{"taskId": id}, &res))
	return res.Status, res.StatusMessage
}

func summaryOf(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(res.Meta[mcptask.MetaWorkflow])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func rpcErr(t *testing.T, err error) *jsonrpc.Error {
	t.Helper()
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	return je
}

// Item 1: an optional prompt argument left out is absent from the tool
// call; the workflow runs on (plain and task-aware alike).
func TestBridgeItem1OptionalArgumentLeftOut(t *testing.T) {
	f := newShipFixture(t)
	for _, c := range f.clients(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			res, err := c.getPrompt(ctx, "ship", map[string]string{"repo": "r", "version": "v1.0.0"}, nil)
			require.NoError(t, err)
			doc, err := handoff.FromPromptResult(res)
			require.NoError(t, err)
			require.Equal(t, []string{"fetch", "tag"}, stepNames(doc.CompletedSteps))
			require.Empty(t, doc.Errors)
			plain, err := c.getPrompt(ctx, "ship_plain", map[string]string{"repo": "r", "version": "v1.0.0"}, nil)
			require.NoError(t, err)
			last := plain.Messages[len(plain.Messages)-1].Content.(*mcp.TextContent).Text
			require.Contains(t, last, "announce (performed by you)")
			require.NotContains(t, last, "not available")
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sinceArg {
		require.Equal(t, "<absent>", s, "since was not given, so fetch must not receive it")
	}
}

// Item 2: a failed server step is never a dead end: it is handed to the
// client, whose call of the tool (with corrected arguments) records it and
// lets the workflow finish; the handoff says what the client may do.
func TestBridgeItem2FailedServerStepHandedToClient(t *testing.T) {
	f := newShipFixture(t)
	for _, c := range f.clients(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			res, err := c.getPrompt(ctx, "ship", map[string]string{"repo": "r"}, nil) // version defaults to "next"
			require.NoError(t, err)
			doc, err := handoff.FromPromptResult(res)
			require.NoError(t, err)
			require.Equal(t, string(mcptask.StatusWorking), doc.Status)
			tag := doc.RemainingSteps[0]
			require.Equal(t, "tag", tag.Name)
			require.True(t, tag.HandedToClient)
			require.Equal(t, mcptask.ExecClient, tag.Execution)
			require.Contains(t, tag.Error, `version "next" is not a semantic version`)
			require.JSONEq(t, `"next"`, string(tag.Arguments["version"]))
			prose := res.Messages[len(res.Messages)-1].Content.(*mcp.TextContent).Text
			require.Contains(t, prose, `Next: step "tag" failed on the server after 1 attempt(s); call it yourself, correcting the value that caused the error`)
			require.Contains(t, prose, `Its last error: version "next" is not a semantic version`)
			// The value that failed is one to fill in, so that a model
			// copying the call does not send it again; the document keeps it.
			require.Contains(t, prose, `Call tool "create_tag" with {"_task_id":"`+doc.TaskID+`","repo":"r","version":<string>}`)
			require.Contains(t, prose, `- "version" (string): a corrected value: "next" failed`)
			require.NotContains(t, prose, `"tag" (tool "create_tag"): the server runs it by itself`)
			status, msg := c.task(t, doc.TaskID)
			require.Equal(t, "working", status)
			require.Contains(t, msg, `step "tag" (tool "create_tag") failed after 1 attempt(s)`)
			require.Equal(t, msg, doc.PauseReason, "the status message and the handoff say the same")

			out, err := c.callTool(ctx, "create_tag", map[string]any{"repo": "r", "version": "v1.2.0"}, mcp.Meta{"_task_id": doc.TaskID})
			require.NoError(t, err)
			require.False(t, out.IsError)
			sum := summaryOf(t, out)
			require.Equal(t, "working", sum["status"])
			require.Equal(t, []any{"announce"}, sum["clientSteps"])
			out, err = c.callTool(ctx, "announce", map[string]any{"tag": "r@v1.2.0", "message": "shipped"}, mcp.Meta{"_task_id": doc.TaskID})
			require.NoError(t, err)
			require.Equal(t, "completed", summaryOf(t, out)["status"])
			status, _ = c.task(t, doc.TaskID)
			require.Equal(t, "completed", status)
		})
	}
}

// Item 3: a continuation for a client step whose inputs do not exist yet
// is refused, naming the missing step; nothing is recorded.
func TestBridgeItem3ContinuationBeforeItsInputs(t *testing.T) {
	f := newShipFixture(t)
	for _, c := range f.clients(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			res, err := c.getPrompt(ctx, "ship", map[string]string{"repo": "r"}, nil)
			require.NoError(t, err)
			doc, err := handoff.FromPromptResult(res)
			require.NoError(t, err)
			before, err := f.srv.Store.Get(ctx, doc.TaskID)
			require.NoError(t, err)
			_, err = c.callTool(ctx, "announce", map[string]any{"tag": "invented", "message": "m"}, mcp.Meta{"_task_id": doc.TaskID})
			je := rpcErr(t, err)
			require.EqualValues(t, mcptask.CodeInvalidParams, je.Code)
			require.Contains(t, je.Message, `step "announce" (tool "announce") of workflow task`)
			require.Contains(t, je.Message, `needs the output of step "tag", which the server could not perform`)
			after, err := f.srv.Store.Get(ctx, doc.TaskID)
			require.NoError(t, err)
			require.Equal(t, before.Version, after.Version, "nothing was recorded")
		})
	}
}

// Item 4: the status message says where the workflow stands at each pause:
// running a step, waiting for the client, a failed step; and at the end.
func TestBridgeItem4HonestStatus(t *testing.T) {
	f := newShipFixture(t)
	c := f.clients(t)[0]
	ctx := context.Background()
	// Running: observed while the slow step runs.
	done := make(chan *mcp.GetPromptResult, 1)
	go func() {
		res, _ := c.getPrompt(ctx, "slowflow", nil, nil)
		done <- res
	}()
	<-f.slowRan
	var id string
	require.Eventually(t, func() bool {
		id = f.workingTask(t, "slowflow")
		return id != ""
	}, 30*time.Second, 5*time.Millisecond)
	running, err := f.srv.Store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, `running step "wait" (tool "slow"), attempt 1`, running.StatusMessage)
	_, err = f.srv.Router.CancelTask(ctx, running.ID, "cancelled by request")
	require.NoError(t, err)
	<-done

	// Waiting for the client.
	res, err := c.getPrompt(ctx, "ship", map[string]string{"repo": "r", "version": "v2.0.0"}, nil)
	require.NoError(t, err)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	status, msg := c.task(t, doc.TaskID)
	require.Equal(t, "working", status)
	require.Equal(t, `waiting for the client to call tool "announce" for step "announce" (with the task id as argument _task_id)`, msg)
	require.Equal(t, msg, doc.PauseReason)
	// A failed client call.
	_, err = c.callTool(ctx, "announce", map[string]any{"tag": 5, "message": "m"}, mcp.Meta{"_task_id": doc.TaskID})
	require.NoError(t, err) // the SDK reports bad arguments as a tool error
	_, msg = c.task(t, doc.TaskID)
	require.Contains(t, msg, `the client's call of tool "announce" for step "announce" failed`)
	// Completed.
	_, err = c.callTool(ctx, "announce", map[string]any{"tag": "r@v2.0.0", "message": "m"}, mcp.Meta{"_task_id": doc.TaskID})
	require.NoError(t, err)
	status, msg = c.task(t, doc.TaskID)
	require.Equal(t, "completed", status)
	require.Equal(t, "completed: all 3 steps done", msg)
}

// Item 5: the handoff stored as the result of a workflow completed by an
// extension-dialect client names no method that dialect lacks; a core
// client's names tasks/result.
func TestBridgeItem5DialectTrueHandoff(t *testing.T) {
	f := newShipFixture(t)
	for _, c := range f.clients(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			res, err := c.getPrompt(ctx, "ship", map[string]string{"repo": "r", "version": "v1.0.0"}, nil)
			require.NoError(t, err)
			doc, err := handoff.FromPromptResult(res)
			require.NoError(t, err)
			_, err = c.callTool(ctx, "announce", map[string]any{"tag": "r@v1.0.0", "message": "m"}, mcp.Meta{"_task_id": doc.TaskID})
			require.NoError(t, err)
			tk, err := f.srv.Store.Get(ctx, doc.TaskID)
			require.NoError(t, err)
			// The stored result is a tool result (what tasks/result
			// returns): the handoff's text, the document as structured
			// content and in _meta.
			var final mcp.CallToolResult
			require.NoError(t, json.Unmarshal(tk.Result, &final))
			fdoc, err := handoff.FromToolResult(&final)
			require.NoError(t, err)
			require.Equal(t, string(mcptask.StatusCompleted), fdoc.Status)
			text := final.Content[len(final.Content)-1].(*mcp.TextContent).Text
			if c.ext != nil {
				require.Empty(t, fdoc.Continuation.ResultMethod)
				require.NotContains(t, text, "tasks/result")
				require.NotContains(t, fdoc.Continuation.Instructions, "tasks/result")
				require.Empty(t, doc.Continuation.ResultMethod)
			} else {
				require.Equal(t, "tasks/result", fdoc.Continuation.ResultMethod)
			}
		})
	}
}

// Item 6: no private _meta key the library adds for itself reaches a user
// handler, on any transport (the stdio/in-memory shim tags prompts/get and
// tools/call with one).
func TestBridgeItem6PrivateKeysStayPrivate(t *testing.T) {
	f := newShipFixture(t)
	ctx := context.Background()
	for _, c := range f.clients(t) {
		_, err := c.getPrompt(ctx, "own", nil, mcp.Meta{"mine": 1})
		require.NoError(t, err, c.name)
		_, err = c.callTool(ctx, "count", map[string]any{"n": 1}, mcp.Meta{"mine": 2})
		require.NoError(t, err, c.name)
		// A client's attempt to send a private key itself.
		_, err = c.callTool(ctx, "count", map[string]any{"n": 2}, mcp.Meta{mcptask.PrivateMetaPrefix + "conn": "forged"})
		require.NoError(t, err, c.name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.metas, 9)
	for _, m := range f.metas {
		for k := range m {
			require.False(t, strings.HasPrefix(k, "taskbridge/"), "handler saw private key %q in %v", k, m)
		}
	}
}

// Item 7: a task-capable tool called as a task with arguments that fail
// its input schema gets the plain call's answer and creates no task, in
// both dialects.
func TestBridgeItem7ValidateBeforeTask(t *testing.T) {
	f := newShipFixture(t)
	ctx := context.Background()
	for _, c := range f.clients(t) {
		t.Run(c.name, func(t *testing.T) {
			for _, bad := range []any{map[string]any{"n": "three"}, map[string]any{"n": []int{1}}} {
				before := relSnap(t, f.srv.Store)
				var plain, asTask json.RawMessage
				params := map[string]any{"name": "count", "arguments": bad}
				if c.ext != nil {
					res, err := c.ext.CallTool(ctx, &mcp.CallToolParams{Name: "count", Arguments: bad})
					require.NoError(t, err)
					plain, _ = json.Marshal(res.Content)
					require.True(t, res.IsError)
					// The extension client declares the extension: the server
					// would make an optional tool a task; with bad arguments it
					// must not.
					asTask = plain
				} else {
					var p mcp.CallToolResult
					require.NoError(t, c.core.Call(ctx, "tools/call", params, &p))
					plain, _ = json.Marshal(p.Content)
					// A core client that asked for a task gets a JSON-RPC
					// -32602 naming the problem (an SDK waiting for a task
					// cannot parse a tool result), and no task.
					params["task"] = map[string]any{}
					var raw json.RawMessage
					err := c.core.Call(ctx, "tools/call", params, &raw)
					var je *jsonrpc.Error
					require.ErrorAs(t, err, &je)
					require.EqualValues(t, jsonrpc.CodeInvalidParams, je.Code)
					require.Contains(t, je.Message, `invalid arguments for tool "count"`)
					asTask = plain
				}
				require.JSONEq(t, string(plain), string(asTask))
				require.Contains(t, string(plain), "validating")
				require.Empty(t, before.diff(relSnap(t, f.srv.Store)), "no task, no store write")
			}
		})
	}
}

// Item 8: params.task on a task-forbidden tool tells the client why.
func TestBridgeItem8ForbiddenTaskSaysWhy(t *testing.T) {
	f := newShipFixture(t)
	c := f.clients(t)[2]
	err := c.core.Call(context.Background(), "tools/call", map[string]any{"name": "announce", "arguments": map[string]any{"tag": "t", "message": "m"}, "task": map[string]any{}}, nil)
	je := rpcErr(t, err)
	require.EqualValues(t, mcptask.CodeInvalidRequest, je.Code)
	require.Contains(t, je.Message, `tool "announce" cannot be called as a task: its execution.taskSupport is forbidden`)
}

// A step marked FailsWorkflow fails the task with its reason: failed in
// the core dialect, completed with an isError result in the extension
// (which keeps failed for JSON-RPC errors).
func TestBridgeFailsWorkflowPolicy(t *testing.T) {
	f := newShipFixture(t)
	for _, c := range f.clients(t) {
		res, err := c.getPrompt(context.Background(), "strict", map[string]string{"version": "bad"}, nil)
		require.NoError(t, err)
		doc, err := handoff.FromPromptResult(res)
		require.NoError(t, err)
		require.Equal(t, string(mcptask.StatusFailed), doc.Status, c.name)
		status, msg := c.task(t, doc.TaskID)
		want := "failed"
		if c.ext != nil {
			want = "completed"
			var end mcp.CallToolResult
			require.NoError(t, json.Unmarshal(getTask(t, c.ext, doc.TaskID).Result, &end))
			require.True(t, end.IsError, c.name)
		}
		require.Equal(t, want, status, c.name)
		require.Contains(t, msg, `step "tag" (tool "create_tag") failed: version "bad" is not a semantic version like v1.2.3; the workflow failed`, c.name)
	}
}

// tasks/cancel on a workflow task stops its running server step (through
// the step's context), the task ends cancelled, and later continuations get
// a clear error.
func TestBridgeCancelWorkflow(t *testing.T) {
	f := newShipFixture(t)
	for _, c := range f.clients(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			old := f.workingTask(t, "slowflow")
			require.Empty(t, old, "no slow workflow is left from an earlier subtest")
			done := make(chan *mcp.GetPromptResult, 1)
			go func() {
				res, err := c.getPrompt(ctx, "slowflow", nil, nil)
				if err != nil {
					res = nil
				}
				done <- res
			}()
			<-f.slowRan
			var id string
			require.Eventually(t, func() bool {
				id = f.workingTask(t, "slowflow")
				return id != ""
			}, 30*time.Second, 5*time.Millisecond)
			if c.ext != nil {
				_, err := mcp.CallCustomMethod[*taskrouter.TaskIDParams, *taskGet](ctx, c.ext, "tasks/cancel", &taskrouter.TaskIDParams{TaskID: id})
				require.NoError(t, err)
			} else {
				require.NoError(t, c.core.Call(ctx, "tasks/cancel", map[string]any{"taskId": id}, nil))
			}
			res := <-done
			require.NotNil(t, res, "the prompt returns the cancelled workflow's handoff")
			doc, err := handoff.FromPromptResult(res)
			require.NoError(t, err)
			require.Equal(t, string(mcptask.StatusCancelled), doc.Status)
			status, _ := c.task(t, id)
			require.Equal(t, "cancelled", status)
			_, err = c.callTool(ctx, "announce", map[string]any{"tag": "x", "message": "m"}, mcp.Meta{"_task_id": id})
			je := rpcErr(t, err)
			require.Contains(t, je.Message, "is cancelled: cancelled by request; it takes no more steps")
		})
	}
}

// TestTypeScriptFollowsHandedOverStep: the official TypeScript SDK client
// follows a workflow whose server step fails and is handed to it, as an
// LLM would from the handoff, to completed.
func TestTypeScriptFollowsHandedOverStep(t *testing.T) {
	modules := nodeModules(t)
	f := newShipFixture(t)
	url := f.serveHTTP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	script := filepath.Join(modules, "..", "ts-workflow-follow.mjs")
	cmd := exec.CommandContext(ctx, "node", nodeArgs(t, script, url, "ship", `{"repo":"ts"}`, `{"version":"v3.1.0","message":"shipped by ts"}`)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	steps := map[string]map[string]any{}
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		name := m["step"].(string)
		steps[name] = m
		order = append(order, name)
		require.Equal(t, true, m["ok"], "step %s failed: %v\nall output:\n%s", name, m, out)
	}
	require.Equal(t, []string{"getPrompt", "perform:tag", "reread:tag", "perform:announce", "reread:announce", "taskAfter", "taskResult"}, order)
	tag := steps["perform:tag"]
	require.Equal(t, true, tag["handedToClient"])
	require.Equal(t, true, tag["proseSaysCallIt"], "the prose says to call the handed-over step")
	require.Contains(t, tag["error"], "not a semantic version")
	require.Equal(t, false, tag["isError"])
	require.Equal(t, "completed", steps["taskAfter"]["status"])
	require.Equal(t, []any{"fetch", "tag", "announce"}, steps["taskResult"]["completed"])
	require.Equal(t, "tasks/result", steps["taskResult"]["resultMethod"])
}

// workingTask returns the id of a working task of workflow name, whoever
// owns it, or "".
func (f *shipFixture) workingTask(t *testing.T, name string) string {
	t.Helper()
	active, err := f.srv.Store.Active(context.Background())
	require.NoError(t, err)
	for _, tk := range active {
		if tk.Request.Name == name && tk.Status == mcptask.StatusWorking {
			return tk.ID
		}
	}
	return ""
}

type stepRecorder struct {
	mu     sync.Mutex
	events []workflow.StepEvent
}

func (r *stepRecorder) StepEvent(e workflow.StepEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// TestBridgeStepObserver: the bridge reports every attempt of every step,
// by the server and by the client (with the client's _meta).
func TestBridgeStepObserver(t *testing.T) {
	rec := &stepRecorder{}
	f := newShipFixture(t, func(b *builder.Builder) { b.WithWorkflowOptions(workflow.Options{Observer: rec}) })
	c := f.clients(t)[0]
	ctx := context.Background()
	res, err := c.getPrompt(ctx, "ship", map[string]string{"repo": "r"}, nil)
	require.NoError(t, err)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	_, err = c.callTool(ctx, "create_tag", map[string]any{"repo": "r", "version": "v1.0.0"}, mcp.Meta{"_task_id": doc.TaskID, "traceparent": "00-abc-def-01"})
	require.NoError(t, err)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []string
	for _, e := range rec.events {
		require.Equal(t, doc.TaskID, e.TaskID)
		got = append(got, fmt.Sprintf("%s/%s/%s/%s", e.Step, e.Attempt.By, e.Attempt.Reason, e.Attempt.Outcome))
	}
	require.Equal(t, []string{"fetch/server/first/ok", "tag/server/first/error", "tag/client/client/ok"}, got)
	require.Equal(t, "00-abc-def-01", rec.events[2].Meta["traceparent"])
}
