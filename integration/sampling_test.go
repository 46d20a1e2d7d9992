package integration

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// samplingServer is a server with a workflow whose middle step the
// client's model performs (notes: collect, summary, publish) and one
// whose middle step a person answers (rollout: plan, approve, deploy).
type samplingServer struct {
	srv       *builder.Server
	url       string
	published chan string // the text publish got
	deployed  chan bool
}

type collectIn struct {
	Repo string `json:"repo"`
}
type collectOut struct {
	Log string `json:"log"`
}
type publishIn struct {
	Text string `json:"text"`
}
type deployIn struct {
	Repo string `json:"repo"`
	By   string `json:"by,omitempty"`
}

// notesPrompt is the summary step's text.
const notesPrompt = "Write release notes for {{repo}} from this log: {{log}}"

func newSamplingServer(t *testing.T, dbPath string, mutate func(summary, approve *workflow.Step)) *samplingServer {
	t.Helper()
	if dbPath == "" {
		dbPath = filepath.Join(t.TempDir(), "tasks.db")
	}
	s := &samplingServer{published: make(chan string, 8), deployed: make(chan bool, 8)}
	b := builder.New("sampling-test", "1").WithDB(dbPath).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond}).
		WithWorkflowOptions(workflow.Options{PromptWait: 2 * time.Second})
	builder.Tool(b, &mcp.Tool{Name: "collect"}, func(ctx context.Context, _ *mcp.CallToolRequest, in collectIn) (*mcp.CallToolResult, collectOut, error) {
		return nil, collectOut{Log: "fix a; add b (" + in.Repo + ")"}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "publish"}, func(ctx context.Context, _ *mcp.CallToolRequest, in publishIn) (*mcp.CallToolResult, any, error) {
		s.published <- in.Text
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "published"}}}, nil, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "deploy"}, func(ctx context.Context, _ *mcp.CallToolRequest, in deployIn) (*mcp.CallToolResult, any, error) {
		s.deployed <- true
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed " + in.Repo + " for " + in.By}}}, nil, nil
	}, nil)
	summary := workflow.Sample("summary", notesPrompt).
		Bind("repo", workflow.PromptArg("repo")).Bind("log", workflow.StepOutput("collect", "log")).
		SystemPrompt("You write release notes.").MaxTokens(200)
	approve := workflow.Ask("approve", "Deploy {{repo}} to production?", map[string]any{
		"type": "object", "required": []string{"approved"},
		"properties": map[string]any{
			"approved": map[string]any{"type": "boolean", "description": "true to deploy"},
			"by":       map[string]any{"type": "string", "description": "who decides"},
		},
	}).Bind("repo", workflow.PromptArg("repo"))
	if mutate != nil {
		mutate(summary, approve)
	}
	b.TaskWorkflow(workflow.New("notes", "collect, summarize with the client's model, publish").AsTool().Arg("repo", "the repository", true).Step(
		workflow.Server("collect", "collect").Bind("repo", workflow.PromptArg("repo")),
		summary,
		workflow.Server("publish", "publish").Bind("text", workflow.StepOutput("summary", "text")),
	))
	b.TaskWorkflow(workflow.New("train", "the notes, as a child workflow").Arg("repo", "the repository", true).Step(
		workflow.Child("notes", "notes").Bind("repo", workflow.PromptArg("repo")),
	))
	b.TaskWorkflow(workflow.New("rollout", "ask a person, then deploy").Arg("repo", "the repository", true).Step(
		approve,
		workflow.Server("deploy", "deploy").Bind("repo", workflow.PromptArg("repo")).Bind("by", workflow.StepOutput("approve", "by")).
			When(workflow.Truthy(workflow.StepOutput("approve", "approved"))),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	s.srv = srv
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *samplingServer) serveHTTP(t *testing.T) string {
	t.Helper()
	if s.url != "" {
		return s.url
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: s.srv.HTTPHandler(nil)}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	s.url = "http://" + ln.Addr().String() + "/"
	return s.url
}

// transport is a client's end of a connection to the server.
func (s *samplingServer) transport(t *testing.T, overHTTP bool) mcp.Transport {
	t.Helper()
	if overHTTP {
		return client.HTTPTransport(s.serveHTTP(t), nil)
	}
	tr, err := s.srv.Connect(context.Background())
	require.NoError(t, err)
	return tr
}

// fakeModel is a client-side model: it answers every prompt with its
// own text, and counts the prompts it saw.
type fakeModel struct {
	mu      sync.Mutex
	prompts []*mcp.CreateMessageParams
	reply   func(p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
}

func (m *fakeModel) sample(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	m.mu.Lock()
	m.prompts = append(m.prompts, p)
	m.mu.Unlock()
	if m.reply != nil {
		return m.reply(p)
	}
	text := p.Messages[0].Content.(*mcp.TextContent).Text
	return &mcp.CreateMessageResult{Role: "assistant", Model: "fake-1", StopReason: "endTurn",
		Content: &mcp.TextContent{Text: "NOTES: " + strings.TrimPrefix(text, "Write release notes for ")}}, nil
}

func (m *fakeModel) seen() []*mcp.CreateMessageParams {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*mcp.CreateMessageParams(nil), m.prompts...)
}

// progressOf reads the workflow progress of task id from the store.
func (s *samplingServer) progressOf(t *testing.T, id string) *workflow.Progress {
	t.Helper()
	tk, err := s.srv.Router.Task(context.Background(), id)
	require.NoError(t, err)
	var p workflow.Progress
	require.NoError(t, json.Unmarshal(tk.Variables[workflow.VarProgress], &p))
	return &p
}

func stepOf(p *workflow.Progress, name string) *workflow.StepProgress {
	for i := range p.Steps {
		if p.Steps[i].Name == name {
			return &p.Steps[i]
		}
	}
	return nil
}

// runNotes starts the notes workflow with c and waits for its end.
func runNotes(t *testing.T, c *client.Client, repo string) (*handoff.Document, json.RawMessage) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, doc, err := c.GetPrompt(ctx, "notes", map[string]string{"repo": repo})
	require.NoError(t, err)
	require.NotNil(t, doc)
	raw, err := c.TaskResult(ctx, doc.TaskID)
	require.NoError(t, err)
	return doc, raw
}

