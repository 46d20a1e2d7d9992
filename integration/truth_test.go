package integration

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/rpcconn"
	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/push"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// The faces of a workflow's end (docs/INTEROP.md, "How a workflow's end
// reads"): a workflow that a person's rejection fails reads as failed on
// every face, and one they approve as completed.

type gateShipIn struct {
	What     string `json:"what"`
	Approved bool   `json:"approved"`
}
type gateShipOut struct {
	Shipped string `json:"shipped"`
}

// gateServer serves "gate": a person approves (the event "approve"),
// then the server ships; a rejection fails the step, which fails the
// workflow. It is also a tool. It returns the server's MCP URL.
func gateServer(t *testing.T) (*builder.Server, string) {
	t.Helper()
	b := builder.New("gate", "1").WithDB(filepath.Join(t.TempDir(), "tasks.db")).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "ship", Description: "Ship what was approved."}, func(ctx context.Context, _ *mcp.CallToolRequest, in gateShipIn) (*mcp.CallToolResult, gateShipOut, error) {
		if !in.Approved {
			return nil, gateShipOut{}, errors.New("not approved: nothing was shipped")
		}
		return nil, gateShipOut{Shipped: in.What}, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	b.TaskWorkflow(workflow.New("gate", "A person approves, then the server ships").
		Arg("what", "what to ship", true).
		Step(
			workflow.Event("approve", "whether to ship").WithPayload(map[string]any{"type": "object",
				"properties": map[string]any{"approved": map[string]any{"type": "boolean"}}, "required": []string{"approved"}}),
			workflow.Server("ship", "ship").Bind("what", workflow.PromptArg("what")).
				Bind("approved", workflow.StepOutput("approve", "approved")).FailsWorkflow(),
		).AsTool())
	return serveBuilt(t, b)
}

// serveBuilt builds b and serves it over Streamable HTTP on 127.0.0.1,
// returning the server and its MCP URL.
func serveBuilt(t *testing.T, b *builder.Builder) (*builder.Server, string) {
	t.Helper()
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return srv, "http://" + ln.Addr().String() + "/mcp"
}

// coreConn is a raw core-dialect (2025-11-25) client over HTTP; with
// elicit, it declares elicitation and answers every form with elicit's
// content.
func coreConn(t *testing.T, url string, elicit map[string]any) *rpcconn.Conn {
	t.Helper()
	return coreConnAs(t, url, elicit, "")
}

// bearer adds an Authorization header to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// coreConnAs is coreConn with a bearer token ("" for none).
func coreConnAs(t *testing.T, url string, elicit map[string]any, token string) *rpcconn.Conn {
	t.Helper()
	opts := &rpcconn.Options{}
	caps := map[string]any{}
	if elicit != nil {
		caps["elicitation"] = map[string]any{}
		opts.Handler = func(_ context.Context, method string, _ json.RawMessage) (any, error) {
			if method != "elicitation/create" {
				return nil, errors.New("unexpected " + method)
			}
			return map[string]any{"action": "accept", "content": elicit}, nil
		}
	}
	tr := &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true}
	if token != "" {
		tr.HTTPClient = &http.Client{Transport: bearer{token}}
	}
	c, err := rpcconn.Dial(context.Background(), tr, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Call(context.Background(), "initialize", map[string]any{"protocolVersion": mcptask.CoreVersion, "capabilities": caps,
		"clientInfo": map[string]any{"name": "core", "version": "1"}}, nil))
	require.NoError(t, c.Notify(context.Background(), "notifications/initialized", map[string]any{}))
	return c
}

// eventArgs are the event tool's arguments deciding the gate.
func eventArgs(approved bool) map[string]any {
	return map[string]any{"event": "approve", "payload": map[string]any{"approved": approved}}
}

