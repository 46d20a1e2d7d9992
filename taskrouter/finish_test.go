package taskrouter_test

import (
	"context"
	"errors"
	"github.com/taskbridge/taskbridge/mcptask"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// logRecorder is a slog.Handler that keeps the messages logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// containing returns the messages that contain s.
func (l *logRecorder) containing(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}

const (
	logEndedMeanwhile = "not recording a task's outcome: the task ended meanwhile"
	logTakenOver      = "not recording a task's outcome: another process took the task over"
)

// gatedRun starts a router on a store that says it is shared (so the
// handler runs under a lease) and runs a task whose handler waits for
// release; it returns once the task is stored and its handler runs.
func gatedRun(t *testing.T) (st *racyStore, logs *logRecorder, task *store.Task, release func()) {
	t.Helper()
	st = &racyStore{Store: memory.New(nil)}
	logs = &logRecorder{}
	h := newHarnessOn(t, st, func(c *taskrouter.Options) {
		c.Logger = slog.New(logs)
		c.ReplicaID = "here"
		// No renewal within the test: only the outcome's write finds out.
		c.LeaseDuration = time.Hour
	})
	gate, started := make(chan struct{}), make(chan struct{}, 1)
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "gated"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		started <- struct{}{}
		<-gate
		return textResult("done"), nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	p := h.dial(inMemory, core, nil)
	id := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "gated", "arguments": map[string]any{}, "task": map[string]any{}}))["taskId"].(string)
	<-started
	task, err := st.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, "here", task.LeaseHolder, "the handler runs under this replica's lease")
	return st, logs, task, func() { close(gate) }
}

// TestFinishOfTaskEndedElsewhere: another replica cancels the task while
// its handler runs here (and this replica has not heard of it yet). The
// handler's outcome is refused by the fence (the cancel cleared the
// holder), and the log says the task ended, not that it was taken over.
func TestFinishOfTaskEndedElsewhere(t *testing.T) {
	st, logs, task, release := gatedRun(t)
	// The other replica writes to the store directly: no stopRun here.
	cancelled, err := st.Store.Update(t.Context(), task.ID, store.Update{Status: mcptask.StatusCancelled, StatusMessage: ptr("cancelled elsewhere")})
	require.NoError(t, err)
	release()
	require.Eventually(t, func() bool { return len(logs.containing(logEndedMeanwhile)) == 1 }, 30*time.Second, 5*time.Millisecond)
	require.Empty(t, logs.containing(logTakenOver))
	require.Empty(t, logs.containing("recording task outcome"), "no error logged")
	got, err := st.Get(t.Context(), task.ID)
	require.NoError(t, err)
	require.Equal(t, cancelled, got, "the outcome was not recorded")
}

// TestFinishOfTaskTakenOver: another replica claims the task (its lease
// ran out) while its handler runs here: the log says taken over.
func TestFinishOfTaskTakenOver(t *testing.T) {
	st, logs, task, release := gatedRun(t)
	claimed, err := st.Claim(t.Context(), task.ID, "there", task.LeaseUntil, task.LeaseUntil.Add(time.Minute))
	require.NoError(t, err)
	release()
	require.Eventually(t, func() bool { return len(logs.containing(logTakenOver)) == 1 }, 30*time.Second, 5*time.Millisecond)
	require.Empty(t, logs.containing(logEndedMeanwhile))
	got, err := st.Get(t.Context(), task.ID)
	require.NoError(t, err)
	require.Equal(t, claimed, got, "the outcome was not recorded")
}

// TestFinishOfTaskTakenOverAndEnded: the replica that took the task over
// has already finished it: the paused replica's write is fenced (the
// terminal move cleared the holder), and its log says the task ended.
func TestFinishOfTaskTakenOverAndEnded(t *testing.T) {
	st, logs, task, release := gatedRun(t)
	claimed, err := st.Claim(t.Context(), task.ID, "there", task.LeaseUntil, task.LeaseUntil.Add(time.Minute))
	require.NoError(t, err)
	fence := claimed.Fence()
	done, err := st.Update(t.Context(), task.ID, store.Update{Fence: &fence, Status: mcptask.StatusCompleted, Result: []byte(`{"content":[]}`)})
	require.NoError(t, err)
	release()
	require.Eventually(t, func() bool { return len(logs.containing(logEndedMeanwhile)) == 1 }, 30*time.Second, 5*time.Millisecond)
	require.Empty(t, logs.containing(logTakenOver))
	got, err := st.Get(t.Context(), task.ID)
	require.NoError(t, err)
	require.Equal(t, done, got)
}

