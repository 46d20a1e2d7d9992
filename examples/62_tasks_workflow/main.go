// Command 62_tasks_workflow demonstrates taskbridge's task-prompt bridge.
//
// With no arguments it runs the whole lifecycle in one process on an
// embedded bbolt store: prompts/get creates a durable task, the server runs
// its steps and hands off the client step, the demo acts as the client and
// continues with _meta._task_id, the last server step runs, and the task
// completes.
//
// The replicas mode runs the server as several replicas sharing one
// throwaway PostgreSQL, behind a round-robin proxy (see docs/REPLICAS.md).
//
//	go run ./examples/62_tasks_workflow
//	go run ./examples/62_tasks_workflow serve -http 127.0.0.1:8080 -db tasks.db
//	go run ./examples/62_tasks_workflow serve -stdio -db tasks.db
//	go run ./examples/62_tasks_workflow replicas -n 3 -http 127.0.0.1:8080
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/gcpolicy"
	"github.com/taskbridge/taskbridge/internal/tokenauth"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/push"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

const usage = `62_tasks_workflow demonstrates taskbridge's task-prompt bridge.

Usage:
  62_tasks_workflow [-db FILE]          run the demo: the whole workflow lifecycle in one
                                        process, narrated (default: a temporary store)
  62_tasks_workflow serve -http ADDR    serve over Streamable HTTP at http://ADDR/mcp
  62_tasks_workflow serve -stdio        serve one client over stdin/stdout
  62_tasks_workflow replicas            run N replicas of serve on a throwaway PostgreSQL,
                                        behind a round-robin proxy at http://ADDR/mcp

Serve flags:
  -http ADDR      listen address (use a loopback address such as 127.0.0.1:8080)
  -stdio          serve over stdin/stdout instead
  -db FILE|DSN    store: a bbolt file (default $TASKBRIDGE_DB, else taskbridge-62.db;
                  its directory is created when missing), or a postgres:// DSN to
                  share tasks between several replicas
  -ledger FILE    the publication ledger publish_notes keeps (default: FILE.published
                  beside a bbolt file; for PostgreSQL, taskbridge/example-62.published
                  in $XDG_STATE_HOME, by default ~/.local/state)
  -tokens LIST    require bearer tokens: "TOKEN=USER,TOKEN=USER" (HTTP only; default
                  $TASKBRIDGE_TOKENS); each user owns the tasks its requests create
  -dashboard-token TOKEN
                  admin token of the dashboard at http://ADDR/dashboard/ (default
                  $TASKBRIDGE_DASHBOARD_TOKEN); users of -tokens sign in with their
                  own token and see their own tasks. Without either, no dashboard.
  -trace none|stdout
                  tracing: "none" (default) makes no spans but hands clients each
                  workflow task's traceparent; "stdout" writes spans as JSON to
                  stderr (stdout carries the stdio transport)
  -public-url URL the server's URL as outside systems reach it (default http://ADDR):
                  handoffs give webhook steps URL/hooks/TASK/STEP
  -push URL       push: POST a signed delivery to URL whenever any task ends, needs
                  input or pauses for its client (off by default; clients register
                  their own webhooks with taskbridge webhook add either way)
  -push-secret S  the deliveries' signing secret, whsec_... (default
                  $TASKBRIDGE_PUSH_SECRET; without one, a new one is printed)
  -push-events LIST
                  what -push is told of (default terminal,input_required,paused;
                  step adds every workflow step's start and end)
  -schedule CRON  start the workflow scheduled_report at the times of a cron expression
                  ("@every 1m", "0 2 * * *"; off by default); taskbridge schedules
                  list|pause|resume|trigger operate it, as does the dashboard
  -schedule-approval CRON
                  start the workflow nightly_release at the times of a cron expression
                  (schedule "nightly"): it checks the night's build, waits for a
                  person's decision (event approve, pushed as input_required), then
                  ships it, or fails on a rejection (off by default)
  -schedule-tz Z  the time zone of -schedule and -schedule-approval (IANA, e.g.
                  Europe/Berlin; default UTC)
  -schedule-owner USER
                  the user of -tokens who owns the schedules and the tasks they
                  start, and may trigger, pause and resume them over HTTP (default:
                  the server's local owner, which only a stdio client is)
  -v              log engine activity to stderr

Prometheus metrics are served at http://ADDR/metrics (HTTP only), workflow
webhooks at http://ADDR/hooks/TASK/STEP (POST with the task's webhook token).

Replicas flags (PostgreSQL's initdb and postgres must be installed, e.g. under
/usr/lib/postgresql/*/bin; as root the database runs as the postgres user):
  -http ADDR      the proxy's listen address (default 127.0.0.1:8080); the replicas
                  listen on free loopback ports, each named by TASKBRIDGE_REPLICA_ID
                  (replica-1, replica-2, ...)
  -n N            number of replicas (default 3)
  -keep-db        leave the PostgreSQL data directory when stopping (default: removed)
  -dashboard-token TOKEN
                  admin token of the dashboard at http://ADDR/dashboard/, behind the
                  proxy (default $TASKBRIDGE_DASHBOARD_TOKEN; without it, no dashboard)
  -v              the replicas log engine activity, each line prefixed with its name
Ctrl-C (SIGINT) or SIGTERM stops the proxy, the replicas and PostgreSQL.

The server offers the workflow prompts release_notes (task-aware; it
publishes only when the review approves), release_notes_plain (the same,
without a task), ship_release (a flaky step the server retries, and a step
handed to the client when the version is not like v1.2.3) and
canary_release (three check suites in parallel, a durable soak of
soak_seconds, a person's decision: the event go_live, delivered with the
tool workflow_event, tasks/update or the webhook; then promote or roll
back), and the tools fetch_changes, draft_notes, review_notes,
publish_notes, generate_report (slow: run it as a task), run_checks,
create_tag, announce_release, run_suite, promote_release and
rollback_release, and the built-in task_result, task_cancel,
workflow_event and workflow_fork. Environment variables TASKBRIDGE_* tune
the task engine (see the README).
`