// TestWorkflowEndFaces: one workflow, approved and rejected, read through
// every face a client has: core tasks/get and tasks/result, the
// extension's tasks/get, the event tool's reply, the workflow tool and
// task_result in host mode, and a core task-augmented call of the
// workflow tool (a leg).
func TestWorkflowEndFaces(t *testing.T) {
	_, url := gateServer(t)
	ctx := context.Background()
	for _, approved := range []bool{false, true} {
		status, isError, word := mcptask.StatusFailed, true, "has failed"
		if approved {
			status, isError, word = mcptask.StatusCompleted, false, "is complete"
		}
		name := map[bool]string{false: "rejected", true: "approved"}[approved]

		t.Run(name+"/core", func(t *testing.T) {
			c := coreConn(t, url, nil)
			var prompt mcp.GetPromptResult
			require.NoError(t, c.Call(ctx, "prompts/get", map[string]any{"name": "gate", "arguments": map[string]string{"what": "v1"}}, &prompt))
			doc, err := handoff.FromPromptResult(&prompt)
			require.NoError(t, err)
			var ev mcp.CallToolResult
			require.NoError(t, c.Call(ctx, "tools/call", map[string]any{"name": workflow.DefaultEventTool, "arguments": eventArgs(approved),
				"_meta": map[string]any{mcptask.MetaTaskID: doc.TaskID}}, &ev))
			require.Equal(t, isError, ev.IsError, "the event tool's reply: %s", textOf(&ev))
			var got mcptask.CoreTask
			require.NoError(t, c.Call(ctx, "tasks/get", map[string]any{"taskId": doc.TaskID}, &got))
			require.Equal(t, status, got.Status)
			var res mcp.CallToolResult
			require.NoError(t, c.Call(ctx, "tasks/result", map[string]any{"taskId": doc.TaskID}, &res), "a failed workflow's tasks/result is its tool result, not a JSON-RPC error")
			require.Equal(t, isError, res.IsError)
			require.Contains(t, textOf(&res), word)
			if !approved {
				require.Contains(t, got.StatusMessage, "not approved: nothing was shipped")
				require.Nil(t, res.StructuredContent, "an error result carries no structured content")
			}
			fdoc, err := handoff.FromToolResult(&res)
			require.NoError(t, err)
			require.Equal(t, string(status), fdoc.Status)
		})

		t.Run(name+"/extension", func(t *testing.T) {
			cs := sdkTasksClient(t, url)
			prompt, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "gate", Arguments: map[string]string{"what": "v2"}})
			require.NoError(t, err)
			doc, err := handoff.FromPromptResult(prompt)
			require.NoError(t, err)
			require.Equal(t, "input_required", doc.Status, "a wait on a person in the extension")
			ev, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: workflow.DefaultEventTool, Arguments: eventArgs(approved), Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID}})
			require.NoError(t, err)
			require.Equal(t, isError, ev.IsError)
			got := getTask(t, cs, doc.TaskID)
			require.Equal(t, "completed", got.Status, "the extension reserves failed for JSON-RPC errors")
			var res mcp.CallToolResult
			require.NoError(t, json.Unmarshal(got.Result, &res))
			require.Equal(t, isError, res.IsError)
			require.Contains(t, textOf(&res), word)
		})

		t.Run(name+"/host", func(t *testing.T) {
			cs := plainClient(t, url)
			start, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "gate", Arguments: map[string]any{"what": "v3"}})
			require.NoError(t, err)
			require.False(t, start.IsError, "waiting is no error: %s", textOf(start))
			doc, err := handoff.FromToolResult(start)
			require.NoError(t, err)
			args := eventArgs(approved)
			args[mcptask.ArgTaskID] = doc.TaskID
			ev, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: workflow.DefaultEventTool, Arguments: args})
			require.NoError(t, err)
			require.Equal(t, isError, ev.IsError, "%s", textOf(ev))
			require.Contains(t, textOf(ev), word)
			for _, call := range []*mcp.CallToolParams{
				{Name: "task_result", Arguments: map[string]any{"task_id": doc.TaskID}},
				{Name: "gate", Arguments: map[string]any{mcptask.ArgTaskID: doc.TaskID}},
			} {
				res, err := cs.CallTool(ctx, call)
				require.NoError(t, err)
				require.Equal(t, isError, res.IsError, "%s: %s", call.Name, textOf(res))
				require.Contains(t, textOf(res), word, call.Name)
			}
		})

		t.Run(name+"/core leg", func(t *testing.T) {
			// The workflow tool called as a core task: the task follows
			// the workflow, asks the person through its own input
			// request (answered on the stream of tasks/result), and ends
			// as the workflow did.
			c := coreConn(t, url, map[string]any{"approved": approved})
			var created struct {
				Task mcptask.CoreTask `json:"task"`
			}
			require.NoError(t, c.Call(ctx, "tools/call", map[string]any{"name": "gate", "arguments": map[string]any{"what": "v4"}, "task": map[string]any{}}, &created))
			var res mcp.CallToolResult
			require.NoError(t, c.Call(ctx, "tasks/result", map[string]any{"taskId": created.Task.TaskID}, &res))
			require.Equal(t, isError, res.IsError, "%s", textOf(&res))
			require.Contains(t, textOf(&res), word)
			var got mcptask.CoreTask
			require.NoError(t, c.Call(ctx, "tasks/get", map[string]any{"taskId": created.Task.TaskID}, &got))
			require.Equal(t, status, got.Status)
		})
	}
}

