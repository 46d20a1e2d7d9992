package taskrouter

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// This file holds the engine's replies that differ by dialect: the shape
// of a create reply, of tasks/get and of tasks/cancel, and the gates a
// tasks/* request passes. Everywhere else the engine asks the request's
// mcptask.Dialect a question (ServerDecidesTasks, ToolErrorStatus,
// HasMethod) instead of branching on versions.

// statusIn is the status dialect d shows for task t. The store records
// a task whose work failed as failed, whether it ended with a JSON-RPC
// error (t.Error) or with a tool result with isError (t.Result): the
// dashboard, pushes, the CLI and a workflow's parent read one truth. The
// core dialect shows that status as it is; the extension reserves failed
// for JSON-RPC errors, so a task that failed with a tool result reads as
// completed there, its result carrying isError
// (mcptask.Dialect.ToolErrorStatus).
func statusIn(d mcptask.Dialect, t *store.Task) mcptask.Status {
	if t.Status == mcptask.StatusFailed && t.Error == nil && len(t.Result) > 0 {
		return d.ToolErrorStatus()
	}
	return t.Status
}

// createReply is the answer to a tools/call of tool that became task t;
// immediate is Options.ImmediateResponse.
func createReply(d mcptask.Dialect, tool string, t *store.Task, immediate func(tool string, t *store.Task) string) mcp.Result {
	if d == mcptask.Extension {
		return &extCreateTaskResult{ResultType: mcptask.ResultTypeTask, ExtTask: extensionTask(t), Content: []mcp.Content{}}
	}
	res := &CreateTaskResult{Task: CoreTask(t)}
	if immediate != nil {
		if text := immediate(tool, t); text != "" {
			res.Meta = mcp.Meta{mcptask.MetaModelImmediateResponse: text}
		}
	}
	return res
}

// getReply is the answer to tasks/get: the task, plus in the extension its
// outcome or pending input requests (from inputs) inline. A record whose
// stored JSON cannot be sent (damaged) is a -32603, the same on every
// path.
func getReply(d mcptask.Dialect, t *store.Task, inputs pendingInputs) (mcp.Result, error) {
	if d == mcptask.Core {
		return &getTaskResult{CoreTask: CoreTask(t)}, nil
	}
	if err := damaged(t); err != nil {
		return nil, err
	}
	res := &extGetTaskResult{ResultType: mcptask.ResultTypeComplete, ExtTask: extensionTask(t)}
	switch t.Status {
	case mcptask.StatusInputRequired:
		res.InputRequests = inputs.of(t)
	case mcptask.StatusCompleted:
		res.Result = t.Result
	case mcptask.StatusFailed:
		if t.Error != nil {
			res.Error = t.Error
		} else {
			res.Result = t.Result // completed, with the isError result (statusIn)
		}
	}
	for k, v := range res.InputRequests {
		if !json.Valid(v) {
			return nil, damagedRecord(t, fmt.Sprintf("input request %q", k))
		}
	}
	return res, nil
}

// damaged returns the -32603 error a read of task t answers when the JSON
// it stored (its result, its error's data) is not valid JSON: a record
// damaged on disk or edited by hand, which no reply can carry. Without
// the check the SDK's path hung (the reply could not be encoded, so none
// was sent) and the fast path answered an empty body.
func damaged(t *store.Task) error {
	switch {
	case len(t.Result) > 0 && !json.Valid(t.Result):
		return damagedRecord(t, "result")
	case t.Error != nil && len(t.Error.Data) > 0 && !json.Valid(t.Error.Data):
		return damagedRecord(t, "error data")
	}
	return nil
}

func damagedRecord(t *store.Task, part string) error {
	return mcptask.InternalError("task %s: its stored %s is damaged (not valid JSON) and cannot be read; the task is %s", t.ID, part, t.Status)
}

// cancelReply is the answer to tasks/cancel once t is cancelled (or, in
// the extension, once the request was taken).
func cancelReply(d mcptask.Dialect, t *store.Task) mcp.Result {
	if d == mcptask.Extension {
		return &ackResult{ResultType: mcptask.ResultTypeComplete}
	}
	return &getTaskResult{CoreTask: CoreTask(t)}
}

// gate checks that a tasks/* request may proceed in its dialect, in the
// order the extension's conformance suite expects: methods the dialect does
// not have (-32601), then the Mcp-Name header (-32020), then the capability
// declaration (-32021), then who the requestor is (-32600). The task lookup
// (-32602) comes after.
func gate(q *Request, method, id string) error {
	if !q.Dialect.HasMethod(method) {
		if q.Dialect == mcptask.Extension {
			return mcptask.MethodNotFound("%s is not part of the %s extension; poll tasks/get", method, mcptask.ExtensionID)
		}
		return mcptask.MethodNotFound("%s belongs to the %s extension (protocol %s and later)", method, mcptask.ExtensionID, mcptask.ExtensionVersion)
	}
	if q.Dialect == mcptask.Extension {
		if method != mcptask.MethodTasksList {
			if err := checkNameHeader(q.MCP, id); err != nil {
				return err
			}
		}
		if !q.Declared {
			return mcptask.MissingExtension(method)
		}
	}
	return q.OwnerErr
}

// checkNameHeader enforces that an extension-dialect tasks/* request over
// HTTP names its task in the Mcp-Name header, when the header is present:
// every Mcp-Name value must equal taskId. (The HTTP handler already answers
// such a mismatch with HTTP 400, as the SDK does for its own headers; this
// check covers batches and other transports.)
func checkNameHeader(req mcp.Request, id string) error {
	extra := req.GetExtra()
	if extra == nil || extra.Header == nil {
		return nil
	}
	return nameHeaderError(http.Header(extra.Header), id)
}

// nameHeaderError returns the -32020 error for Mcp-Name values that do not
// all equal id, or nil.
func nameHeaderError(h http.Header, id string) error {
	for _, name := range h.Values("Mcp-Name") {
		if name != id {
			return mcptask.Errorf(mcptask.CodeHeaderMismatch, "header mismatch: Mcp-Name header value %q does not match taskId %q", name, id)
		}
	}
	return nil
}
