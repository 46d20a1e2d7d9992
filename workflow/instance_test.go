package workflow

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// heldAcross reports whether lock stays held while a call is made: tried
// for a while, a lock some other goroutine holds for a moment is taken;
// one the caller holds across its call never is.
func heldAcross(try func() bool) bool {
	for range 400 {
		if try() {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

// lockWatch fails the test when, during a call of the store, a queue or
// a child, the memory lock of some instance of b is held (by the caller:
// it never frees while the call runs), or the write turn of the calling
// task's instance is held across a queue's or a child's call.
type lockWatch struct {
	mu       sync.Mutex
	b        *Bridge
	calls    map[string]int
	problems []string
}

func (w *lockWatch) call(what, id string) {
	w.mu.Lock()
	b := w.b
	w.calls[what]++
	w.mu.Unlock()
	if b == nil {
		return
	}
	if heldAcross(b.mu.TryLock) {
		w.problem("the bridge's lock is held across a %s of task %s", what, id)
	} else {
		b.mu.Unlock()
	}
	b.mu.Lock()
	var ins []*instance
	for _, in := range b.instances {
		ins = append(ins, in)
	}
	b.mu.Unlock()
	for _, in := range ins {
		if heldAcross(in.mu.TryLock) {
			w.problem("the memory lock of task %s's instance is held across a %s of task %s", in.id, what, id)
			continue
		}
		in.mu.Unlock()
		if in.id != id {
			continue
		}
		switch what {
		case "enqueue", "dequeue", "create": // a queue, a child: after the write, outside the turn too
			turnFree := func() bool {
				select {
				case in.turn <- struct{}{}:
					<-in.turn
					return true
				default:
					return false
				}
			}
			if heldAcross(turnFree) {
				w.problem("the write turn of task %s is held across a %s", id, what)
			}
		}
	}
}

func (w *lockWatch) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

// The instance holds no lock while it calls the store, a queue or a
// child: its memory lock is held for memory only, and its write turn
// (which orders its writes) never across a queue's or a child's call.
// Exercised on a workflow with a queued step, a child, a client step, a
// pause and a resume, a continuation, and a cancel of a queued task.
func TestInstanceHoldsNoLockAcrossCalls(t *testing.T) {
	e := newFakeEngine()
	childTools(e)
	echoTools(e, "work")
	e.tool("answer", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"ok": true}), nil
	})
	q := &Queue{Name: "locks", Concurrency: 1}
	block := make(chan struct{})
	e.tool("hold", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return ok(map[string]any{"held": true}), nil
	})
	main := New("main", "").Arg("repo", "", true).Step(
		Server("queued", "work").OnQueue(q),
		Child("notes", "release_notes").Bind("repo", PromptArg("repo")),
		Client("answer", "answer"),
		Server("last", "work"),
	)
	holder := New("holder", "").Step(Server("hold", "hold").OnQueue(q))
	w := &lockWatch{calls: map[string]int{}}
	e.onCall = w.call
	f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, notesWorkflow(), main, holder)
	w.mu.Lock()
	w.b = f.b
	w.mu.Unlock()

	tk, _ := f.start(t, "main", map[string]string{"repo": "r"})
	tk, p := f.settled(t, tk.ID)
	child := p.step("notes").Child
	require.NotEmpty(t, child)
	_, err := f.call(t, child, "review_notes", map[string]any{"approved": true})
	require.NoError(t, err)
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StepAwaitingClient, p.step("answer").Status, tk.StatusMessage)
	_, _, err = f.b.Pause(context.Background(), tk.ID, taskrouter.PauseRequest{By: "ops", Reason: "a look"})
	require.NoError(t, err)
	_, _, err = f.b.Resume(context.Background(), tk.ID, "ops")
	require.NoError(t, err)
	_, err = f.call(t, tk.ID, "answer", map[string]any{})
	require.NoError(t, err)
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)

	// A holder of the queue's only place, and a run waiting behind it,
	// cancelled.
	h, _ := f.start(t, "holder", nil)
	h2, _ := f.start(t, "holder", nil)
	require.Eventually(t, func() bool {
		_, p2 := f.task(t, h2.ID)
		return p2.step("hold").Queue.waiting()
	}, 10*time.Second, time.Millisecond, "the second waits for the place")
	e.cancel(t, h2.ID)
	close(block)
	h, _ = f.settled(t, h.ID)
	require.Equal(t, mcptask.StatusCompleted, h.Status, h.StatusMessage)

	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(t, w.problems)
	for _, what := range []string{"read", "write", "create", "enqueue", "dequeue", "cancel", "lease"} {
		require.Positive(t, w.calls[what], "the test makes a %s", what)
	}
}