func ptr[T any](v T) *T { return &v }

// claimThenCancel is a shared memory store on which another process
// cancels a task right after the second Claim of it (a takeover claims
// the task, then the tool's recovery claims it again before it re-runs).
type claimThenCancel struct {
	*memory.Store
	mu     sync.Mutex
	claims int
}

func (s *claimThenCancel) Shared() bool { return true }

func (s *claimThenCancel) Claim(ctx context.Context, id, holder string, now, until time.Time) (*store.Task, error) {
	t, err := s.Store.Claim(ctx, id, holder, now, until)
	s.mu.Lock()
	s.claims++
	second := s.claims == 2
	s.mu.Unlock()
	if err == nil && second {
		_, err = s.Store.Update(ctx, id, store.Update{Status: mcptask.StatusCancelled})
	}
	return t, err
}

// TestTakeoverOfTaskEndedMeanwhile: a replica takes over a retryable
// tool's task whose process died, and the task is cancelled elsewhere
// between the claim and the re-run's first (fenced) write. The write is
// refused as fenced; the task ended, so there is nothing to re-run and
// nothing to report as an error.
func TestTakeoverOfTaskEndedMeanwhile(t *testing.T) {
	st := &claimThenCancel{Store: memory.New(nil)}
	logs := &logRecorder{}
	h := newHarnessOn(t, st, func(c *taskrouter.Options) {
		c.Logger = slog.New(logs)
		c.ReplicaID = "here"
		c.LeaseDuration = time.Hour
	})
	now := time.Now()
	_, err := st.Create(t.Context(), &store.Task{ID: "orphan", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now,
		Request:     store.Request{Method: "tools/call", Name: "sleepy", Arguments: []byte(`{"ms":1}`)},
		Labels:      map[string]string{taskrouter.LabelKind: taskrouter.KindTool},
		LeaseHolder: "dead", LeaseUntil: now.Add(-time.Second)})
	require.NoError(t, err)
	n, err := taskrouter.Takeover(t.Context(), h.r)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, logs.containing("not re-running an interrupted task: it ended meanwhile"), 1, "%q", logs.containing(""))
	require.Equal(t, 2, st.claims)
	require.Empty(t, logs.containing("resolving a task taken over"), "no error logged")
	got, err := st.Get(t.Context(), "orphan")
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusCancelled, got.Status)
}

// refusingStore refuses the first writes that end a task (a store down
// or busy for a moment).
type refusingStore struct {
	*memory.Store
	mu     sync.Mutex
	refuse int
}

func (s *refusingStore) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	s.mu.Lock()
	refused := u.Status.Terminal() && s.refuse > 0
	if refused {
		s.refuse--
	}
	s.mu.Unlock()
	if refused {
		return nil, errors.New("the store is busy")
	}
	return s.Store.Update(ctx, id, u)
}

// TestFinishRecordsAfterARefusal: the store refuses the write of a task's
// outcome for a moment; the outcome is written when it takes it (the
// task stayed working forever: simulation seed 341, a workflow's leg).
func TestFinishRecordsAfterARefusal(t *testing.T) {
	st := &refusingStore{Store: memory.New(nil), refuse: 3}
	h := newHarnessOn(t, st, nil)
	gate := make(chan struct{})
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "gated"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		<-gate
		return textResult("done"), nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	p := h.dial(inMemory, core, nil)
	id := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "gated", "arguments": map[string]any{}, "task": map[string]any{}}))["taskId"].(string)
	close(gate) // the task is stored: its outcome is a write of its own
	require.Eventually(t, func() bool {
		got, err := st.Get(t.Context(), id)
		return err == nil && got.Status == mcptask.StatusCompleted
	}, 30*time.Second, 5*time.Millisecond, "the outcome is recorded once the store takes it")
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Zero(t, st.refuse, "every refusal was met")
}