// askModes are the ways a client takes a request of the server's: the
// dialect it speaks, and how the step reaches it (a Receiver takes task
// and input requests; an InputHandler alone, plain requests).
var askModes = []struct {
	name    string
	dialect mcptask.Dialect
	via     string
}{
	{"task", mcptask.Core, workflow.AskViaTask},
	{"request", mcptask.Core, workflow.AskViaRequest},
	{"input", mcptask.Extension, workflow.AskViaInput},
}

// clientOptions are the options of a client that answers in mode via
// with the sampling and elicitation handlers given (either may be nil).
func clientOptions(dialect mcptask.Dialect, via string,
	sample func(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error),
	elicit func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)) *client.Options {
	opts := &client.Options{Dialect: dialect}
	if via != workflow.AskViaRequest {
		opts.Receiver = &client.Receiver{Sampling: sample, Elicitation: elicit, PollInterval: 20 * time.Millisecond}
		return opts
	}
	opts.InputHandler = func(ctx context.Context, taskID string, req client.InputRequest) (json.RawMessage, error) {
		var res any
		var err error
		if req.Method == mcptask.MethodSampling {
			p, perr := req.Sampling()
			if perr != nil {
				return nil, perr
			}
			res, err = sample(ctx, p)
		} else {
			p, perr := req.Elicitation()
			if perr != nil {
				return nil, perr
			}
			res, err = elicit(ctx, p)
		}
		if err != nil {
			return nil, err
		}
		return json.Marshal(res)
	}
	return opts
}

