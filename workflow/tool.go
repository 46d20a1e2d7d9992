package workflow

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Workflows as tools. In an LLM host only the user picks prompts; the
// model picks tools. A definition with Tool set is also a tool of the
// workflow's name whose arguments are the prompt arguments (and _task_id,
// to resume a task), and whose result is the handoff: a model can start a
// workflow, and follow it, on its own.

// workflowTool is the tool that serves w.
func workflowTool(w *Definition) *mcp.Tool {
	props := map[string]any{}
	var required []string
	for _, a := range w.argumentsOf() {
		props[a.Name] = a.propertySchema()
		if a.Required {
			required = append(required, a.Name)
		}
	}
	props[mcptask.ArgTaskID] = map[string]any{"type": "string",
		"description": "Only to see where an earlier run of this workflow stands, or to have the server retry its failed steps: that run's task id. Leave it out to start a new run."}
	schema := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		schema["required"] = required
	}
	desc := w.Description
	if desc != "" {
		desc += ". "
	}
	desc += "Starts the workflow as a task and returns its handoff: what the server did and which tools you call next (with the task id as argument _task_id)."
	return &mcp.Tool{Name: w.Name, Description: desc, InputSchema: schema}
}

// toolHandler serves the workflow tool of workflow name.
func (b *Bridge) toolHandler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, err := toolArguments(req.Params.Arguments)
		if err != nil {
			return nil, err
		}
		h := b.prompt(name)
		if h == nil {
			return nil, mcptask.InvalidParams("workflow %q is not registered", name)
		}
		q := b.engine.Resolve(ctx, req)
		id, named, err := taskIDOf(req.Params.GetMeta(), args)
		if err != nil {
			return nil, err
		}
		var t *store.Task
		var p *Progress
		if named {
			t, p, err = h.resume(ctx, q, id)
		} else {
			t, p, err = h.start(ctx, q, args)
		}
		var ae *argError
		if errors.As(err, &ae) {
			// An argument the model can fix: a tool error it reads.
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: ae.Error() + "; nothing was started: call the tool again with corrected arguments."}}}, nil
		}
		if err != nil {
			return nil, err
		}
		answer := func(t *store.Task, p *Progress) (*mcp.CallToolResult, error) {
			return b.toolResult(t, p, readerOf(q), "")
		}
		if _, inTask := taskrouter.TaskID(ctx); inTask && !forModel(t, p) {
			// The call runs as a task (the client takes tasks): it is a
			// leg, which ends when the workflow has something for the
			// model, asking for a person's decisions on the way.
			res, err := b.leg(ctx, t.ID, answer)
			if err != nil {
				return nil, err
			}
			return res.(*mcp.CallToolResult), nil
		}
		return answer(t, p)
	}
}

// preflight checks a workflow tool call's arguments before the router
// makes the call a task: a bad argument is refused (-32602, naming it)
// with no task of any kind created.
func (b *Bridge) preflight(name string) func(ctx context.Context, req *mcp.CallToolRequest) (mcp.InputRequestMap, error) {
	return func(ctx context.Context, req *mcp.CallToolRequest) (mcp.InputRequestMap, error) {
		args, err := toolArguments(req.Params.Arguments)
		if err != nil {
			return nil, err
		}
		if _, named, err := taskIDOf(req.Params.GetMeta(), args); err != nil || named {
			return nil, err // a resume: the task is checked when it is read
		}
		if wf := b.newest(name); wf != nil {
			if _, err := wf.def.promptArgs(args); err != nil {
				return nil, mcptask.InvalidParams("workflow %q: %v; nothing was started", name, err)
			}
		}
		return nil, nil
	}
}

// toolArguments reads a workflow tool's arguments as prompt arguments:
// strings as they are, other JSON values as their JSON text.
func toolArguments(raw json.RawMessage) (map[string]string, error) {
	out := map[string]string{}
	if len(raw) == 0 {
		return out, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, mcptask.InvalidParams("the arguments must be an object: %v", err)
	}
	for k, v := range m {
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			out[k] = s
			continue
		}
		out[k] = string(compact(v))
	}
	return out, nil
}

// toolResult is the handoff of task t as a tool result: a line saying
// where the workflow stands, then the handoff's prose and JSON (what a
// model reads), the document as structured content and in _meta. A
// workflow that ended failed or cancelled is an error result (isError,
// no structured content): every reply about a workflow's end says how
// it ended (docs/INTEROP.md, "How a workflow's end reads").
func (b *Bridge) toolResult(t *store.Task, p *Progress, rd reader, lead string) (*mcp.CallToolResult, error) {
	doc := b.handoff(t, p, rd.d)
	text, err := renderTool(doc, rd)
	if err != nil {
		return nil, mcptask.InternalError("rendering handoff: %v", err)
	}
	if lead != "" {
		text = lead + "\n\n" + text
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, Meta: b.resultMeta(t, doc.Meta())}
	if endedBadly(t) {
		res.IsError = true
	} else {
		res.StructuredContent = doc
	}
	return res, nil
}

// endedBadly reports whether workflow task t ended failed or cancelled:
// every reply that reports its end is then an error result.
func endedBadly(t *store.Task) bool {
	return t.Status == mcptask.StatusFailed || t.Status == mcptask.StatusCancelled
}

// Report is the workflow's answer to the built-in task_result tool while
// the task is active: its handoff, and whether it waits for the client.
func (b *Bridge) report(ctx context.Context, t *store.Task) (*mcp.CallToolResult, bool) {
	p, err := decodeProgress(t)
	if err != nil {
		return nil, false
	}
	rd := reader{d: mcptask.Core}
	if q := taskrouter.RequestFrom(ctx); q != nil {
		rd = readerOf(q)
	}
	res, err := b.toolResult(t, p, rd, "")
	if err != nil {
		return nil, false
	}
	return res, waiting(p)
}

// prompt returns the prompt handler of workflow name.
func (b *Bridge) prompt(name string) *TaskPromptHandler {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v := b.workflows[name]; v != nil {
		return v.prompt
	}
	return nil
}

// isWorkflowTool reports whether tool is a workflow served as a tool.
func (b *Bridge) isWorkflowTool(tool string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.workflows[tool]
	return v != nil && v.tool
}
