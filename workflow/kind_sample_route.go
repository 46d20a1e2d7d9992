// The ways a sampling or ask step's request reaches the client (the
// routes kind_sample.go's comment lists): the client a step asks, the
// route its request takes (a task-augmented request followed to its
// result, a plain request, an input request of the workflow task), and
// what an attempt records of the client's own task.

package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// clientTaskOf is the task whose client a step of workflow task t asks:
// t's own, or for a child workflow its topmost ancestor's (the client
// that performs the child's client steps, see kind_child.go).
func (b *Bridge) clientTaskOf(ctx context.Context, t *store.Task) string {
	for depth := 0; t.Labels[LabelParent] != "" && depth < MaxDepth; depth++ {
		parent, err := b.engine.Task(ctx, t.Labels[LabelParent])
		if err != nil {
			break
		}
		t = parent
	}
	return t.ID
}

// peerer is an engine that reaches a task's client with requests
// (*taskrouter.Router).
type peerer interface {
	Peers() *taskrouter.Peers
}

// askedClient reports whether the client performs a step that asks it:
// it answers the workflow task's input request, or its model performs it.
func askedClient(sp *StepProgress) bool {
	return sp.Asked != nil && (sp.Asked.Via == AskViaInput || sp.Asked.Via == AskViaHandoff)
}

// askedRequest is the input request the workflow task lists for a step
// that asks the client through one.
func askedRequest(sp *StepProgress) json.RawMessage {
	if sp.Asked == nil || sp.Asked.Via != AskViaInput || sp.Status != mcptask.StepAwaitingEvent {
		return nil
	}
	return sp.Asked.Request
}

// route decides, when the step's turn comes, whether the client answers
// an input request (extension dialect) or its model performs the step (a
// client known not to take the request); "" lets the server ask it.
func (a *clientAsk) route(x *turn, self asker) (via, why string) {
	d, _ := mcptask.ParseDialect(x.r.task.Labels[taskrouter.LabelDialect])
	if d.HasMethod(mcptask.MethodTasksUpdate) {
		return AskViaInput, ""
	}
	reach, refuses := x.r.peer(a.method) // the executor's observation (drive.go's peerRoot)
	if !reach {
		return AskViaHandoff, "the server cannot send requests to your client"
	}
	if refuses {
		return AskViaHandoff, fmt.Sprintf("%s (it declared no %s capability)", self.words().cannot, self.words().capability)
	}
	return "", ""
}

// performFor is the attempt of step kind self: find the client, ask it
// (a task-augmented request followed to its end, or a plain one), read
// its answer.
func (a *clientAsk) performFor(self asker) func(ctx context.Context, w *attemptWork) (*mcp.CallToolResult, error) {
	return func(ctx context.Context, w *attemptWork) (*mcp.CallToolResult, error) {
		pe, ok := w.in.b.engine.(peerer)
		if !ok {
			return nil, &finalError{"the server cannot send requests to clients"}
		}
		target := w.in.id
		if t, _ := w.in.known(); t != nil {
			target = w.in.b.clientTaskOf(ctx, t)
		}
		wctx, cancel := context.WithTimeout(ctx, peerWait)
		peer, err := pe.Peers().Await(wctx, target)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("no connection to the workflow's client within %s (none named the task since the server started, or its connection takes no requests from the server)", peerWait)
		case peer.Dialect().NegotiatesPerRequest():
			return nil, &finalError{fmt.Sprintf("the client speaks protocol %s, which takes no requests from the server", mcptask.ExtensionVersion)}
		case !peer.Can(a.method):
			return nil, &finalError{fmt.Sprintf("the client declared no %s capability", self.words().capability)}
		}
		params := self.params(fillTemplate(a.text, w.args))
		params["_meta"] = mcptask.RelatedTaskMeta(w.in.id)
		var raw json.RawMessage
		if peer.TakesTask(a.method) {
			raw, err = a.viaTask(ctx, w, peer, params)
		} else {
			w.note(ctx, &Asked{Via: AskViaRequest})
			raw, err = peer.Call(ctx, a.method, params)
		}
		if err != nil {
			var je *jsonrpc.Error
			if errors.As(err, &je) {
				return nil, &finalError{fmt.Sprintf("the client answered %s with an error: %s (code %d)", a.method, je.Message, je.Code)}
			}
			return nil, err
		}
		out, declined, err := self.result(raw)
		switch {
		case declined != "":
			return nil, &finalError{declined}
		case err != nil:
			return nil, fmt.Errorf("the client's answer does not do: %v", err)
		}
		return &mcp.CallToolResult{StructuredContent: out, Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}}, nil
	}
}

// viaTask asks with a task-augmented request and follows the client's
// task to its result. A client task recorded by an earlier attempt (one
// a restart cut short) is followed instead, if the client still knows
// it.
func (a *clientAsk) viaTask(ctx context.Context, w *attemptWork, peer *taskrouter.Peer, params map[string]any) (json.RawMessage, error) {
	id := w.clientTask(ctx)
	if id != "" {
		raw, err := peer.Call(ctx, mcptask.MethodTasksGet, map[string]any{"taskId": id})
		var je *jsonrpc.Error
		var t struct {
			Status mcptask.Status `json:"status"`
		}
		switch {
		case errors.As(err, &je) && je.Code == mcptask.CodeInvalidParams:
			id = "" // the client does not know it (it forgot, or it is another client): ask anew
		case err != nil:
			return nil, err
		case json.Unmarshal(raw, &t) == nil && t.Status == mcptask.StatusCancelled:
			id = "" // an earlier attempt gave up on it (its Timeout): ask anew
		}
	}
	if id == "" {
		params["task"] = map[string]any{"ttl": w.ttl().Milliseconds()}
		raw, err := peer.Call(ctx, a.method, params)
		if err != nil {
			return nil, err
		}
		var created struct {
			Task *struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		}
		if json.Unmarshal(raw, &created) != nil || created.Task == nil || created.Task.TaskID == "" {
			return raw, nil // the client answered at once, without a task
		}
		id = created.Task.TaskID
	}
	w.note(ctx, &Asked{Via: AskViaTask, ClientTask: id})
	return followClientTask(ctx, peer, id)
}