// TestSamplingStepAsksTheClientsModel: the summary step is performed by
// the client's own model, in each way a client may take the request: a
// core client with a Receiver gets a task-augmented sampling/createMessage
// (its task id recorded, then followed with tasks/get and tasks/result on
// the client), a core client with an input handler only a plain one, and
// a client of the tasks extension an input request of the workflow task,
// answered with tasks/update; over memory and Streamable HTTP. The prompt
// is the step's text with its values filled in, and the reply is the
// step's output, which the next step reads.
func TestSamplingStepAsksTheClientsModel(t *testing.T) {
	for _, tc := range askModes {
		for _, overHTTP := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "/memory", true: "/http"}[overHTTP], func(t *testing.T) {
				s := newSamplingServer(t, "", nil)
				m := &fakeModel{}
				c, err := client.Dial(context.Background(), s.transport(t, overHTTP), clientOptions(tc.dialect, tc.via, m.sample, nil))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })

				doc, raw := runNotes(t, c, "tb")
				require.Contains(t, string(raw), "completed")
				seen := m.seen()
				require.Len(t, seen, 1)
				require.Equal(t, "Write release notes for tb from this log: fix a; add b (tb)", seen[0].Messages[0].Content.(*mcp.TextContent).Text)
				require.Equal(t, "You write release notes.", seen[0].SystemPrompt)
				require.EqualValues(t, 200, seen[0].MaxTokens)
				require.Equal(t, "NOTES: tb from this log: fix a; add b (tb)", <-s.published)

				p := s.progressOf(t, doc.TaskID)
				sp := stepOf(p, "summary")
				require.Equal(t, mcptask.StepCompleted, sp.Status)
				require.Equal(t, "sampling", sp.Kind)
				require.NotNil(t, sp.Asked)
				require.Equal(t, tc.via, sp.Asked.Via)
				if tc.via == workflow.AskViaTask {
					require.Len(t, sp.Asked.ClientTask, 32, "the client's task id is recorded")
				}
				var out map[string]any
				require.NoError(t, json.Unmarshal(p.Outputs["summary"], &out))
				require.Equal(t, "NOTES: tb from this log: fix a; add b (tb)", out["text"])
				require.Equal(t, "fake-1", out["model"])
			})
		}
	}
}

// hostSession is a go-sdk client of the core dialect that declares no
// capabilities: what a desktop host is (no sampling, no elicitation, no
// tasks).
func (s *samplingServer) hostSession(t *testing.T, overHTTP bool) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	var tr mcp.Transport
	if overHTTP {
		tr = &mcp.StreamableClientTransport{Endpoint: s.serveHTTP(t), MaxRetries: -1}
	} else {
		var err error
		tr, err = s.srv.Connect(context.Background())
		require.NoError(t, err)
	}
	cs, err := c.Connect(context.Background(), tr, &mcp.ClientSessionOptions{ProtocolVersion: mcptask.CoreVersion})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// finalText is the text of a prompt result's last message.
func finalText(res *mcp.GetPromptResult) string {
	return res.Messages[len(res.Messages)-1].Content.(*mcp.TextContent).Text
}

// TestSamplingHostPerformsTheStepItself: a host that sends no tasks and
// cannot sample (or show a form) is not asked: the handoff tells its
// model, in prose alone, what to write (the prompt, filled in) or what to
// ask the user, and which tool to call with which arguments; the call
// records the step, and the workflow goes on.
func TestSamplingHostPerformsTheStepItself(t *testing.T) {
	for _, overHTTP := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "http"}[overHTTP], func(t *testing.T) {
			s := newSamplingServer(t, "", nil)
			cs := s.hostSession(t, overHTTP)
			ctx := context.Background()

			res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "notes", Arguments: map[string]string{"repo": "tb"}})
			require.NoError(t, err)
			doc, err := handoff.FromPromptResult(res)
			require.NoError(t, err)
			prose := finalText(res)
			require.Contains(t, prose, `Next: step "summary" is yours to write: your client cannot be asked (it declared no sampling capability), so write the answer to this prompt yourself (do not ask the user): "Write release notes for tb from this log: fix a; add b (tb)". Call tool "workflow_event" with {"_task_id":"`+doc.TaskID+`","event":"summary","payload":{"text":<string>}}, where:`)
			require.Contains(t, prose, `- "payload.text" (string): your answer to the prompt`)
			require.Contains(t, doc.PauseReason, `waiting for the client to perform step "summary" (sampling) itself`)
			rs := doc.RemainingSteps[0]
			require.Equal(t, "sampling", rs.Kind)
			require.Equal(t, mcptask.ExecClient, rs.Execution)
			require.Equal(t, "workflow_event", rs.Call.Tool)

			// A model that sends something else is told so, and nothing is recorded.
			bad, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "workflow_event", Arguments: map[string]any{
				"_task_id": doc.TaskID, "event": "summary", "payload": map[string]any{"notes": "x"}}})
			require.NoError(t, err)
			require.True(t, bad.IsError)
			require.Contains(t, tsText(bad), "does not match its schema")
			require.Equal(t, mcptask.StepAwaitingClient, stepOf(s.progressOf(t, doc.TaskID), "summary").Status)

			out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "workflow_event", Arguments: map[string]any{
				"_task_id": doc.TaskID, "event": "summary", "payload": map[string]any{"text": "Notes written by the host's model"}}})
			require.NoError(t, err)
			require.False(t, out.IsError, tsText(out))
			require.Equal(t, "Notes written by the host's model", <-s.published)
			require.Eventually(t, func() bool {
				tk, err := s.srv.Router.Task(ctx, doc.TaskID)
				return err == nil && tk.Status == mcptask.StatusCompleted
			}, 30*time.Second, 10*time.Millisecond)
			sp := stepOf(s.progressOf(t, doc.TaskID), "summary")
			require.Equal(t, workflow.AskViaHandoff, sp.Asked.Via)
			require.Equal(t, string(mcptask.ExecClient), sp.CompletedBy)

			// A question: the model asks the user, then delivers the answer.
			res, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "rollout", Arguments: map[string]string{"repo": "tb"}})
			require.NoError(t, err)
			doc, err = handoff.FromPromptResult(res)
			require.NoError(t, err)
			require.Contains(t, finalText(res), `Next: step "approve" waits for a person's answer to this question: "Deploy tb to production?"; your client cannot show them a form (it declared no elicitation capability). Ask the user, then call tool "workflow_event" with {"_task_id":"`+doc.TaskID+`","event":"approve","payload":{"approved":<boolean>,"by":<string, optional>}}, where:`)
			require.True(t, doc.RemainingSteps[0].Call.Person)
			out, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "workflow_event", Arguments: map[string]any{
				"_task_id": doc.TaskID, "event": "approve", "payload": map[string]any{"approved": true, "by": "ada"}}})
			require.NoError(t, err)
			require.False(t, out.IsError, tsText(out))
			require.True(t, <-s.deployed)
		})
	}
}

