package client

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// Prompts lists every prompt of the server (prompts/list, all pages), with
// its description and declared arguments. Task-aware workflow prompts are
// ordinary prompts here; GetPrompt tells them apart by their handoff.
func (c *Client) Prompts(ctx context.Context) ([]*mcp.Prompt, error) {
	var out []*mcp.Prompt
	err := c.listPages(ctx, mcptask.MethodPromptsList, func(raw json.RawMessage) (string, error) {
		var page struct {
			Prompts    []*mcp.Prompt `json:"prompts"`
			NextCursor string        `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return "", malformed("prompts/list: %v", err)
		}
		for _, p := range page.Prompts {
			if p == nil || p.Name == "" {
				return "", malformed("prompts/list: a prompt has no name")
			}
			out = append(out, p)
		}
		return page.NextCursor, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
