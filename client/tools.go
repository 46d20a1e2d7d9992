package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// Tool is a tool from tools/list with its task support. Its InputSchema
// and OutputSchema are the JSON the server sent (json.RawMessage), so that
// their properties keep the server's order (a form asks in it).
type Tool struct {
	*mcp.Tool
	// TaskSupport is the tool's execution.taskSupport; mcptask.TaskForbidden when
	// absent.
	TaskSupport mcptask.TaskSupport
	// declared reports whether the server stated the support level.
	declared bool
}

// Tools lists every tool of the server (all pages) with its task support,
// and refreshes the cache CallTool uses to check task support.
func (c *Client) Tools(ctx context.Context) ([]Tool, error) {
	var out []Tool
	err := c.listPages(ctx, mcptask.MethodToolsList, func(raw json.RawMessage) (string, error) {
		var page struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return "", malformed("tools/list: %v", err)
		}
		for _, rt := range page.Tools {
			t, err := decodeTool(rt)
			if err != nil {
				return "", err
			}
			out = append(out, t)
		}
		return page.NextCursor, nil
	})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.tools = make(map[string]Tool, len(out))
	for _, t := range out {
		c.tools[t.Name] = t
	}
	c.mu.Unlock()
	return out, nil
}

func decodeTool(raw json.RawMessage) (Tool, error) {
	var t mcp.Tool
	if err := json.Unmarshal(raw, &t); err != nil {
		return Tool{}, malformed("tools/list: tool: %v", err)
	}
	var schemas struct {
		In  json.RawMessage `json:"inputSchema"`
		Out json.RawMessage `json:"outputSchema"`
	}
	if json.Unmarshal(raw, &schemas) == nil {
		if len(schemas.In) > 0 {
			t.InputSchema = schemas.In
		}
		if len(schemas.Out) > 0 {
			t.OutputSchema = schemas.Out
		}
	}
	if t.Name == "" {
		return Tool{}, malformed("tools/list: a tool has no name")
	}
	var ex struct {
		Execution *struct {
			TaskSupport string `json:"taskSupport"`
		} `json:"execution"`
	}
	_ = json.Unmarshal(raw, &ex)
	out := Tool{Tool: &t, TaskSupport: mcptask.TaskForbidden}
	if ex.Execution != nil && ex.Execution.TaskSupport != "" {
		out.declared = true
		switch s := mcptask.TaskSupport(ex.Execution.TaskSupport); s {
		case mcptask.TaskForbidden, mcptask.TaskOptional, mcptask.TaskRequired:
			out.TaskSupport = s
		default:
			return Tool{}, malformed("tools/list: tool %q: unknown taskSupport %q", t.Name, s)
		}
	}
	return out, nil
}

// tool returns a tool from the cache, listing the tools once if it is
// missing.
func (c *Client) tool(ctx context.Context, name string) (Tool, error) {
	c.mu.Lock()
	t, ok := c.tools[name]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	if _, err := c.Tools(ctx); err != nil {
		return Tool{}, err
	}
	c.mu.Lock()
	t, ok = c.tools[name]
	c.mu.Unlock()
	if !ok {
		return Tool{}, fmt.Errorf("%w: %q is not in the server's tools/list", ErrUnknownTool, name)
	}
	return t, nil
}

// ---- server-to-client traffic ----

// listPages sends method (tools/list, prompts/list) for every page, up to
// 1000 of them: page decodes one result and returns its nextCursor. It
// stops at an empty or repeated cursor.
func (c *Client) listPages(ctx context.Context, method string, page func(json.RawMessage) (string, error)) error {
	cursor := ""
	for range 1000 {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := c.call(ctx, method, params)
		if err != nil {
			return err
		}
		next, err := page(raw)
		if err != nil {
			return err
		}
		if next == "" || next == cursor {
			return nil
		}
		cursor = next
	}
	return nil
}