// elicitAnswer is the answer a fake person gives.
func elicitAnswer(action string, content map[string]any) func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	return func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: action, Content: content}, nil
	}
}

// runRollout starts the rollout workflow with c and waits for its end.
func runRollout(t *testing.T, c *client.Client) (string, json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, doc, err := c.GetPrompt(ctx, "rollout", map[string]string{"repo": "tb"})
	require.NoError(t, err)
	raw, err := c.TaskResult(ctx, doc.TaskID)
	return doc.TaskID, raw, err
}

// TestQuestionAsksThePerson: a question reaches the person through the
// client as a sampling step's request does (task-augmented elicitation,
// a plain one, an input request), and the form's content is its output.
func TestQuestionAsksThePerson(t *testing.T) {
	for _, tc := range askModes {
		for _, overHTTP := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "/memory", true: "/http"}[overHTTP], func(t *testing.T) {
				s := newSamplingServer(t, "", nil)
				var asked atomic.Int32
				answer := func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
					asked.Add(1)
					require.Equal(t, "Deploy tb to production?", p.Message)
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approved": true, "by": "ada"}}, nil
				}
				c, err := client.Dial(context.Background(), s.transport(t, overHTTP), clientOptions(tc.dialect, tc.via, nil, answer))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				id, _, err := runRollout(t, c)
				require.NoError(t, err)
				require.True(t, <-s.deployed)
				require.EqualValues(t, 1, asked.Load())
				p := s.progressOf(t, id)
				sp := stepOf(p, "approve")
				require.Equal(t, "question", sp.Kind)
				require.Equal(t, tc.via, sp.Asked.Via)
				require.JSONEq(t, `{"approved":true,"by":"ada"}`, string(p.Outputs["approve"]))
			})
		}
	}
}

