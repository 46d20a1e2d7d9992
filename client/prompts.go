package client

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// methodPromptsList is the MCP request that lists prompts.
const methodPromptsList = "prompts/list"

// Prompts lists every prompt of the server (prompts/list, all pages), with
// its description and declared arguments. Task-aware workflow prompts are
// ordinary prompts here; GetPrompt tells them apart by their handoff.
func (c *Client) Prompts(ctx context.Context) ([]*mcp.Prompt, error) {
	var out []*mcp.Prompt
	cursor := ""
	for range 1000 {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := c.call(ctx, methodPromptsList, params)
		if err != nil {
			return nil, err
		}
		var page struct {
			Prompts    []*mcp.Prompt `json:"prompts"`
			NextCursor string        `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, malformed("prompts/list: %v", err)
		}
		for _, p := range page.Prompts {
			if p == nil || p.Name == "" {
				return nil, malformed("prompts/list: a prompt has no name")
			}
			out = append(out, p)
		}
		if page.NextCursor == "" || page.NextCursor == cursor {
			break
		}
		cursor = page.NextCursor
	}
	return out, nil
}
