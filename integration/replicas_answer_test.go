package integration

// A continuation that took effect is answered with what took effect
// (issue 23): once a client step is recorded, the call answers with the
// step's recorded result and where the workflow stands now (working,
// completed, cancelled), whatever happens to the task before the answer
// leaves: another replica takes it over and completes it, a tasks/cancel
// lands. A refusal (-32602) means nothing of the call was recorded. The
// replicas here are in-process servers over real HTTP; "pausing" one is
// done deterministically: the AfterRecord test hook (testhooks.Workflow) stops its
// continuation right after the record committed, and its store refuses
// its lease claims and renewals meanwhile (what the others see of a
// process that is stopped).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/internal/testhooks"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// pausableStore is a replica's PostgreSQL store that can make the replica
// look stopped to the others: while paused, its lease renewals fail (the
// leases it holds run out) and its claims are refused (its scheduler and
// takeover loop take nothing). It embeds the concrete store so that the
// engine still finds it shared and subscribes to its change feed.
type pausableStore struct {
	*postgres.Store
	paused atomic.Bool
}

func (s *pausableStore) Renew(ctx context.Context, holder string, until time.Time, ids []string) ([]string, error) {
	if s.paused.Load() {
		return nil, errors.New("test: this replica is paused")
	}
	return s.Store.Renew(ctx, holder, until, ids)
}

func (s *pausableStore) Claim(ctx context.Context, id, holder string, now, until time.Time) (*store.Task, error) {
	if s.paused.Load() {
		return nil, fmt.Errorf("%w: test: this replica is paused", store.ErrLeased)
	}
	return s.Store.Claim(ctx, id, holder, now, until)
}

// ansServer is one server of these tests: the workflow "release" (draft
// on the server, review by the client, publish on the server) over
// Streamable HTTP, logging into log.
type ansServer struct {
	name string
	url  string
	st   store.Store
	log  *lockedBuffer
	// holdPublish makes publish block until its context ends, after
	// sending the task id on published.
	holdPublish atomic.Bool
	published   chan string
}

type ansDraftIn struct {
	Topic string `json:"topic"`
}
type ansDraftOut struct {
	Draft string `json:"draft"`
}
type ansReviewIn struct {
	Draft   string `json:"draft"`
	Verdict string `json:"verdict"`
}
type ansReviewOut struct {
	Notes string `json:"notes"`
}
type ansPublishIn struct {
	Notes string `json:"notes"`
}

// ansPromptWait is long: a continuation waits for the steps it sets off
// (here, across a takeover) instead of answering "still running".
const ansPromptWait = 30 * time.Second

func newAnsServer(t *testing.T, st store.Store, name string) *ansServer {
	t.Helper()
	s := &ansServer{name: name, st: st, log: &lockedBuffer{}, published: make(chan string, 16)}
	logger := slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	wopts := workflow.Options{PromptWait: ansPromptWait}
	testhooks.SetWorkflow(&wopts, testhooks.Workflow{AfterRecord: ansAfterRecord})
	b := builder.New("answer-test", "1").WithStore(st).WithoutEnv().
		WithRouterOptions(taskrouter.Options{ReplicaID: name, LeaseDuration: replicaLease, ChangePollInterval: 200 * time.Millisecond,
			PollInterval: 20 * time.Millisecond, Logger: logger}).
		WithWorkflowOptions(wopts)
	builder.Tool(b, &mcp.Tool{Name: "draft"}, func(ctx context.Context, _ *mcp.CallToolRequest, in ansDraftIn) (*mcp.CallToolResult, ansDraftOut, error) {
		return nil, ansDraftOut{Draft: "draft about " + in.Topic}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "review"}, func(ctx context.Context, _ *mcp.CallToolRequest, in ansReviewIn) (*mcp.CallToolResult, ansReviewOut, error) {
		return nil, ansReviewOut{Notes: in.Draft + " / " + in.Verdict + " (reviewed on " + name + ")"}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "publish"}, func(ctx context.Context, req *mcp.CallToolRequest, in ansPublishIn) (*mcp.CallToolResult, any, error) {
		if s.holdPublish.Load() {
			key, _ := req.Params.GetMeta()[mcptask.MetaIdempotencyKey].(string)
			s.published <- key
			<-ctx.Done()
			return nil, nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "published " + in.Notes + " on " + name}}}, nil, nil
	}, nil)
	b.TaskWorkflow(workflow.New("release", "draft, review, publish").Arg("topic", "what to release", true).Step(
		workflow.Server("draft", "draft").Bind("topic", workflow.PromptArg("topic")),
		workflow.Client("review", "review").Bind("draft", workflow.StepOutput("draft", "draft")).Bind("verdict", workflow.FromClient("your verdict")),
		workflow.Server("publish", "publish").Bind("notes", workflow.StepOutput("review", "notes")),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	s.url = "http://" + ln.Addr().String() + "/mcp"
	t.Cleanup(func() {
		_ = hs.Close()
		_ = srv.Close()
		_ = st.Close()
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, s.log.String())
		}
	})
	return s
}