// TestDeclinedOrFailedAskFollowsThePolicy: a person who declines the
// form, or a client whose model refuses (a JSON-RPC error), is not asked
// again: the step's failure policy applies at once. HandToClient (the
// default) hands the step to the model, which the handoff tells how to
// perform it; FailsWorkflow fails the workflow, naming why. In the
// extension dialect a declined input request does the same.
func TestDeclinedOrFailedAskFollowsThePolicy(t *testing.T) {
	ctx := context.Background()
	for _, dialect := range []mcptask.Dialect{mcptask.Core, mcptask.Extension} {
		t.Run(dialect.Label()+"/hand to the model", func(t *testing.T) {
			s := newSamplingServer(t, "", nil)
			var asked atomic.Int32
			c, err := client.Dial(ctx, s.transport(t, false), &client.Options{Dialect: dialect, Receiver: &client.Receiver{
				Elicitation: func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
					asked.Add(1)
					return &mcp.ElicitResult{Action: "decline"}, nil
				},
				Sampling: func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
					asked.Add(1)
					return nil, &jsonrpc.Error{Code: -1, Message: "the user rejected the sampling request"}
				},
			}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			workflows := []string{"rollout", "notes"}
			if dialect == mcptask.Extension {
				// An input response has no error: a client whose model
				// refuses leaves the request for the model (see the
				// handoff); a decline is an answer.
				workflows = workflows[:1]
			}
			for _, wf := range workflows {
				_, doc, err := c.GetPrompt(ctx, wf, map[string]string{"repo": "tb"})
				require.NoError(t, err)
				step := map[string]string{"rollout": "approve", "notes": "summary"}[wf]
				var cur *handoff.Document
				require.Eventually(t, func() bool {
					if dialect == mcptask.Extension {
						// The client answers the input request while it waits.
						wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
						_, _ = c.TaskResult(wctx, doc.TaskID)
						cancel()
					}
					_, cur, err = c.ResumePrompt(ctx, wf, doc.TaskID)
					require.NoError(t, err)
					sp := stepOf(s.progressOf(t, doc.TaskID), step)
					return sp.Status == mcptask.StepAwaitingClient || sp.HandedToClient
				}, 20*time.Second, 20*time.Millisecond)
				rs := cur.RemainingSteps[0]
				require.Equal(t, step, rs.Name)
				require.NotNil(t, rs.Call, "the step is the model's now")
				require.Equal(t, "workflow_event", rs.Call.Tool)
				if wf == "notes" {
					require.Contains(t, rs.Do, "rejected the sampling request")
					require.Contains(t, rs.Do, "write the answer to this prompt yourself")
				} else {
					require.Contains(t, rs.Do, "declined")
				}
			}
			require.EqualValues(t, len(workflows), asked.Load(), "a refusal is not asked again")
		})
		t.Run(dialect.Label()+"/fail the workflow", func(t *testing.T) {
			s := newSamplingServer(t, "", func(_, approve *workflow.Step) { approve.FailsWorkflow() })
			c, err := client.Dial(ctx, s.transport(t, false), &client.Options{Dialect: dialect, Receiver: &client.Receiver{
				Elicitation: elicitAnswer("cancel", nil)}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			id, raw, err := runRollout(t, c)
			require.NoError(t, err, "a failed workflow's result is a tool result with isError, not an error")
			var end mcp.CallToolResult
			require.NoError(t, json.Unmarshal(raw, &end))
			require.True(t, end.IsError)
			tk, err := s.srv.Router.Task(ctx, id)
			require.NoError(t, err)
			require.Equal(t, mcptask.StatusFailed, tk.Status)
			require.Contains(t, tk.StatusMessage, `step "approve"`)
			require.Contains(t, tk.StatusMessage, `"cancel"`)
			require.Contains(t, tk.StatusMessage, "the workflow failed")
		})
	}
}

// waitFor polls the progress of task id until ok holds.
func (s *samplingServer) waitFor(t *testing.T, id string, ok func(p *workflow.Progress) bool) *workflow.Progress {
	t.Helper()
	var p *workflow.Progress
	require.Eventually(t, func() bool {
		p = s.progressOf(t, id)
		return ok(p)
	}, 20*time.Second, 10*time.Millisecond)
	return p
}

// TestSamplingSurvivesRestarts: a task-augmented sampling request
// survives a restart of the server and one of the client. The client's
// model answers while the server is down; the client restarts too (with
// its Receiver's store); the restarted server follows the client task it
// recorded on the client's new connection, once the client names the
// workflow task, and takes the answer the model computed: the model is
// asked once.
func TestSamplingSurvivesRestarts(t *testing.T) {
	for _, backend := range canaryBackends {
		for _, overHTTP := range []bool{false, true} {
			t.Run(backend.name+map[bool]string{false: "/memory", true: "/http"}[overHTTP], func(t *testing.T) {
				samplingSurvivesRestarts(t, backend.spec(t), overHTTP)
			})
		}
	}
}

// samplingSurvivesRestarts is TestSamplingSurvivesRestarts on store db.
func samplingSurvivesRestarts(t *testing.T, db string, overHTTP bool) {
	t.Helper()
	ctx := context.Background()
	recvPath := filepath.Join(t.TempDir(), "receiver.db")
	s1 := newSamplingServer(t, db, nil)
	st1, err := client.OpenReceiverStore(recvPath)
	require.NoError(t, err)
	release := make(chan struct{})
	m := &fakeModel{}
	m.reply = func(p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
		<-release
		return &mcp.CreateMessageResult{Role: "assistant", Model: "fake-1", Content: &mcp.TextContent{Text: "notes computed while the server was down"}}, nil
	}
	c1, err := client.Dial(ctx, s1.transport(t, overHTTP), &client.Options{Dialect: mcptask.Core,
		Receiver: &client.Receiver{Sampling: m.sample, Store: st1, PollInterval: 20 * time.Millisecond}})
	require.NoError(t, err)
	_, doc, err := c1.GetPrompt(ctx, "notes", map[string]string{"repo": "tb"})
	require.NoError(t, err)
	p := s1.waitFor(t, doc.TaskID, func(p *workflow.Progress) bool {
		a := stepOf(p, "summary").Asked
		return a != nil && a.ClientTask != ""
	})
	clientTask := stepOf(p, "summary").Asked.ClientTask
	tk, err := s1.srv.Router.Task(ctx, doc.TaskID)
	require.NoError(t, err)
	require.Equal(t, `asking the client's model for step "summary" (sampling/createMessage, as the client's task `+clientTask+`), attempt 1`, tk.StatusMessage)

	require.NoError(t, s1.srv.Close()) // the server stops
	close(release)                     // the model answers meanwhile: the client keeps the result
	require.Eventually(t, func() bool {
		recs, err := st1.Load()
		return err == nil && strings.Contains(string(recs["task/"+clientTask]), "notes computed")
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, c1.Close()) // and so does the client
	require.NoError(t, st1.Close())

	s2 := newSamplingServer(t, db, nil)
	st2, err := client.OpenReceiverStore(recvPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st2.Close() })
	c2, err := client.Dial(ctx, s2.transport(t, overHTTP), &client.Options{Dialect: mcptask.Core,
		Receiver: &client.Receiver{Sampling: m.sample, Store: st2, PollInterval: 20 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c2.Close() })
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = c2.TaskResult(rctx, doc.TaskID) // names the task: the server finds its client again
	require.NoError(t, err)
	require.Equal(t, "notes computed while the server was down", <-s2.published)
	require.Len(t, m.seen(), 1, "the model was asked once")
	sp := stepOf(s2.progressOf(t, doc.TaskID), "summary")
	require.Equal(t, clientTask, sp.Asked.ClientTask, "the same client task was followed")
	require.Equal(t, workflow.ReasonRestart, sp.History[len(sp.History)-1].Reason)
}

// TestSamplingInputRequestSurvivesARestart: in the extension dialect the
// request is an input request of the workflow task, kept in its
// progress: after a restart of the server, tasks/get lists it again, and
// an answer then completes the step.
func TestSamplingInputRequestSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "tasks.db")
	s1 := newSamplingServer(t, db, nil)
	c1, err := client.Dial(ctx, s1.transport(t, true), &client.Options{Dialect: mcptask.Extension})
	require.NoError(t, err)
	_, doc, err := c1.GetPrompt(ctx, "notes", map[string]string{"repo": "tb"})
	require.NoError(t, err)
	tk, err := c1.GetTask(ctx, doc.TaskID)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusInputRequired, tk.Status)
	require.Equal(t, mcptask.MethodSampling, tk.InputRequests["summary"].Method)
	require.NoError(t, c1.Close())
	require.NoError(t, s1.srv.Close())

	s2 := newSamplingServer(t, db, nil)
	m := &fakeModel{}
	c2, err := client.Dial(ctx, s2.transport(t, true), &client.Options{Dialect: mcptask.Extension,
		Receiver: &client.Receiver{Sampling: m.sample}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c2.Close() })
	tk, err = c2.GetTask(ctx, doc.TaskID)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusInputRequired, tk.Status)
	p, err := tk.InputRequests["summary"].Sampling()
	require.NoError(t, err)
	require.Equal(t, "Write release notes for tb from this log: fix a; add b (tb)", p.Messages[0].Content.(*mcp.TextContent).Text)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = c2.TaskResult(rctx, doc.TaskID)
	require.NoError(t, err)
	require.Equal(t, "NOTES: tb from this log: fix a; add b (tb)", <-s2.published)
}