// sdkTasksClient is a go-sdk client (2026-07-28) that declares the tasks
// extension, over HTTP.
func sdkTasksClient(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(mcptask.ExtensionID, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "ext", Version: "1"}, &mcp.ClientOptions{Capabilities: caps})
	require.NoError(t, mcp.AddSendingCustomMethod[*taskrouter.TaskIDParams, *taskGet](c, "tasks/get"))
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// plainClient is a go-sdk client that declares nothing (a desktop host).
func plainClient(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// textOf joins a tool result's text.
func textOf(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

type nestSignIn struct {
	Who string `json:"who"`
}
type nestSignOut struct {
	Signed string `json:"signed"`
}

// nestServer serves "outer": a for-each whose items the client signs,
// then a child workflow "inner" whose one step the client signs too.
func nestServer(t *testing.T) string {
	t.Helper()
	b := builder.New("nest", "1").WithDB(filepath.Join(t.TempDir(), "tasks.db")).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "sign"}, func(ctx context.Context, _ *mcp.CallToolRequest, in nestSignIn) (*mcp.CallToolResult, nestSignOut, error) {
		return nil, nestSignOut{Signed: "signed by " + in.Who}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("inner", "one signature").Step(
		workflow.Client("sign", "sign").Bind("who", workflow.FromClient("your name")),
	))
	b.TaskWorkflow(workflow.New("outer", "signatures for each item, then the inner workflow's").
		Arg("items", "comma-separated", true).
		Step(
			workflow.ForEach("each", workflow.PromptArg("items"), workflow.Client("sign_item", "sign").Bind("who", workflow.FromClient("your name"))),
			workflow.Child("nested", "inner"),
		))
	_, url := serveBuilt(t, b)
	return url
}

// TestContinuationMetaNamesWorkflow: a client that follows the documented
// _meta form (the workflow's id in _meta._task_id) and copies a step's
// handoff arguments (which name an item, "W#each[1]", or the child's
// task) continues the workflow: the workflow contains what the argument
// names. An id that names another workflow is refused and records
// nothing.
func TestContinuationMetaNamesWorkflow(t *testing.T) {
	url := nestServer(t)
	cs := plainClient(t, url)
	other := plainClient(t, url)
	ctx := context.Background()
	start := func(c *mcp.ClientSession) *handoff.Document {
		res, err := c.GetPrompt(ctx, &mcp.GetPromptParams{Name: "outer", Arguments: map[string]string{"items": "a,b"}})
		require.NoError(t, err)
		doc, err := handoff.FromPromptResult(res)
		require.NoError(t, err)
		return doc
	}
	doc := start(cs)
	stranger := start(other)
	var performed []string
	for round := 0; round < 6 && doc.Status != string(mcptask.StatusCompleted); round++ {
		var step *handoff.RemainingStep
		for i := range doc.RemainingSteps {
			if doc.RemainingSteps[i].Call != nil && doc.RemainingSteps[i].Call.Tool == "sign" {
				step = &doc.RemainingSteps[i]
				break
			}
		}
		require.NotNil(t, step, "a signature to perform: %+v", doc.RemainingSteps)
		var ref string
		require.NoError(t, json.Unmarshal(step.Call.Arguments[mcptask.ArgTaskID], &ref))
		require.NotEqual(t, doc.TaskID, ref, "the handoff names the record or the child")
		args := map[string]any{mcptask.ArgTaskID: ref, "who": "ada"}
		if round == 0 {
			// Another workflow's id in _meta: refused, nothing recorded.
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sign", Arguments: args, Meta: mcp.Meta{mcptask.MetaTaskID: stranger.TaskID}})
			require.ErrorContains(t, err, "name different tasks")
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sign", Arguments: args, Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID}})
		require.NoError(t, err, "step %s", step.Name)
		require.False(t, res.IsError, "%s", textOf(res))
		performed = append(performed, step.Name)
		again, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "outer", Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID}})
		require.NoError(t, err)
		doc, err = handoff.FromPromptResult(again)
		require.NoError(t, err)
	}
	require.Equal(t, string(mcptask.StatusCompleted), doc.Status, doc.PauseReason)
	require.Len(t, performed, 3, "two items and the child's step: %v", performed)
	require.Contains(t, performed, "nested/sign")
}

