package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// TestStoreErr pins the JSON-RPC error a client sees for every store
// error the workflow bridge may meet: code and message.
func TestStoreErr(t *testing.T) {
	const params, internal = mcptask.CodeInvalidParams, mcptask.CodeInternalError
	cases := []struct {
		name string
		err  error
		code int64
		msg  string
	}{
		{"not found", store.ErrNotFound, params, "workflow task not found"},
		{"not found, wrapped", fmt.Errorf("task t1: %w", store.ErrNotFound), params, "workflow task not found"},
		{"terminal", store.ErrTerminal, params, "the workflow task has already ended"},
		{"too large", fmt.Errorf("progress of t1: %w", store.ErrTooLarge), params, "progress of t1: store: value too large"},
		{"conflict", store.ErrConflict, internal, "the workflow task was changed concurrently; retry"},
		// The engine wrote something the store refused: the server's fault.
		{"invalid", store.ErrInvalid, internal, "task store: store: invalid task"},
		{"invalid cursor", store.ErrInvalidCursor, internal, "task store: store: invalid cursor"},
		{"exists", store.ErrExists, internal, "task store: store: task already exists"},
		{"invalid transition", store.ErrInvalidTransition, internal, "task store: store: invalid status transition"},
		{"closed", store.ErrClosed, internal, "task store: store: closed"},
		{"fenced", store.ErrFenced, internal, "task store: store: lease lost"},
		{"leased", store.ErrLeased, internal, "task store: store: task is leased by another holder"},
		{"other", errors.New("disk on fire"), internal, "task store: disk on fire"},
		// An error matching several: the first rule wins.
		{"not found and conflict", errors.Join(store.ErrNotFound, store.ErrConflict), internal, "the workflow task was changed concurrently; retry"},
		{"not found and terminal", errors.Join(store.ErrNotFound, store.ErrTerminal), params, "the workflow task has already ended"},
		{"already JSON-RPC", &jsonrpc.Error{Code: -32042, Message: "as is"}, -32042, "as is"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var je *jsonrpc.Error
			require.True(t, errors.As(storeErr(c.err), &je))
			require.Equal(t, c.code, je.Code)
			require.Equal(t, c.msg, je.Message)
		})
	}
	wrapped := fmt.Errorf("context: %w", &jsonrpc.Error{Code: 1, Message: "m"})
	require.True(t, storeErr(wrapped) == wrapped, "a JSON-RPC error is returned as it is, wrapping and all")
}

// A write the store refuses for a reason that may pass (down, busy) is
// not the task's silence: the drive loop decides the event again after a
// while, on the task as the store has it, and the tools that run go on
// (simulation seed 1: the refused outcome was never written, the running
// step was cut, and the task stayed "running" until a restart).
func TestRefusedWriteIsDecidedAgain(t *testing.T) {
	e := newFakeEngine()
	gate := make(chan struct{})
	cut := make(chan struct{}, 1)
	e.tool("slow", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) {
		select {
		case <-gate:
			return ok(map[string]any{"slow": true}), nil
		case <-ctx.Done():
			cut <- struct{}{}
			return nil, context.Cause(ctx)
		}
	})
	echoTools(e, "quick")
	var refused atomic.Int32
	e.setFailWrite(func(id string, u store.Update) error {
		raw := u.Variables[VarProgress]
		if raw == nil || refused.Load() > 0 {
			return nil
		}
		var p Progress
		if json.Unmarshal(raw, &p) == nil && p.step("quick") != nil && p.step("quick").Status == mcptask.StepCompleted {
			refused.Add(1)
			return errors.New("the store is busy") // once
		}
		return nil
	})
	w := New("w", "").Step(Parallel("g", Server("slow", "slow"), Server("quick", "quick")))
	f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, w)
	tk, _ := f.start(t, "w", nil)
	require.Eventually(t, func() bool {
		_, p := f.task(t, tk.ID)
		return refused.Load() == 1 && p.step("quick").Status == mcptask.StepCompleted
	}, 20*time.Second, 5*time.Millisecond, "the refused outcome is written at the next try")
	select {
	case <-cut:
		t.Fatal("the running step was cut by the refusal")
	default:
	}
	close(gate)
	tk = f.waitEnded(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	_, p := f.task(t, tk.ID)
	require.Equal(t, 1, p.step("slow").Attempts, "the step that ran through the refusal ran once")
	require.Equal(t, 1, p.step("quick").Attempts)
}
