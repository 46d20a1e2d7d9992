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

	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
)

const usage = `taskbridge inspects MCP servers that run tools as tasks (core tasks 2025-11-25
and the io.modelcontextprotocol/tasks extension 2026-07-28).

Usage:
  taskbridge [flags] <command> [arguments]

Connect with one of:
  -url URL             a Streamable HTTP server, e.g. http://127.0.0.1:8080/mcp
  -stdio "CMD ARGS"    launch a stdio server and talk to it over stdin/stdout

Flags:
  -token TOKEN                   bearer token for an HTTP server that requires one
                                 (default $TASKBRIDGE_TOKEN)
  -header K=V                    an HTTP header to send with every request (repeatable)
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
                                                  (HTTP only: a stdio server stops with
                                                  the command); for a workflow's tool,
                                                  the workflow task's id
                                   -follow        print the task's progress, log lines and
                                                  output as they happen, one line each on
                                                  stderr starting with "  | " (with -json:
                                                  {"event": "task_event", ...} lines on
                                                  stdout), all before the result
                                   -task-id ID    perform one step of workflow task ID
                                                  (sends _meta._task_id): the arguments
                                                  its handoff resolved are filled in, the
                                                  ones you give override them, and the
                                                  placeholders left are asked; then print
                                                  where the workflow stands. A person's
                                                  decision (an event, a question) is
                                                  call workflow_event -task-id ID
                                                  approved=true reason=... (the payload's
                                                  fields as key=value; event=NAME picks
                                                  one of several)
                                   -workflow NAME the workflow of -task-id, when neither the
                                                  task history nor the server's task_result
                                                  tool can tell it
                                 A workflow's tool shows the workflow's handoff, as prompt
                                 does (-follow then performs your steps, as prompt -follow).
  tasks list                     the tasks of this server in the task history (every task
                                 taskbridge created or opened here), each with its status
                                 now, plus what the server's tasks/list shows (core dialect)
  tasks get ID                   one task's status
  tasks result ID                wait for a task's result and print it
  tasks cancel ID                cancel a task
  tasks pause ID                 pause a workflow task: no step starts until it is resumed
                                 (its status stays working and says paused, and by whom).
                                 Flags: -reason TEXT, -cut (stop the steps running now too;
                                 they run again on resume)
  tasks resume ID                resume a paused workflow task
  tasks forget ID... | -all      drop tasks from the task history (-all: every task of the
                                 server -url or -stdio names); the tasks are untouched
  webhook add URL                register a push webhook (taskbridge servers): the server
                                 POSTs a signed delivery when one of your tasks ends,
                                 needs input or pauses for you; prints the signing secret
                                 (once). Flags:
                                   -events LIST   terminal,input_required,paused,step
                                   -task ID       watch this task only
                                   -owner OWNER   (administrators) OWNER's tasks, * for all
                                   -secret S      a whsec_ secret of yours
  webhook list [-task ID]        your webhooks, with their failed deliveries
  webhook rm ID                  delete a webhook
  webhook deliveries ID          a webhook's deliveries, newest first: status, attempts,
                                 the last error
  prompt NAME [key=value ...]    get a prompt; for a task-aware workflow, show its
                                 handoff readably. Flags:
                                   -follow        perform the remaining client steps, asking
                                                  you for every placeholder value (checked
                                                  against the tool's input schema) and for
                                                  corrected arguments of a step the server
                                                  handed to you, then wait for the workflow;
                                                  meanwhile print its steps' attempts and
                                                  their tools' progress and log lines as
                                                  they happen (as call -follow does)
                                   -resume ID     continue workflow task ID instead of
                                                  starting a new one (no key=value needed)
  workflow fork ID [key=value ...]
                                 run workflow task ID again as a new task, from a step:
                                 the steps before it keep their recorded outputs; key=value
                                 pairs change prompt arguments. Show the new task's handoff.
                                 Flags:
                                   -from STEP     the step (or group) to run again from
                                                  (default: the first that did not complete)
                                   -follow        then perform its client steps, as prompt
                                                  -follow does
                                   -tool NAME     the server's fork tool (default workflow_fork)
  schedules list                 the server's schedules you may manage: expression, time
                                 zone, overlap policy, paused or next firing, latest
                                 fires, history
  schedules pause NAME           pause a schedule (-reason TEXT); its times fire nothing
  schedules resume NAME          resume it from its next time
  schedules trigger NAME         fire it now, once (also while paused); prints the task id
  ui URL | ui -- COMMAND ARGS   the terminal UI: Tools, Prompts and Tasks tabs, forms
                                 from input schemas, workflows step by step, a live task
                                 table (starting with the task history) with cancel and
                                 input requests ("?" lists the keys). Flags: -dialect,
                                 -token, -header (as above). -timeout bounds connecting only.
  store check FILE               check a bbolt store file offline (no -url needed): bbolt's
                                 page check, then the store's own invariants (indexes,
                                 counters, records). Exit 1 when the file is corrupt; the
                                 file must not be open in a running server.
  help                           this text

Elicitations a task makes are asked on the terminal (field by field).

Task history: the ids of the tasks taskbridge creates or opens, with the server, the
tool or workflow and the creation time, are kept in $XDG_STATE_HOME/taskbridge/history
(default ~/.local/state/taskbridge/history; at most 1000, the least recently used go
first). TASKBRIDGE_HISTORY=FILE keeps them elsewhere; TASKBRIDGE_HISTORY=off keeps none.

Exit status: (one mapping from how a task or workflow ended; docs/INTEROP.md)
  0    the command did what was asked: a task ended completed; a workflow
       completed, or stands where it waits for you or works on (a handoff)
  1    what was asked failed: the server answered with an error; a tool
       returned isError; a task ended failed or cancelled (in the extension
       dialect a failed tool reads completed with isError: 1 as well); a
       workflow ended failed or cancelled, or a step of it failed and is
       handed to you
  2    usage error: unknown command or flag, missing or malformed arguments
  3    cannot reach the server: connection refused, unknown host, HTTP error,
       the stdio command could not start or exited, the connection was lost; or the
       server refused the credentials (HTTP 401 or 403: see -token)
  124  -timeout ran out while waiting (the task goes on: the message says how to
       wait for it or cancel it)
  130  interrupted (Ctrl-C) while waiting (likewise)

Examples:
  taskbridge -url http://127.0.0.1:8080/mcp tools
  taskbridge -url http://127.0.0.1:8080/mcp -token alice-token tools
  taskbridge -url http://127.0.0.1:8080/mcp call generate_report topic=sales seconds=3
  taskbridge -url http://127.0.0.1:8080/mcp -json call generate_report '{"topic": "q3", "seconds": 2}'
  taskbridge -url http://127.0.0.1:8080/mcp call generate_report topic=q4 seconds=4 -follow
  taskbridge -url http://127.0.0.1:8080/mcp call -detach generate_report topic=q4 seconds=60
  taskbridge -url http://127.0.0.1:8080/mcp tasks list
  taskbridge -url http://127.0.0.1:8080/mcp tasks cancel 3f1c9e0b2d7a4c18a5e6f7b8c9d0e1f2
  taskbridge -url http://127.0.0.1:8080/mcp webhook add https://hooks.example.com/taskbridge
  taskbridge -url http://127.0.0.1:8080/mcp prompt release_notes repo=taskbridge
  taskbridge -url http://127.0.0.1:8080/mcp call review_notes -task-id 3f1c9e0b2d7a4c18a5e6f7b8c9d0e1f2 \
      feedback=ok approved=true
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
	exitTimeout     = 124 // -timeout ran out (as timeout(1) reports it)
	exitInterrupted = 130 // Ctrl-C (128 + SIGINT, as shells report it)
)

// errInterrupted and errTimedOut are the causes of the command's context
// ending: Ctrl-C, or -timeout.
var (
	errInterrupted = errors.New("interrupted")
	errTimedOut    = errors.New("timed out")
)

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() {
		<-sig
		signal.Stop(sig) // a second Ctrl-C stops the CLI at once
		cancel(errInterrupted)
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("taskbridge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var g globals
	g.register(fs)
	if err := fs.Parse(args); err != nil {
		return report(newPrinter(stdout, false), stderr, flagError(err))
	}
	g.noteExplicit(fs)
	rest := fs.Args()
	switch {
	case len(rest) == 0:
		fmt.Fprint(stderr, usage)
		return exitUsage
	case rest[0] == "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case rest[0] == "ui":
		return runUI(ctx, g, rest[1:], stdin, stdout, stderr)
	case rest[0] == "store":
		return runStore(g, rest[1:], stdout, stderr)
	}
	out := newPrinter(stdout, g.json)
	// The command line is checked before anything connects: a mistake in
	// it is a usage error even when the server is down.
	p, err := parseCommand(rest)
	if err != nil {
		return report(out, stderr, err)
	}
	hist := history.Default()
	if p.local != nil {
		tgt, _, err := g.resolve()
		if err != nil && g.url == "" && g.stdio == "" {
			err = nil // a local command may name no server
		}
		if err != nil {
			return report(out, stderr, err)
		}
		return report(out, stderr, p.local(&local{out: out, hist: hist, target: tgt}))
	}
	tgt, dialect, err := g.resolve()
	if err == nil && p.check != nil {
		err = p.check(tgt)
	}
	if err != nil {
		return report(out, stderr, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, g.timeout, errTimedOut)
	defer cancel()
	stderr = &lockedWriter{w: stderr} // questions, warnings and -follow's lines come from several goroutines
	in := newAsker(ctx, stdin, stderr)
	c, err := dial(ctx, tgt, dialect, in.answer, stderr)
	if err != nil {
		return report(out, stderr, err)
	}
	defer c.Close()
	cmd := &command{c: c, out: out, in: in, stderr: stderr, hist: hist}
	return report(out, stderr, cmd.interrupted(ctx, p.run(ctx, cmd)))
}

// flagError is the usage error of a flag set's Parse error; -h and -help
// ask for the usage text.
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return errHelp
	}
	return usagef("%v", err)
}

// errHelp asks for the usage text on stdout (-h, -help), exit status 0.
var errHelp = errors.New("help requested")

// report prints err the way its kind asks for and returns the exit
// status: usage errors, unreachable servers, refused credentials and
// interruptions on stderr, failures the output has already shown
// (failedError) as a last line on stderr, and every other error through
// the printer (a JSON line with -json).
func report(out *printer, stderr io.Writer, err error) int {
	var ue usageError
	var un *unreachableError
	var ae *authError
	var ie *interruptedError
	var fe failedError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		fmt.Fprint(out.w, usage)
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
	case errors.As(err, &ae):
		if out.json {
			_ = out.line(map[string]any{"event": "error", "error": ae.Error(), "unauthorized": true, "httpStatus": ae.status})
		}
		fmt.Fprintln(stderr, "taskbridge:", ae)
		return exitUnreachable
	case errors.As(err, &ie):
		if out.json {
			m := map[string]any{"event": "interrupted", "error": ie.Error(), "timeout": ie.timeout}
			if ie.taskID != "" {
				m["taskId"] = ie.taskID
			}
			_ = out.line(m)
		}
		fmt.Fprintln(stderr, "taskbridge:", ie)
		if ie.timeout {
			return exitTimeout
		}
		return exitInterrupted
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

// interruptedError means Ctrl-C or -timeout ended the command (exit
// status 130 or 124) while it waited; taskID, when set, is the task it
// was waiting for, which goes on without it.
type interruptedError struct {
	timeout bool
	taskID  string
	target  target
}

func (e *interruptedError) Error() string {
	what := "interrupted"
	if e.timeout {
		what = "timed out (-timeout)"
	}
	if e.taskID == "" {
		return what
	}
	if e.target.stdio() {
		return fmt.Sprintf("%s: task %s was still running; the stdio server is this command's child and stops with it, "+
			"and when it starts again on the same store its restart policy resumes, re-runs or fails the task: "+
			"see it with `taskbridge %s tasks get %s`", what, e.taskID, e.target.flags(), e.taskID)
	}
	return fmt.Sprintf("%s: task %s is still running on the server; wait with `taskbridge %s tasks result %s`, cancel with `taskbridge %s tasks cancel %s`",
		what, e.taskID, e.target.flags(), e.taskID, e.target.flags(), e.taskID)
}