// ansReplicas starts two replicas, "r1" and "r2", on one fresh PostgreSQL
// database.
func ansReplicas(t *testing.T) (a, b *ansServer, dsn string) {
	t.Helper()
	dsn = pgtest.DSN(t)
	var out []*ansServer
	for _, name := range []string{"r1", "r2"} {
		st, err := postgres.Open(context.Background(), dsn, nil)
		require.NoError(t, err)
		out = append(out, newAnsServer(t, &pausableStore{Store: st}, name))
	}
	return out[0], out[1], dsn
}

// pause makes the replica look stopped to the others (see
// pausableStore), or running again.
func (s *ansServer) pause(on bool) { s.st.(*pausableStore).paused.Store(on) }

// ansStart starts a release workflow through c and returns its task id
// and the draft the client is to review.
func ansStart(t *testing.T, ctx context.Context, c *relClient, topic string) (id, draft string) {
	t.Helper()
	doc := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "release", "arguments": map[string]any{"topic": topic}}))
	require.Len(t, doc.RemainingSteps, 2)
	require.Equal(t, "review", doc.RemainingSteps[0].Name)
	require.NoError(t, json.Unmarshal(doc.RemainingSteps[0].Arguments["draft"], &draft))
	return doc.TaskID, draft
}

// ansPauseAfterRecord makes the continuations of task id stop right after
// their record committed: recorded is closed then, and they go on once
// resume is closed.
func ansPauseAfterRecord(t *testing.T, id string) (recorded, resume chan struct{}) {
	t.Helper()
	recorded, resume = make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := func(ctx context.Context, taskID, step string) {
		if taskID != id {
			return
		}
		once.Do(func() { close(recorded) })
		<-resume
	}
	ansHook.Store(&f)
	t.Cleanup(func() { ansHook.Store(nil) })
	return recorded, resume
}

// ansHook is the test signal the replicas' bridges run right after a
// continuation's record committed (testhooks.Workflow.AfterRecord).
var ansHook atomic.Pointer[func(ctx context.Context, taskID, step string)]

func ansAfterRecord(ctx context.Context, taskID, step string) {
	if f := ansHook.Load(); f != nil {
		(*f)(ctx, taskID, step)
	}
}

// ansContinue sends the review continuation of task id through c in the
// background; the reply comes on the returned channel.
func ansContinue(ctx context.Context, c *relClient, id, draft, verdict string) <-chan *relReply {
	out := make(chan *relReply, 1)
	go func() {
		rep, err := c.call(ctx, "tools/call", map[string]any{"name": "review", "arguments": map[string]any{"draft": draft, "verdict": verdict},
			"_meta": map[string]any{mcptask.MetaTaskID: id}})
		if err != nil {
			rep = &relReply{Err: &relRPCError{Code: -1, Message: "transport: " + err.Error()}}
		}
		out <- rep
	}()
	return out
}

func ansWait[T any](t *testing.T, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("%s: nothing within %v", what, within)
	}
	var zero T
	return zero
}

// ansRequireRecorded checks a continuation's answer: a success carrying
// the review's result (notes), unreplayed, and the workflow's status.
func ansRequireRecorded(t *testing.T, rep *relReply, notes string, status mcptask.Status) map[string]any {
	t.Helper()
	require.Nil(t, rep.Err, "a recorded continuation is never refused: %s", rep)
	res := rep.Map()
	require.NotEqual(t, true, res["isError"], "%s", rep)
	require.Equal(t, map[string]any{"notes": notes}, res["structuredContent"], "the answer carries the step's recorded result")
	sum, ok := res["_meta"].(map[string]any)[mcptask.MetaWorkflow].(map[string]any)
	require.True(t, ok, "no workflow summary in %s", rep)
	require.Equal(t, string(status), sum["status"], "where the workflow stands: %v", sum)
	require.Equal(t, "review", sum["step"])
	require.NotEqual(t, true, sum["replayed"], "this call recorded the step")
	return sum
}