// failingUpdates is a transport whose tasks/update requests never reach
// the server: a client that dies after its model answered, before the
// server took the answer.
type failingUpdates struct{ mcp.Transport }

func (f failingUpdates) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := f.Transport.Connect(ctx)
	return failingUpdatesConn{c}, err
}

type failingUpdatesConn struct{ mcp.Connection }

func (c failingUpdatesConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == mcptask.MethodTasksUpdate {
		return errors.New("the client died")
	}
	return c.Connection.Write(ctx, msg)
}

// TestReceiverKeepsAnAnswerUntilTheServerTakesIt: in the extension
// dialect a client with a Receiver store saves the answer its model
// computed before sending it; after a restart it sends the saved answer
// instead of asking the model again, and drops it once the server took
// it.
func TestReceiverKeepsAnAnswerUntilTheServerTakesIt(t *testing.T) {
	ctx := context.Background()
	s := newSamplingServer(t, "", nil)
	recvPath := filepath.Join(t.TempDir(), "receiver.db")
	st, err := client.OpenReceiverStore(recvPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	m := &fakeModel{}
	c1, err := client.Dial(ctx, failingUpdates{s.transport(t, true)}, &client.Options{Dialect: mcptask.Extension,
		Receiver: &client.Receiver{Sampling: m.sample, Store: st}})
	require.NoError(t, err)
	_, doc, err := c1.GetPrompt(ctx, "notes", map[string]string{"repo": "tb"})
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = c1.TaskResult(rctx, doc.TaskID)
	cancel()
	require.ErrorContains(t, err, "the client died")
	require.NoError(t, c1.Close())
	require.Len(t, m.seen(), 1)
	recs, err := st.Load()
	require.NoError(t, err)
	require.Len(t, recs, 1, "the answer is kept")

	c2, err := client.Dial(ctx, s.transport(t, true), &client.Options{Dialect: mcptask.Extension,
		Receiver: &client.Receiver{Sampling: m.sample, Store: st}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c2.Close() })
	rctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = c2.TaskResult(rctx, doc.TaskID)
	require.NoError(t, err)
	require.Equal(t, "NOTES: tb from this log: fix a; add b (tb)", <-s.published)
	require.Len(t, m.seen(), 1, "the model was not asked again")
	recs, err = st.Load()
	require.NoError(t, err)
	require.Empty(t, recs, "the answer the server took is dropped")
}

// TestSamplingInAHostThatRunsTasks: a host that takes tasks but has no
// sampling (a Claude Code-like client of the tasks extension) calls the
// workflow as a tool: the call's task is not parked on a sampling input
// request it cannot answer; its result is the handoff, which tells the
// model to write the text itself.
func TestSamplingInAHostThatRunsTasks(t *testing.T) {
	ctx := context.Background()
	s := newSamplingServer(t, "", nil)
	c, err := client.Dial(ctx, s.transport(t, true), &client.Options{Dialect: mcptask.Extension})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := c.CallToolAndWait(cctx, "notes", map[string]any{"repo": "tb"}, &client.CallOptions{AllowPlain: true})
	require.NoError(t, err)
	text := tsText(res)
	require.Contains(t, text, `Next: step "summary" is yours to write: write the answer to this prompt yourself (do not ask the user): "Write release notes for tb from this log: fix a; add b (tb)"`)
	require.Contains(t, text, `Call tool "workflow_event" with {"_task_id":"`)
}

// TestSamplingInAChildWorkflow: a child workflow's sampling step asks the
// client of its topmost parent, which performs the child's client steps:
// the parent's client never named the child's task.
func TestSamplingInAChildWorkflow(t *testing.T) {
	ctx := context.Background()
	s := newSamplingServer(t, "", nil)
	m := &fakeModel{}
	c, err := client.Dial(ctx, s.transport(t, true), clientOptions(mcptask.Core, workflow.AskViaTask, m.sample, nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, doc, err := c.GetPrompt(rctx, "train", map[string]string{"repo": "tb"})
	require.NoError(t, err)
	_, err = c.TaskResult(rctx, doc.TaskID)
	require.NoError(t, err)
	require.Equal(t, "NOTES: tb from this log: fix a; add b (tb)", <-s.published)
	require.Len(t, m.seen(), 1)
	child := stepOf(s.progressOf(t, doc.TaskID), "notes").Child
	require.NotEmpty(t, child)
	require.Equal(t, workflow.AskViaTask, stepOf(s.progressOf(t, child), "summary").Asked.Via)
}
