package taskrouter

import (
	"bytes"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// Host mode: what a model in an LLM host can do with tool calls that carry
// only a name and arguments. It cannot set _meta, so a tool that performs
// a step of a workflow task also takes the task's id as the argument
// _task_id (mcptask.ArgTaskID), advertised in its input schema. The router
// moves that argument into _meta._task_id before the tool's schema is
// checked, so the tool never sees it, and the call continues the task as
// one with _meta._task_id does.

// taskIDArgumentDescription is how the _task_id argument is described in
// the input schema of the tools that take it.
const taskIDArgumentDescription = "Only when performing a step of a workflow task: the task's id (from the handoff). Leave it out otherwise."

var taskIDKey = []byte(`"` + mcptask.ArgTaskID + `"`)

// moveTaskIDArgument moves the argument _task_id of a tools/call into
// _meta._task_id. A value that is not a non-empty string is refused with
// -32602. One that names another task than _meta._task_id is left where
// it is when contained is true (the continuation handler decides, see
// ContinuationHandler: a workflow's id in _meta and one of its children's
// steps or items in the argument, as the handoff gives them, name one
// workflow), and refused with -32602 otherwise.
func moveTaskIDArgument(req *mcp.CallToolRequest, contained bool) error {
	raw := req.Params.Arguments
	if !bytes.Contains(raw, taskIDKey) {
		return nil // the common case: no need to decode
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil // not an object: the tool's own validation says so
	}
	v, ok := args[mcptask.ArgTaskID]
	if !ok {
		return nil
	}
	var id string
	if err := json.Unmarshal(v, &id); err != nil || id == "" {
		return mcptask.InvalidParams("argument %s must be a non-empty string: the id of the workflow task this call performs a step of", mcptask.ArgTaskID)
	}
	meta := req.Params.GetMeta()
	if prev, ok := meta[mcptask.MetaTaskID]; ok && prev != id {
		if contained {
			return nil
		}
		return mcptask.InvalidParams("argument %s (%q) and _meta.%s (%v) name different tasks", mcptask.ArgTaskID, id, mcptask.MetaTaskID, prev)
	}
	delete(args, mcptask.ArgTaskID)
	b, err := json.Marshal(args)
	if err != nil {
		return mcptask.InternalError("re-encoding arguments: %v", err)
	}
	req.Params.Arguments = b
	if meta == nil {
		meta = mcp.Meta{}
	}
	meta[mcptask.MetaTaskID] = id
	req.Params.SetMeta(meta)
	return nil
}

// withTaskIDArgument returns a tool's input schema (JSON) with the
// _task_id property added.
func withTaskIDArgument(schema json.RawMessage) json.RawMessage {
	var s map[string]json.RawMessage
	if err := json.Unmarshal(schema, &s); err != nil || s == nil {
		return schema
	}
	props := map[string]json.RawMessage{}
	if p, ok := s["properties"]; ok {
		_ = json.Unmarshal(p, &props)
	}
	if _, exists := props[mcptask.ArgTaskID]; exists {
		return schema
	}
	props[mcptask.ArgTaskID], _ = json.Marshal(map[string]string{"type": "string", "description": taskIDArgumentDescription})
	s["properties"], _ = json.Marshal(props)
	if _, ok := s["type"]; !ok {
		s["type"] = json.RawMessage(`"object"`)
	}
	out, err := json.Marshal(s)
	if err != nil {
		return schema
	}
	return out
}