// followClientTask polls the client's task id with tasks/get until it
// ends, then returns tasks/result (the client's result, or its error).
// A task the workflow no longer waits for (the workflow task was
// cancelled, expired or ended; the attempt ran out of its Timeout) is
// cancelled on the client; one a graceful stop of the server or a lost
// lease cut short is not: whoever runs the step next follows it.
func followClientTask(ctx context.Context, peer *taskrouter.Peer, id string) (json.RawMessage, error) {
	defer func() {
		if !givenUp(ctx) {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_, _ = peer.Call(cctx, mcptask.MethodTasksCancel, map[string]any{"taskId": id})
		cancel()
	}()
	for {
		raw, err := peer.Call(ctx, mcptask.MethodTasksGet, map[string]any{"taskId": id})
		if err != nil {
			return nil, err
		}
		var t struct {
			Status        mcptask.Status `json:"status"`
			StatusMessage string         `json:"statusMessage"`
			PollInterval  *int64         `json:"pollInterval"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("the client's tasks/get of its task %s: %v", id, err)
		}
		switch t.Status {
		case mcptask.StatusCompleted, mcptask.StatusFailed:
			return peer.Call(ctx, mcptask.MethodTasksResult, map[string]any{"taskId": id})
		case mcptask.StatusCancelled:
			return nil, &finalError{fmt.Sprintf("the client cancelled its task %s: %s", id, t.StatusMessage)}
		}
		wait := 500 * time.Millisecond
		if t.PollInterval != nil {
			wait = min(max(time.Duration(*t.PollInterval)*time.Millisecond, 20*time.Millisecond), 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(wait):
		}
	}
}

// givenUp reports whether the attempt's ctx ended because the workflow
// no longer waits for it (not a graceful stop, not a lost lease).
func givenUp(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	var cut *errCut
	switch taskrouter.Stopped(ctx) {
	case taskrouter.StopCancelled, taskrouter.StopExpired, taskrouter.StopEnded:
		return true
	}
	return errors.As(context.Cause(ctx), &cut)
}

// clientTask is the client task the attempt's record holds, if any.
func (w *attemptWork) clientTask(ctx context.Context) string {
	var id string
	w.in.writing(func() {
		if w.in.load(ctx) != nil || w.in.wf == nil || w.in.p == nil {
			return
		}
		if sl := w.in.wf.slotAt(w.in.p, w.path); sl != nil && sl.sp.Asked != nil && sl.sp.Asked.Via == AskViaTask {
			id = sl.sp.Asked.ClientTask
		}
	})
	return id
}

// ttl is how long the client should keep its task: the workflow task's
// ttl, an hour without one.
func (w *attemptWork) ttl() time.Duration {
	if t, _ := w.in.known(); t != nil && t.TTL > 0 {
		return t.TTL
	}
	return time.Hour
}

// note records how the attempt asks the client, in its record, while the
// attempt is still the record's open one: the client's task id is then
// durable before the server waits for it. A write that fails is logged:
// the attempt goes on (a restart asks again).
func (w *attemptWork) note(ctx context.Context, asked *Asked) {
	err := w.in.commitTurn(context.WithoutCancel(ctx), func(p *Progress) (store.Update, error) {
		sl := w.in.wf.slotAt(p, w.path)
		if sl == nil {
			return store.Update{}, errStale
		}
		if a := sl.sp.open(); a == nil || a.N != w.n {
			return store.Update{}, errStale
		}
		if old := sl.sp.Asked; old != nil && old.Via == asked.Via && old.ClientTask == asked.ClientTask {
			return store.Update{}, errUnchanged
		}
		sl.sp.Asked = asked
		p.PauseReason = pauseReason(w.in.wf, p)
		return store.Update{}, nil
	})
	if err != nil && !errors.Is(err, errUnchanged) && !errors.Is(err, errStale) {
		w.in.b.engine.Logger().Warn("recording how a workflow step asks the client", "task", w.in.id, "step", w.path, "error", err)
	}
}

// peerRoot finds, before a decision, how the workflow's client is reached
// (the root of its lineage, and the engine's connection to it): a step
// that asks the client decides by it (kind_sample_route.go), and a
// decision calls nothing to learn it.
func (in *instance) peerRoot(ctx context.Context) {
	pe, ok := in.b.engine.(peerer)
	var t *store.Task
	asks := false
	in.writing(func() {
		t, asks = in.task, in.wf == nil // not known yet: look
		if in.wf != nil {
			for _, s := range in.wf.steps {
				_, a := s.kind.(asker)
				asks = asks || a
			}
		}
	})
	if !ok || !asks {
		in.locked(func() { in.peer = peerView{reach: ok} }) // none of its steps asks the client
		return
	}
	var root string
	in.locked(func() { root = in.root })
	if root == "" && t != nil {
		root = in.b.clientTaskOf(ctx, t) // the store, for a child: without a lock
		in.locked(func() { in.root = root })
	}
	if root == "" {
		root = in.id
	}
	of := pe.Peers().Of(root)
	in.locked(func() { in.peer = peerView{reach: true, of: of} })
}