// ansRequireStored checks the stored task: its status, and the review
// step recorded by the client with notes.
func ansRequireStored(t *testing.T, st store.Store, id string, status mcptask.Status, notes string) *workflow.Progress {
	t.Helper()
	tk, err := st.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, status, tk.Status, tk.StatusMessage)
	p := crashProgress(t, tk)
	var review *workflow.StepProgress
	for i := range p.Steps {
		if p.Steps[i].Name == "review" {
			review = &p.Steps[i]
		}
	}
	require.NotNil(t, review)
	require.Equal(t, mcptask.StepCompleted, review.Status)
	require.Equal(t, "client", review.CompletedBy)
	require.JSONEq(t, fmt.Sprintf(`{"notes":%q}`, notes), string(p.Outputs[review.Output]))
	return p
}

// TestReplicaPausedAfterRecordAnswersCompleted is issue 23's case: replica
// r1 records a client's review and is paused right after the record
// (before it sets off publish, before it answers); r2 finds the due
// publish step, runs it and completes the workflow; r1 resumes and
// answers the client's call with success: the review's recorded result,
// and "completed". Its log says the task ended meanwhile, and it writes
// nothing more.
func TestReplicaPausedAfterRecordAnswersCompleted(t *testing.T) {
	a, b, _ := ansReplicas(t)
	ctx := relCtx(t, 2*time.Minute)
	hc := newRelHTTPClient(8)
	ca := newRelClient(a.url, hc, relExt, "")
	id, draft := ansStart(t, ctx, ca, "v1")
	recorded, resume := ansPauseAfterRecord(t, id)

	a.pause(true) // from the record on, r1 takes no lease (its scheduler would otherwise run publish itself)
	reply := ansContinue(ctx, ca, id, draft, "ship it")
	ansWait(t, recorded, 30*time.Second, "the review recorded on r1")

	// r2 takes the due publish step over and completes the workflow.
	done := relExtWait(t, ctx, newRelClient(b.url, hc, relExt, ""), id)
	require.Equal(t, "completed", done["status"], "%v", done)
	notes := draft + " / ship it (reviewed on r1)"
	p := ansRequireStored(t, b.st, id, mcptask.StatusCompleted, notes)
	require.Equal(t, "server", p.Steps[2].CompletedBy)
	require.JSONEq(t, fmt.Sprintf(`"published %s on r2"`, notes), string(p.Outputs[p.Steps[2].Output]), "r2 ran publish")
	before, err := b.st.Get(ctx, id)
	require.NoError(t, err)

	// r1 resumes: the call it holds is answered with what took effect.
	a.pause(false)
	close(resume)
	rep := ansWait(t, reply, 30*time.Second, "r1's answer")
	ansRequireRecorded(t, rep, notes, mcptask.StatusCompleted)

	// Its drive, kicked after the pause, finds the task ended and says so.
	require.Eventually(t, func() bool { return relContains(a.log.String(), id, "ended meanwhile") }, 30*time.Second, 20*time.Millisecond,
		"r1 logs that the task ended meanwhile; its lines on it:\n%s", linesWith(a.log.String(), id))
	after, err := b.st.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.Version, after.Version, "r1 wrote nothing after the pause")

	// A retry of the call (a lost reply) gets the recorded result, replayed.
	again := newRelClient(b.url, hc, relExt, "").must(t, ctx, "tools/call", map[string]any{"name": "review",
		"arguments": map[string]any{"draft": draft, "verdict": "ship it"}, "_meta": map[string]any{mcptask.MetaTaskID: id}})
	require.Equal(t, map[string]any{"notes": notes}, again["structuredContent"])
	require.Equal(t, true, again["_meta"].(map[string]any)[mcptask.MetaWorkflow].(map[string]any)["replayed"])
}

