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

// TaskIDArgumentDescription is how the _task_id argument is described in
// the input schema of the tools that take it.
const TaskIDArgumentDescription = "Only when performing a step of a workflow task: the task's id (from the handoff). Leave it out otherwise."

// AcceptTaskIDArgument makes tool name take the argument _task_id (see
// above); the workflow bridge calls it for every tool a client may be asked
// to call for a workflow step.
func (r *Router) AcceptTaskIDArgument(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taskIDTools == nil {
		r.taskIDTools = map[string]bool{}
	}
	r.taskIDTools[name] = true
}

// takesTaskID reports whether tool name takes the argument _task_id.
func (r *Router) takesTaskID(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.taskIDTools[name]
}

// taskIDTools returns the tools of list that take the argument _task_id.
func (r *Router) taskIDToolsOf(tools []*mcp.Tool) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out map[string]bool
	for _, t := range tools {
		if r.taskIDTools[t.Name] {
			if out == nil {
				out = map[string]bool{}
			}
			out[t.Name] = true
		}
	}
	return out
}

var taskIDKey = []byte(`"` + mcptask.ArgTaskID + `"`)

// moveTaskIDArgument moves the argument _task_id of a tools/call into
// _meta._task_id. A value that is not a non-empty string, or one that
// names another task than _meta._task_id, is refused with -32602.
func moveTaskIDArgument(req *mcp.CallToolRequest) error {
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
	props[mcptask.ArgTaskID], _ = json.Marshal(map[string]string{"type": "string", "description": TaskIDArgumentDescription})
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
