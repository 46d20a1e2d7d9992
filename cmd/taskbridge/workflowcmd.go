package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// defaultForkTool is the fork tool a taskbridge server registers beside
// its task tools (workflow.DefaultForkToolName; the CLI does not import
// the server's packages).
const defaultForkTool = "workflow_fork"

// parseWorkflow checks `workflow fork ID [-from STEP] [-tool NAME]
// [-follow] [key=value ...]`.
func parseWorkflow(args []string) (*plan, error) {
	if len(args) == 0 || args[0] != "fork" {
		return nil, usagef("workflow needs a subcommand: fork")
	}
	fs := flag.NewFlagSet("workflow fork", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "the step to run again from (default: the first that did not complete)")
	tool := fs.String("tool", defaultForkTool, "the server's fork tool")
	follow := fs.Bool("follow", false, "perform the new task's client steps and wait for it")
	pos, err := parseFlags(fs, "workflow fork", args[1:])
	if err != nil {
		return nil, err
	}
	if len(pos) < 1 {
		return nil, usagef("workflow fork needs the id of the workflow task to fork")
	}
	pargs, err := promptArgs("workflow fork", pos[1:])
	if err != nil {
		return nil, err
	}
	return &plan{run: func(ctx context.Context, cmd *command) error {
		return cmd.fork(ctx, *tool, pos[0], *from, pargs, *follow)
	}}, nil
}

// fork runs workflow task id again from step from as a new task, through
// the server's fork tool, and shows the new task's handoff.
func (cmd *command) fork(ctx context.Context, tool, id, from string, pargs map[string]string, follow bool) error {
	args := map[string]any{"task_id": id}
	if from != "" {
		args["from"] = from
	}
	if len(pargs) > 0 {
		args["arguments"] = pargs
	}
	res, err := cmd.c.CallToolAndWait(ctx, tool, args, &client.CallOptions{AllowPlain: true})
	var rpc *client.RPCError
	switch {
	case errors.As(err, &rpc) && rpc.Code == mcptask.CodeInvalidParams && strings.Contains(rpc.Message, tool):
		return fmt.Errorf("the server has no tool %q to fork workflow tasks with (a taskbridge server registers %s beside its task tools): %w", tool, defaultForkTool, err)
	case err != nil:
		return err
	case res.IsError:
		return failedf("fork of %s refused: %s", id, toolText(res))
	}
	doc, err := handoff.FromToolResult(res)
	if err != nil {
		return fmt.Errorf("the fork tool answered without a handoff: %w", err)
	}
	return cmd.showHandoff(ctx, doc, follow)
}

// toolText is a tool result's text content, joined.
func toolText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, " ")
}
