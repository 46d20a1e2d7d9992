// Package client is a Go client for MCP servers that run tool calls as
// tasks, in either wire dialect of MCP tasks: the 2025-11-25 core tasks
// (SEP-1686: params.task, tasks/get, tasks/result, tasks/list,
// tasks/cancel) and the 2026-07-28 tasks extension
// io.modelcontextprotocol/tasks (SEP-2663: server-decided tasks,
// tasks/get, tasks/update, tasks/cancel). It works with any MCP server,
// not only taskbridge's.
//
// The go-sdk client cannot make task-augmented calls (it cannot send
// params.task, and it decodes a task reply into an empty CallToolResult),
// so this package speaks JSON-RPC itself over any mcp.Transport.
//
// Dial negotiates the dialect (server/discover first, then initialize;
// see Dialect), after which CallTool runs a tool as a task and returns its
// life as an iterator of events:
//
//	c, err := client.Dial(ctx, client.HTTPTransport("http://127.0.0.1:8080/mcp", nil), &client.Options{
//		InputHandler: answerElicitations,
//	})
//	if err != nil { ... }
//	defer c.Close()
//	for ev, err := range c.CallTool(ctx, "slow_compute", map[string]any{"seconds": 2}, nil) {
//		if err != nil { ... } // an *RPCError, ErrCancelled, ErrCapability, ctx.Err()
//		switch ev.Kind {
//		case client.EventCreated, client.EventStatus:
//			fmt.Println(ev.Task.ID, ev.Task.Status)
//		case client.EventResult:
//			fmt.Println(ev.Result.Content)
//		}
//	}
//
// GetTask, TaskResult, ListTasks and CancelTask manage tasks directly; the
// client also keeps a local record of the tasks it started (Tracked).
// StreamEvents reads a task's event log as it is written (tasks/stream:
// its progress, log lines, step attempts, statuses), resuming after a
// sequence number; CallOptions.OnEvent and FollowOptions.OnEvent show
// those of a call or a workflow while it runs. For
// taskbridge's task-aware workflow prompts, GetPrompt returns the handoff
// document and Follow performs the remaining client steps and returns the
// workflow's result. A Receiver answers the server's sampling and
// elicitation requests (a workflow's sampling steps and questions): as
// tasks of the client's own when the server task-augments them (core
// dialect), plainly, or as a task's input requests (extension dialect);
// with a ReceiverStore (OpenReceiverStore) it keeps what it computed
// across restarts of the client. Over HTTP, HTTPTransport opens the
// stream on which the server sends them.
//
// Errors are classified with sentinels (ErrNotFound, ErrTerminal,
// ErrCapability, ErrCancelled) that errors.Is recognises, while the
// server's own JSON-RPC error stays available as an *RPCError.
package client
