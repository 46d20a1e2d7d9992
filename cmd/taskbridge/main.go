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
                                 parse as JSON are used as JSON). Flags:
                                   -ttl 10m       ttl to ask for (core dialect only; the
                                                  extension lets the server choose)
                                   -plain         allow a plain call when a task is impossible
                                   -detach        print the task id and return at once
                                   -task-id ID    perform one step of workflow task ID
                                                  (sends _meta._task_id) and print where
                                                  the workflow stands afterwards
  tasks list                     the tasks the server lists (core dialect: the tasks this
                                 session created, or all yours on a server that
                                 authenticates you; the extension has no tasks/list)
  tasks get ID                   one task's status
  tasks result ID                wait for a task's result and print it
  tasks cancel ID                cancel a task
  prompt NAME [key=value ...]    get a prompt; for a task-aware workflow, show its
                                 handoff readably. Flags:
                                   -follow        perform the remaining client steps, asking
                                                  you for every placeholder value (checked
                                                  against the tool's input schema) and for
                                                  corrected arguments of a step the server
                                                  handed to you, then wait for the workflow
                                   -resume ID     continue workflow task ID instead of
                                                  starting a new one (no key=value needed)
  ui URL | ui -- COMMAND ARGS   the terminal UI: Tools, Prompts and Tasks tabs, forms
                                 from input schemas, workflows step by step, a live task
                                 table with cancel and input requests ("?" lists the keys).
                                 Flag: -dialect (as above). -timeout bounds connecting only.
  store check FILE               check a bbolt store file offline (no -url needed): bbolt's
                                 page check, then the store's own invariants (indexes,
                                 counters, records). Exit 1 when the file is corrupt; the
                                 file must not be open in a running server.
  help                           this text

Elicitations a task makes are asked on the terminal (field by field).

Exit status:
  0  the command did what was asked
  1  what was asked failed: the server answered with an error, a tool returned
     isError, a task ended failed or cancelled, a workflow step failed (or was
     handed to you) or the workflow ended failed or cancelled
  2  usage error: unknown command or flag, missing or malformed arguments
  3  cannot reach the server: connection refused, unknown host, HTTP error,
     the stdio command could not start or exited, the connection was lost

Examples:
  taskbridge -url http://127.0.0.1:8080/mcp tools
  taskbridge -url http://127.0.0.1:8080/mcp call generate_report topic=sales seconds=3
  taskbridge -url http://127.0.0.1:8080/mcp -json call generate_report '{"topic": "q3", "seconds": 2}'
  taskbridge -url http://127.0.0.1:8080/mcp -dialect core tasks list
  taskbridge -url http://127.0.0.1:8080/mcp tasks cancel 3f1c9e0b2d7a4c18a5e6f7b8c9d0e1f2
  taskbridge -url http://127.0.0.1:8080/mcp prompt release_notes repo=taskbridge
  taskbridge -url http://127.0.0.1:8080/mcp call review_notes -task-id 3f1c9e0b2d7a4c18a5e6f7b8c9d0e1f2 \
      draft="..." feedback=ok approved=true
  taskbridge -url http://127.0.0.1:8080/mcp prompt release_notes -resume 3f1c9e0b2d7a4c18a5e6f7b8c9d0e1f2 -follow
  taskbridge -stdio "go run ./examples/62_tasks_workflow serve -stdio -db demo.db" \
      prompt release_notes repo=taskbridge -follow
  taskbridge ui http://127.0.0.1:8080/mcp
  taskbridge ui -- go run ./examples/62_tasks_workflow serve -stdio -db demo.db
  taskbridge store check taskbridge-62.db
`

// Exit statuses (see the usage text).
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitUnreachable = 3
)

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
			return exitOK
		}
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(rest) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch rest[0] {
	case "ui":
		return runUI(ctx, g, rest[1:], stdin, stdout, stderr)
	case "store":
		return runStore(g, rest[1:], stdout, stderr)
	}
	out := newPrinter(stdout, g.json)
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	in := newAsker(stdin, stderr)
	tgt, dialect, err := g.resolve()
	if err != nil {
		return report(out, stderr, err)
	}
	c, err := dial(ctx, tgt, dialect, in.answer, stderr)
	if err != nil {
		return report(out, stderr, err)
	}
	defer c.Close()
	cmd := &command{c: c, target: tgt, out: out, in: in, stderr: stderr}
	return report(out, stderr, cmd.dispatch(ctx, rest))
}

// report prints err the way its kind asks for and returns the exit
// status: usage errors and unreachable servers on stderr, failures the
// output has already shown (failedError) as a last line on stderr, and
// every other error through the printer (a JSON line with -json).
func report(out *printer, stderr io.Writer, err error) int {
	var ue usageError
	var un *unreachableError
	var fe failedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "taskbridge: %v\nRun 'taskbridge help' for usage.\n", err)
		return exitUsage
	case errors.As(err, &un):
		if out.json {
			_ = out.line(map[string]any{"event": "error", "error": un.Error(), "unreachable": true})
		}
		fmt.Fprintln(stderr, "taskbridge:", un)
		return exitUnreachable
	case errors.As(err, &fe):
		if out.json {
			_ = out.line(map[string]any{"event": "failed", "error": fe.Error()})
		} else {
			fmt.Fprintln(stderr, "taskbridge:", fe)
		}
		return exitFailed
	}
	out.err(err)
	return exitFailed
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// failedError is a failure the output has already shown (a tool result
// with isError, a task that ended failed, a workflow that stopped): exit
// status 1, with msg as a last line on stderr.
type failedError struct{ msg string }

func (e failedError) Error() string { return e.msg }

func failedf(format string, args ...any) error { return failedError{fmt.Sprintf(format, args...)} }