// TestLegWithdrawsAnsweredQuestion: a core client calls the workflow tool
// as a task (a leg), which asks for the person's decision with its own
// input request; the decision arrives another way (the event tool, on
// the workflow task). The leg withdraws its question (the task is no
// longer input_required) and ends as the workflow did, instead of
// waiting for an answer nobody will give.
func TestLegWithdrawsAnsweredQuestion(t *testing.T) {
	srv, url := gateServer(t)
	ctx := context.Background()
	c := coreConn(t, url, nil)
	var created struct {
		Task mcptask.CoreTask `json:"task"`
	}
	require.NoError(t, c.Call(ctx, "tools/call", map[string]any{"name": "gate", "arguments": map[string]any{"what": "v5"}, "task": map[string]any{}}, &created))
	leg := created.Task.TaskID
	var wid string
	require.Eventually(t, func() bool {
		var got mcptask.CoreTask
		require.NoError(t, c.Call(ctx, "tasks/get", map[string]any{"taskId": leg}, &got))
		if got.Status != mcptask.StatusInputRequired {
			return false
		}
		page, err := srv.Store.Query(ctx, store.Query{Name: "gate"})
		require.NoError(t, err)
		for _, tk := range page.Tasks {
			if tk.Labels[taskrouter.LabelKind] == taskrouter.KindWorkflow {
				wid = tk.ID
			}
		}
		return wid != ""
	}, 30*time.Second, 10*time.Millisecond, "the leg asks for the decision")
	var ev mcp.CallToolResult
	require.NoError(t, c.Call(ctx, "tools/call", map[string]any{"name": workflow.DefaultEventTool, "arguments": eventArgs(true),
		"_meta": map[string]any{mcptask.MetaTaskID: wid}}, &ev))
	require.False(t, ev.IsError, "%s", textOf(&ev))
	var res mcp.CallToolResult
	require.NoError(t, c.Call(ctx, "tasks/result", map[string]any{"taskId": leg}, &res))
	require.False(t, res.IsError, "%s", textOf(&res))
	require.Contains(t, textOf(&res), "is complete")
}

// TestWaitsOnPersonAndOperatorArePushed: a workflow waiting for a
// person's decision is input_required in the core dialect too (tasks/get,
// and a push), an operator's pause is pushed as paused (with who paused
// it) and reads working, the resume makes it input_required again, and a
// rejection ends it failed, pushed as terminal.
func TestWaitsOnPersonAndOperatorArePushed(t *testing.T) {
	srv, url := gateServer(t)
	ctx := context.Background()
	rc, secret, c, doc := watchedCoreStart(t, srv, url, "gate", map[string]string{"what": "v6"})
	status := func() mcptask.CoreTask {
		var got mcptask.CoreTask
		require.NoError(t, c.Call(ctx, "tasks/get", map[string]any{"taskId": doc.TaskID}, &got))
		return got
	}
	require.Equal(t, mcptask.StatusInputRequired, status().Status, "a core client is told the workflow waits for input")
	msg := status().StatusMessage
	require.Contains(t, msg, `waiting for event "approve"`)
	require.Contains(t, msg, `deliver it with tool "workflow_event" or the task's webhook`, "the core dialect's status names what a core client can do first")
	require.NotContains(t, strings.SplitN(msg, "(an extension-dialect client", 2)[0], "tasks/update", "tasks/update, which the core dialect lacks, only as the extension's way")

	// deliveries of the task, in the order their events happened.
	seen := map[string]bool{}
	var got []*push.Delivery
	next := func(typ mcptask.WebhookEvent) *push.Delivery {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			for _, r := range rc.Got() {
				d := pushtest.Verified(t, secret, r)
				if d.Task.TaskID != doc.TaskID || seen[d.ID] {
					continue
				}
				seen[d.ID] = true
				got = append(got, d)
			}
			for _, d := range got {
				if d.Type == typ {
					got = slices.DeleteFunc(got, func(x *push.Delivery) bool { return x == d })
					return d
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("no %s delivery of task %s", typ, doc.TaskID)
		return nil
	}
	d := next(mcptask.WebhookInputRequired)
	require.Equal(t, mcptask.StatusInputRequired, d.Task.Status)

	_, _, err := srv.Router.Pauses().Pause(ctx, doc.TaskID, taskrouter.PauseRequest{By: "ops", Reason: "freeze"})
	require.NoError(t, err)
	d = next(mcptask.WebhookPaused)
	var pe mcptask.PausedEvent
	require.NoError(t, json.Unmarshal(d.Event.Data, &pe))
	require.Equal(t, "ops", pe.By)
	require.Contains(t, pe.Reason, "paused by ops")
	require.Equal(t, mcptask.StatusWorking, status().Status, "a pause waits for an operator, not for input")

	_, _, err = srv.Router.Pauses().Resume(ctx, doc.TaskID, "ops")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return status().Status == mcptask.StatusInputRequired }, 20*time.Second, 10*time.Millisecond)
	next(mcptask.WebhookInputRequired)

	var ev mcp.CallToolResult
	require.NoError(t, c.Call(ctx, "tools/call", map[string]any{"name": workflow.DefaultEventTool, "arguments": eventArgs(false),
		"_meta": map[string]any{mcptask.MetaTaskID: doc.TaskID}}, &ev))
	require.True(t, ev.IsError)
	d = next(mcptask.WebhookTerminal)
	require.Equal(t, mcptask.StatusFailed, d.Task.Status, "the push tells the failure as tasks/get does")
}

// watchedCoreStart registers a webhook for every owner's tasks on srv and
// starts workflow prompt name over HTTP at url as a core client; it
// returns the receiver, its secret, the client and the handoff.
func watchedCoreStart(t *testing.T, srv *builder.Server, url, name string, args map[string]string) (*pushtest.Receiver, string, *rpcconn.Conn, *handoff.Document) {
	t.Helper()
	ctx := context.Background()
	rc := pushtest.New(t)
	_, secret, err := srv.Router.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: rc.URL, Owner: "*"})
	require.NoError(t, err)
	c := coreConn(t, url, nil)
	var prompt mcp.GetPromptResult
	require.NoError(t, c.Call(ctx, "prompts/get", map[string]any{"name": name, "arguments": args}, &prompt))
	doc, err := handoff.FromPromptResult(&prompt)
	require.NoError(t, err)
	return rc, secret, c, doc
}

// TestInitializeBadParamsHasACode: initialize whose params go-sdk cannot
// decode is refused with -32602 naming the problem, not go-sdk's code 0.
func TestInitializeBadParamsHasACode(t *testing.T) {
	_, url := gateServer(t)
	for _, params := range []string{`"x"`, `{"protocolVersion":5}`, `{"protocolVersion":"2025-11-25","capabilities":"no","clientInfo":{"name":"x","version":"1"}}`} {
		body := `{"jsonrpc":"2.0","id":7,"method":"initialize","params":` + params + `}`
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var reply struct {
			ID    json.RawMessage `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&reply), params)
		_ = resp.Body.Close()
		require.Equal(t, mcptask.CodeInvalidParams, reply.Error.Code, "%s: %s", params, reply.Error.Message)
		require.Contains(t, reply.Error.Message, "invalid params of initialize")
		require.JSONEq(t, "7", string(reply.ID))
	}
}

// TestPauseOnFailureIsPushed: a workflow that pauses itself on a failure
// (PausesOnFailure) waits for an operator: its core tasks/get reads
// working with a status message saying the server paused it and why,
// and a webhook is told (paused, By "the server"); resumed, it runs the
// step again.
func TestPauseOnFailureIsPushed(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	b := builder.New("pof", "1").WithDB(filepath.Join(t.TempDir(), "tasks.db")).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "deploy", Description: "Deploy."}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if fail.Load() {
			return nil, nil, errors.New("registry unreachable")
		}
		return nil, map[string]any{"deployed": true}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("rollout", "Deploy; an operator looks at a failure").Step(workflow.Server("deploy", "deploy").FailsWorkflow()).PausesOnFailure())
	srv, url := serveBuilt(t, b)
	ctx := context.Background()
	rc, secret, c, doc := watchedCoreStart(t, srv, url, "rollout", nil)

	var pe mcptask.PausedEvent
	require.Eventually(t, func() bool {
		for _, r := range rc.Got() {
			d := pushtest.Verified(t, secret, r)
			if d.Task.TaskID == doc.TaskID && d.Type == mcptask.WebhookPaused {
				require.NoError(t, json.Unmarshal(d.Event.Data, &pe))
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "no paused push")
	require.Equal(t, workflow.PausedByServer, pe.By, "%+v", pe)
	require.Contains(t, pe.Reason, "registry unreachable")
	var got mcptask.CoreTask
	require.NoError(t, c.Call(ctx, "tasks/get", map[string]any{"taskId": doc.TaskID}, &got))
	require.Equal(t, mcptask.StatusWorking, got.Status, "a pause waits for an operator, not for input")
	require.Contains(t, got.StatusMessage, "paused by the server")

	fail.Store(false)
	_, _, err := srv.Router.Pauses().Resume(ctx, doc.TaskID, "ops")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		require.NoError(t, c.Call(ctx, "tasks/get", map[string]any{"taskId": doc.TaskID}, &got))
		return got.Status == mcptask.StatusCompleted
	}, 20*time.Second, 10*time.Millisecond)
}
