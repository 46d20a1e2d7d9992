package client_test

import (
	"context"
	"encoding/json"
	"github.com/taskbridge/taskbridge/mcptask"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
)

// TestBadServerReplies: a core-dialect server that answers with malformed
// or unusual replies gets errors (or the right events), never a panic.
func TestBadServerReplies(t *testing.T) {
	caps := map[string]any{"tools": map[string]any{}, "tasks": map[string]any{"list": map[string]any{}, "cancel": map[string]any{}, "requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}}
	task := func(id, status string) map[string]any {
		return map[string]any{"taskId": id, "status": status, "createdAt": "2026-01-02T03:04:05Z", "lastUpdatedAt": "2026-01-02T03:04:05Z", "ttl": nil, "pollInterval": 10}
	}
	tools := []any{}
	for _, name := range []string{"plain", "noid", "badstatus", "nullresult", "badresult", "badtime"} {
		tools = append(tools, map[string]any{"name": name, "inputSchema": map[string]any{"type": "object"}, "execution": map[string]any{"taskSupport": "optional"}})
	}
	s, ct := newRawServerWith(t, caps, map[string]func(json.RawMessage) (any, error){
		"tools/list": func(json.RawMessage) (any, error) { return map[string]any{"tools": tools}, nil },
		"tools/call": func(params json.RawMessage) (any, error) {
			var p struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(params, &p)
			switch p.Name {
			case "plain":
				return map[string]any{"content": []any{map[string]any{"type": "text", "text": "no task needed"}}}, nil
			case "noid":
				return map[string]any{"task": map[string]any{"status": "working"}}, nil
			case "nullresult":
				return nil, nil
			case "badtime":
				t := task(p.Name, "working")
				t["createdAt"] = "yesterday"
				return map[string]any{"task": t}, nil
			}
			return map[string]any{"task": task(p.Name, "working")}, nil
		},
		"tasks/get": func(params json.RawMessage) (any, error) {
			var p struct {
				TaskID string `json:"taskId"`
			}
			_ = json.Unmarshal(params, &p)
			if p.TaskID == "badstatus" {
				return task(p.TaskID, "exploded"), nil
			}
			return task(p.TaskID, "completed"), nil
		},
		"tasks/result": func(json.RawMessage) (any, error) { return []int{1, 2}, nil },
		"tasks/list": func(json.RawMessage) (any, error) {
			return map[string]any{"tasks": []any{task("a", "working")}, "nextCursor": "same"}, nil
		},
	})
	c := dial(t, ct, &client.Options{Dialect: mcptask.Core})
	require.Equal(t, client.Support{Core: true, List: true, Cancel: true, ToolsCall: true}, c.ServerTasks())
	ctx := testCtx(t)

	// A server may answer a task-augmented call without a task.
	r := collect(ctx, c, "plain", nil, nil)
	require.Equal(t, []client.EventKind{client.EventResult}, r.kinds())
	require.Nil(t, r.events[0].Task)
	require.Equal(t, "no task needed", text(r.result(t)))

	for _, name := range []string{"noid", "badstatus", "nullresult", "badresult", "badtime"} {
		r := collect(ctx, c, name, nil, nil)
		require.ErrorIs(t, r.err, client.ErrMalformed, name)
	}

	// The same cursor twice is a loop, not an endless listing.
	n := 0
	var lastErr error
	for _, err := range c.ListTasks(ctx) {
		if err != nil {
			lastErr = err
			break
		}
		n++
	}
	require.Equal(t, 2, n)
	require.ErrorIs(t, lastErr, client.ErrMalformed)

	// A garbage status notification is ignored.
	require.NoError(t, s.conn.Notify(context.Background(), "notifications/tasks/status", map[string]any{"taskId": 7}))
	require.NoError(t, s.conn.Notify(context.Background(), "notifications/tasks/status", "not an object"))
	_, err := c.GetTask(ctx, "x")
	require.NoError(t, err, "still serving")
}

// TestPollingRespectsInterval: tasks/get is never polled faster than the
// task's pollInterval, and the interval grows while nothing changes (by
// half each time, up to five times the interval: 200, 300, 450, 675,
// 1000 ms). The task ends at the fifth poll
// (a count, not a time), and each wait is checked from below, so a slow
// machine cannot make it fail.
func TestPollingRespectsInterval(t *testing.T) {
	caps := map[string]any{"tasks": map[string]any{"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}}
	const endAt = 5
	var mu sync.Mutex
	var created time.Time
	var polls []time.Time
	status := func() string {
		mu.Lock()
		defer mu.Unlock()
		polls = append(polls, time.Now())
		if len(polls) >= endAt {
			return "completed"
		}
		return "working"
	}
	wire := func(status string) map[string]any {
		return map[string]any{"taskId": "t1", "status": status, "createdAt": "2026-01-02T03:04:05Z", "lastUpdatedAt": "2026-01-02T03:04:05Z", "ttl": 60000, "pollInterval": 200}
	}
	_, ct := newRawServerWith(t, caps, map[string]func(json.RawMessage) (any, error){
		"tools/list": func(json.RawMessage) (any, error) {
			return map[string]any{"tools": []any{map[string]any{"name": "timed", "inputSchema": map[string]any{"type": "object"}, "execution": map[string]any{"taskSupport": "required"}}}}, nil
		},
		"tools/call": func(json.RawMessage) (any, error) {
			mu.Lock()
			created = time.Now()
			mu.Unlock()
			return map[string]any{"task": wire("working")}, nil
		},
		"tasks/get":    func(json.RawMessage) (any, error) { return wire(status()), nil },
		"tasks/result": func(json.RawMessage) (any, error) { return map[string]any{"content": []any{}}, nil },
	})
	c := dial(t, ct, &client.Options{Dialect: mcptask.Core})
	_, err := c.CallToolAndWait(testCtx(t), "timed", nil, nil)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, polls, endAt, "polled until the task ended, and no more")
	prev := created
	var gaps []time.Duration
	for _, p := range polls {
		gaps = append(gaps, p.Sub(prev))
		prev = p
	}
	// The least wait before each poll (5% off for timer granularity): the
	// interval, then half as much again each time nothing changed, up to
	// five times the interval.
	least := []time.Duration{200, 300, 450, 675, 1000}
	for i, g := range gaps {
		require.GreaterOrEqual(t, g, least[i]*time.Millisecond*95/100, "poll %d came too early: %v", i+1, gaps)
	}
}