// TestReplicaPausedHoldingLeaseAnswersCompleted: the same, paused one
// moment later, as SIGSTOP caught the replica in the issue: r1 has
// recorded the review and opened publish's first attempt under its lease
// when it stops (its renewals fail, so the lease runs out); r2 takes the
// task over, runs publish again and completes the workflow. r1's call
// answers success with the recorded review and "completed", its stopped
// publish records nothing, and its log says it lost the task ("lease
// lost", or that the task ended meanwhile).
func TestReplicaPausedHoldingLeaseAnswersCompleted(t *testing.T) {
	a, b, _ := ansReplicas(t)
	ctx := relCtx(t, 2*time.Minute)
	hc := newRelHTTPClient(8)
	ca := newRelClient(a.url, hc, relExt, "")
	id, draft := ansStart(t, ctx, ca, "v2")

	b.pause(true) // r2 takes nothing until r1 is paused: r1's drive runs publish
	a.holdPublish.Store(true)
	reply := ansContinue(ctx, ca, id, draft, "lgtm")
	require.Equal(t, id+"/publish", ansWait(t, a.published, 30*time.Second, "publish started on r1"))
	tk, err := a.st.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "r1", tk.LeaseHolder, "r1 runs publish under its lease")

	a.pause(true) // SIGSTOP: r1's lease runs out
	b.pause(false)
	done := relExtWait(t, ctx, newRelClient(b.url, hc, relExt, ""), id)
	require.Equal(t, "completed", done["status"], "%v", done)
	notes := draft + " / lgtm (reviewed on r1)"
	p := ansRequireStored(t, b.st, id, mcptask.StatusCompleted, notes)
	require.JSONEq(t, fmt.Sprintf(`"published %s on r2"`, notes), string(p.Outputs[p.Steps[2].Output]), "r2 ran publish again")
	before, err := b.st.Get(ctx, id)
	require.NoError(t, err)

	a.pause(false) // SIGCONT
	rep := ansWait(t, reply, 30*time.Second, "r1's answer")
	ansRequireRecorded(t, rep, notes, mcptask.StatusCompleted)
	// It learns of the end from the change feed, or from its renewal
	// finding the lease gone, whichever comes first, and says so.
	require.Eventually(t, func() bool {
		return relContains(a.log.String(), id, "lease lost") || relContains(a.log.String(), id, "ended meanwhile")
	}, 30*time.Second, 20*time.Millisecond, "r1 logs that it lost the task; its lines on it:\n%s", linesWith(a.log.String(), id))
	after, err := b.st.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.Version, after.Version, "the resumed replica wrote nothing")
}

// TestCancelBetweenRecordAndAnswer: a tasks/cancel that lands after a
// continuation recorded its step and before it answered: the call answers
// success, with the recorded result and "cancelled"; the stored task is
// cancelled with the step recorded. On bbolt (one server, the core
// dialect) and on PostgreSQL (two replicas, the cancel sent to the other,
// the extension dialect).
func TestCancelBetweenRecordAndAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas bool
		dialect  relDialect
	}{
		{"bbolt", false, relCore},
		{"postgres", true, relExt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a, b *ansServer
			if tc.replicas {
				a, b, _ = ansReplicas(t)
				b.pause(true) // nobody runs publish before the cancel
			} else {
				st, err := bboltstore.Open(filepath.Join(t.TempDir(), "tasks.db"), nil)
				require.NoError(t, err)
				a = newAnsServer(t, st, "")
				b = a
				a.holdPublish.Store(true) // publish runs until the cancel stops it
			}
			ctx := relCtx(t, 2*time.Minute)
			hc := newRelHTTPClient(8)
			ca := newRelClient(a.url, hc, tc.dialect, "")
			cb := newRelClient(b.url, hc, tc.dialect, "")
			if tc.dialect == relCore {
				require.NoError(t, ca.initialize(ctx))
				require.NoError(t, cb.initialize(ctx))
			}
			id, draft := ansStart(t, ctx, ca, "v3")
			recorded, resume := ansPauseAfterRecord(t, id)
			if tc.replicas {
				a.pause(true)
			}
			reply := ansContinue(ctx, ca, id, draft, "fine")
			ansWait(t, recorded, 30*time.Second, "the review recorded")

			got := cb.must(t, ctx, "tasks/cancel", map[string]any{"taskId": id})
			if tc.dialect == relCore {
				require.Equal(t, "cancelled", got["status"], "%v", got)
			}
			if tc.replicas {
				a.pause(false)
			}
			close(resume)
			rep := ansWait(t, reply, 30*time.Second, "the continuation's answer")
			notes := draft + " / fine (reviewed on " + a.name + ")"
			ansRequireRecorded(t, rep, notes, mcptask.StatusCancelled)
			p := ansRequireStored(t, a.st, id, mcptask.StatusCancelled, notes)
			require.NotEqual(t, mcptask.StepCompleted, p.Steps[2].Status, "publish was not recorded after the cancel")
		})
	}
}

// relContains reports whether some line of log names task id and says s.
func relContains(log, id, s string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, id) && strings.Contains(l, s) {
			return true
		}
	}
	return false
}
