// Command taskbridge inspects any MCP server that runs tools as tasks, in
// either wire dialect: list tools with their task support, call a tool as a
// task and watch it live, manage tasks, and get a workflow prompt, show its
// handoff and follow it. Run `taskbridge help` for every command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

const usage = `taskbridge inspects MCP servers that run tools as tasks (core tasks 2025-11-25
and the io.modelcontextprotocol/tasks extension 2026-07-28).

Usage:
  taskbridge [flags] <command> [arguments]

Connect with one of:
  -url URL             a Streamable HTTP server, e.g. http://127.0.0.1:8080/mcp
  -stdio "CMD ARGS"    launch a stdio server and talk to it over stdin/stdout

Flags:
  -dialect auto|core|extension   wire dialect (default auto: server/discover, then initialize)
  -json                          machine-readable output: one JSON object per line
  -timeout DURATION              give up after this long (default 5m)

Commands:
  info                           server name, dialect, task capabilities
  tools                          tools with their task support (forbidden/optional/required)
  call TOOL [ARGS]               call TOOL as a task and watch it: a status line with a
                                 spinner and the elapsed time, then the result.
                                 ARGS is a JSON object or key=value pairs (values that
                                 parse as JSON are used as JSON). Flags: -ttl 10m,
                                 -plain (allow a plain call when a task is impossible),
                                 -detach (print the task id and return at once)
  tasks list                     every task the server lists for you (core dialect)
  tasks get ID                   one task's status
  tasks result ID                wait for a task's result and print it
  tasks cancel ID                cancel a task
  prompt NAME [key=value ...]    get a prompt; for a task-aware workflow, show its
                                 handoff readably. Flag: -follow performs the remaining
                                 client steps, asking you for every placeholder value,
                                 then waits for the workflow to complete
  help                           this text

Elicitations a task makes are asked on the terminal (field by field).

Examples:
  taskbridge -url http://127.0.0.1:8080/mcp tools
  taskbridge -url http://127.0.0.1:8080/mcp call generate_report topic=sales seconds=3
  taskbridge -url http://127.0.0.1:8080/mcp -json call slow_compute '{"seconds": 2}'
  taskbridge -url http://127.0.0.1:8080/mcp tasks list
  taskbridge -url http://127.0.0.1:8080/mcp tasks cancel 3f1c9e0b2d7a4c18a5e6f7b8c9d0e1f2
  taskbridge -stdio "go run ./examples/62_tasks_workflow serve -stdio -db demo.db" \
      prompt release_notes repo=taskbridge -follow
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("taskbridge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	var g globals
	fs.StringVar(&g.url, "url", "", "Streamable HTTP endpoint")
	fs.StringVar(&g.stdio, "stdio", "", "command line of a stdio server to launch")
	fs.StringVar(&g.dialect, "dialect", "auto", "auto, core or extension")
	fs.BoolVar(&g.json, "json", false, "JSON lines output")
	fs.DurationVar(&g.timeout, "timeout", 5*time.Minute, "overall timeout")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(rest) == 0 {
			return 2
		}
		return 0
	}
	out := newPrinter(stdout, g.json)
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	in := newAsker(stdin, stderr)
	c, err := connect(ctx, g, in, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "taskbridge:", err)
		return 1
	}
	defer c.Close()
	cmd := &command{c: c, out: out, in: in, stderr: stderr}
	if err := cmd.dispatch(ctx, rest); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "taskbridge: %v\nRun 'taskbridge help' for usage.\n", err)
			return 2
		}
		out.err(err)
		return 1
	}
	return 0
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }
