package wire

import (
	"bytes"
	"encoding/json"

	"github.com/taskbridge/taskbridge/mcptask"
)

// A subscriptions/listen request that asks for task notifications (the
// extension dialect's status push), which go-sdk cannot serve: it drops
// notifications.taskIds while decoding, as it drops params.task.

// ListenRequest is the part of a subscriptions/listen request the router
// reads.
type ListenRequest struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Params ListenParams    `json:"params"`
}

// ListenParams are the params of a subscriptions/listen request.
type ListenParams struct {
	Meta          map[string]json.RawMessage `json:"_meta"`
	Notifications *struct {
		TaskIDs []string `json:"taskIds"`
	} `json:"notifications"`
}

var listenMethod = []byte(`"` + mcptask.MethodSubscriptionsListen + `"`)

// MayBeListen is a quick filter on a body before ListenFor.
func MayBeListen(body []byte) bool { return bytes.Contains(body, listenMethod) }

// ListenFor decodes a lone subscriptions/listen request that asks for task
// notifications; ok is false for anything else (the SDK serves it).
func ListenFor(body []byte) (*ListenRequest, bool) {
	var lr ListenRequest
	if json.Unmarshal(body, &lr) != nil || lr.Method != mcptask.MethodSubscriptionsListen || !lr.Params.ForTasks() {
		return nil, false
	}
	return &lr, true
}

// ForTasks reports whether the listen asks for task notifications.
func (lp *ListenParams) ForTasks() bool {
	return lp.Notifications != nil && lp.Notifications.TaskIDs != nil
}

// TaskIDs are the tasks the listen asks to follow.
func (lp *ListenParams) TaskIDs() []string {
	if lp.Notifications == nil {
		return nil
	}
	return lp.Notifications.TaskIDs
}

// DeclaresExtension reports whether the request's per-request client
// capabilities declare the tasks extension.
func (lp *ListenParams) DeclaresExtension() bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(lp.Meta[mcptask.MetaClientCapabilities], &caps) != nil {
		return false
	}
	_, ok := caps.Extensions[mcptask.ExtensionID]
	return ok
}
