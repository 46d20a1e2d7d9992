package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/taskbridge/taskbridge/mcptask"
)

// handle answers requests the server sends.
func (c *Client) handle(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case mcptask.MethodPing:
		return map[string]any{}, nil
	case mcptask.MethodElicit, mcptask.MethodSampling, mcptask.MethodRootsList:
		if c.recv != nil && method != mcptask.MethodRootsList && hasTaskParam(params) {
			return c.recv.create(ctx, method, params)
		}
		return c.answerInput(ctx, InputRequest{Method: method, Params: params})
	case mcptask.MethodTasksGet, mcptask.MethodTasksResult, mcptask.MethodTasksList, mcptask.MethodTasksCancel:
		if c.recv != nil {
			return c.recv.serve(ctx, method, params)
		}
	}
	return nil, mcptask.MethodNotFound("client does not handle %s", method)
}

// answerInput routes an input request to the CallTool watching its task,
// or answers it directly.
func (c *Client) answerInput(ctx context.Context, req InputRequest) (any, error) {
	taskID := relatedTaskID(req.Params)
	if w := c.inputWatcher(taskID); w != nil {
		ask := &inputAsk{taskID: taskID, req: req, reply: make(chan inputAnswer, 1)}
		select {
		case w.inputs <- ask:
			select {
			case a := <-ask.reply:
				return rawOrError(a.result, a.err)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case <-w.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res, err := c.answerDirect(ctx, taskID, req)
	return rawOrError(res, err)
}

func rawOrError(res json.RawMessage, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	if !json.Valid(res) {
		return nil, errors.New("client: the input handler returned invalid JSON")
	}
	return res, nil
}

// answerDirect answers an input request with InputHandler, or with the
// Receiver's handlers for a plain (non-task) sampling or elicitation.
func (c *Client) answerDirect(ctx context.Context, taskID string, req InputRequest) (json.RawMessage, error) {
	if h := c.opts.InputHandler; h != nil {
		return h(ctx, taskID, req)
	}
	if r := c.opts.Receiver; r != nil {
		if res, ok, err := r.answerSync(ctx, req); ok {
			if err != nil {
				return nil, err
			}
			return json.Marshal(res)
		}
	}
	return nil, &noHandlerError{method: req.Method}
}

// noHandlerError is ErrNoInputHandler for the caller and a -32601
// JSON-RPC error for the server.
type noHandlerError struct{ method string }

func (e *noHandlerError) Error() string { return fmt.Sprintf("%v (%s)", ErrNoInputHandler, e.method) }

func (e *noHandlerError) Unwrap() []error {
	return []error{ErrNoInputHandler, mcptask.MethodNotFound("%s", e.Error())}
}

func hasTaskParam(params json.RawMessage) bool {
	var p struct {
		Task json.RawMessage `json:"task"`
	}
	return json.Unmarshal(params, &p) == nil && !isAbsent(p.Task)
}

// relatedTaskID reads _meta["io.modelcontextprotocol/related-task"].taskId.
func relatedTaskID(params json.RawMessage) string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	var rt struct {
		TaskID string `json:"taskId"`
	}
	if raw, ok := p.Meta[mcptask.MetaRelatedTask]; ok && json.Unmarshal(raw, &rt) == nil {
		return rt.TaskID
	}
	return ""
}

// onNotification runs on the read loop: it must not block.
func (c *Client) onNotification(method string, params json.RawMessage) {
	if method == mcptask.NotificationTaskEvent {
		c.onTaskEvent(params) // stream.go
		return
	}
	if method != mcptask.NotificationTaskStatus {
		return
	}
	t, err := decodeTask(params)
	if err != nil {
		c.log.Debug("ignoring malformed task status notification", "error", err)
		return
	}
	c.observe(t)
	c.mu.Lock()
	ws := slices.Clone(c.watchers[t.ID])
	c.mu.Unlock()
	for _, w := range ws {
		w.push(t)
	}
}