func main() {
	gcpolicy.Apply() // GOGC=400 unless the environment sets GOGC (see README, Performance)
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "62_tasks_workflow:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		return serve(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "replicas" {
		return replicas(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("62_tasks_workflow", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	db := fs.String("db", "", "bbolt file (default: a fresh temporary file)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unknown argument %q (the commands are: serve, replicas, or none for the demo)", fs.Arg(0))
	}
	if err := prepareDBDir(*db); err != nil {
		return err
	}
	path := *db
	if path == "" {
		dir, err := os.MkdirTemp("", "taskbridge-62-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "tasks.db")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return demo(ctx, path, stdout)
}

func serve(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	addr := fs.String("http", "", "serve Streamable HTTP at http://ADDR/mcp (use a loopback address)")
	stdio := fs.Bool("stdio", false, "serve one client over stdin/stdout")
	db := fs.String("db", cmp.Or(os.Getenv(builder.EnvDB), "taskbridge-62.db"), "store: a bbolt file, or a postgres:// DSN (several replicas); default $TASKBRIDGE_DB")
	ledger := fs.String("ledger", "", "publication ledger file (default: beside a bbolt file, or in the state directory)")
	tokenList := fs.String("tokens", os.Getenv(tokenauth.EnvTokens), "bearer tokens TOKEN=USER,...")
	dashToken := fs.String("dashboard-token", os.Getenv(EnvDashboardToken), "dashboard admin token")
	traceTo := fs.String("trace", "none", "tracing exporter: none or stdout")
	publicURL := fs.String("public-url", "", "the server's URL as outside systems reach it, for webhook URLs in handoffs (default: http://ADDR)")
	verbose := fs.Bool("v", false, "log to stderr")
	pushURL := fs.String("push", "", "POST a signed delivery to URL whenever any task ends, needs input or pauses")
	pushSecret := fs.String("push-secret", os.Getenv(taskrouter.EnvPushSecret), "the deliveries' signing secret, whsec_...")
	pushEvents := fs.String("push-events", "terminal,input_required,paused", "what -push is told of")
	schedule := fs.String("schedule", "", `start scheduled_report at the times of this cron expression ("@every 1m", "0 2 * * *"; off when empty)`)
	scheduleTZ := fs.String("schedule-tz", "", "the time zone of -schedule (IANA, e.g. Europe/Berlin; default UTC)")
	approval := fs.String("schedule-approval", "", "start nightly_release (checks, a person's approval, ship) at the times of this cron expression (off when empty)")
	scheduleOwner := fs.String("schedule-owner", "", "the user of -tokens who owns the schedules and their tasks (default: the server's local owner, stdio's client)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unknown argument %q", fs.Arg(0))
	}
	if env := os.Getenv(builder.EnvDB); env != "" && env != *db {
		// The builder lets the environment override the code: here the
		// flag is the operator's word too, and one of the two would be
		// ignored.
		return fmt.Errorf("serve: -db %s and %s=%s name different stores: give one", builder.RedactDSN(*db), builder.EnvDB, builder.RedactDSN(env))
	}
	hook, err := pushHook(*pushURL, *pushSecret, *pushEvents)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if (*addr == "") == !*stdio {
		return errors.New("serve: give exactly one of -http ADDR or -stdio")
	}
	tokens, err := tokenauth.Parse(*tokenList)
	if err != nil {
		return fmt.Errorf("serve: -tokens: %w", err)
	}
	if len(tokens) > 0 && *stdio {
		return errors.New("serve: -tokens needs -http (stdio has no bearer tokens)")
	}
	if *dashToken != "" && *stdio {
		return errors.New("serve: -dashboard-token needs -http")
	}
	if err := prepareDBDir(*db); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *scheduleOwner != "" && len(tokens) == 0 {
		return errors.New("serve: -schedule-owner names a user of -tokens: give -tokens too")
	}
	b, err := newBuilder(options{DB: *db, Ledger: *ledger, Schedule: *schedule, ApprovalSchedule: *approval, ScheduleTZ: *scheduleTZ, ScheduleOwner: *scheduleOwner})
	if err != nil {
		return err
	}
	if *verbose {
		b.WithLogger(slog.New(slog.NewTextHandler(stderr, nil)))
	}
	if hook != nil {
		b.WithRouterOptions(taskrouter.Options{Push: taskrouter.PushOptions{Hooks: []taskrouter.StaticWebhook{*hook}}})
		fmt.Fprintf(stderr, "push: %s of every task to %s, signed with secret %s\n", *pushEvents, hook.URL, hook.Secret)
	}
	obs, err := observe(b, *traceTo, stderr)
	if err != nil {
		return err
	}
	defer obs.shutdown()
	var ln net.Listener
	if !*stdio {
		if ln, err = net.Listen("tcp", *addr); err != nil {
			return err
		}
		defer ln.Close()
		base := *publicURL
		if base == "" {
			base = "http://" + ln.Addr().String()
		}
		b.WithWorkflowOptions(workflow.Options{WebhookURL: strings.TrimRight(base, "/") + "/hooks"})
	}
	srv, err := b.Build(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	if *stdio {
		return srv.ServeStdio(ctx)
	}
	var h http.Handler = srv.HTTPHandler(nil)
	if mw := tokenauth.Middleware(tokens); mw != nil {
		h = mw(h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	mux.Handle("/metrics", obs.metrics.Handler())
	// The webhooks authenticate with each task's own token, not the
	// bearer tokens of the MCP endpoint.
	mux.Handle("/hooks/", srv.Bridge.WebhookHandler())
	dash, err := newDashboard(srv, obs.feed, *dashToken, tokens)
	if err != nil {
		return err
	}
	defer dash.Close()
	mux.Handle("/dashboard/", dash)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		dash.Close() // ends the dashboards' event streams, which Shutdown would wait for
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	auth := "no authentication"
	if len(tokens) > 0 {
		auth = fmt.Sprintf("%d bearer tokens", len(tokens))
	}
	fmt.Fprintf(stderr, "serving http://%s/mcp (db %s, %s), metrics at /metrics, workflow webhooks at /hooks/\n", ln.Addr(), builder.RedactDSN(*db), auth)
	if *dashToken != "" || len(tokens) > 0 {
		fmt.Fprintf(stderr, "dashboard at http://%s/dashboard/ (sign in with the dashboard token or a user token)\n", ln.Addr())
	} else {
		fmt.Fprintln(stderr, "dashboard: off (give -dashboard-token or -tokens)")
	}
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// pushHook is the static webhook of -push: nil without a URL; a new
// secret when none is given.
func pushHook(url, secret, events string) (*taskrouter.StaticWebhook, error) {
	if url == "" {
		return nil, nil
	}
	if secret == "" {
		secret = push.NewSecret()
	}
	h := taskrouter.StaticWebhook{URL: url, Secret: secret}
	for _, e := range strings.FieldsFunc(events, func(r rune) bool { return r == ',' || r == ' ' }) {
		if !mcptask.WebhookEvent(e).Valid() {
			return nil, fmt.Errorf("-push-events: unknown event %q (terminal, input_required, paused, step)", e)
		}
		h.Events = append(h.Events, mcptask.WebhookEvent(e))
	}
	return &h, nil
}

// prepareDBDir creates the directory of a -db file when it does not
// exist yet (a host's config on a fresh machine names a file under, say,
// ~/.taskbridge), and reports one it cannot create or that is no
// directory, naming the database path (the store would fail later, and
// the publication ledger beside it first, with a less helpful error).
func prepareDBDir(db string) error {
	if db == "" || builder.IsPostgresDSN(db) {
		return nil
	}
	dir := filepath.Dir(db)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("-db %s: creating its directory: %w", db, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("-db %s: %w", db, err)
	case !st.IsDir():
		return fmt.Errorf("-db %s: %s is not a directory", db, dir)
	}
	return nil
}

// ledgerInStateDir is the publication ledger of a server on PostgreSQL,
// which has no file to keep it beside: taskbridge/example-62.published in
// the user's state directory ($XDG_STATE_HOME, by default ~/.local/state),
// never the working directory.
func ledgerInStateDir() (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("the publication ledger: no state directory (give -ledger FILE): %w", err)
		}
		dir = filepath.Join(home, ".local", "state")
	}
	dir = filepath.Join(dir, "taskbridge")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("the publication ledger: %w", err)
	}
	return filepath.Join(dir, "example-62.published"), nil
}
