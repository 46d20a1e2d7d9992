// Package builder is taskbridge's front door: one fluent chain
// takes tools, plain and task-aware workflow prompts, a store (bbolt by
// default) and options, validates everything, and returns a ready server
// that serves over stdio, Streamable HTTP or an in-memory transport.
//
//	b := builder.New("demo", "1.0.0").WithDBPath("tasks.db")
//	builder.Tool(b, &mcp.Tool{Name: "fetch"}, fetch, taskrouter.ToolOptions{TaskSupport: taskrouter.TaskOptional})
//	b.TaskWorkflow(wf)
//	srv, err := b.Build(ctx)
//	defer srv.Close()
//	http.ListenAndServe("127.0.0.1:8080", srv.HTTPHandler(nil))
package builder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// EnvDB names the environment variable that sets the store when none is
// given: a bbolt file path or a PostgreSQL DSN (see WithDB).
const EnvDB = "TASKBRIDGE_DB"

// EnvOrphanTimeout names the environment variable that sets how long a
// workflow task no client has touched waits before it expires (see
// workflow.Bridge.OrphanTimeout); Go duration syntax or milliseconds, and
// a negative value disables it.
const EnvOrphanTimeout = "TASKBRIDGE_ORPHAN_TIMEOUT"

// EnvProgressInterval names the environment variable that lets quick
// Retryable workflow steps share progress writes (see
// workflow.Bridge.ProgressInterval); Go duration syntax or milliseconds;
// zero or negative (the default) writes after every step.
const EnvProgressInterval = "TASKBRIDGE_PROGRESS_INTERVAL"

// EnvPromptWait names the environment variable that bounds how long a
// workflow prompt or continuation waits for the server steps it sets off
// (see workflow.Options.PromptWait); Go duration syntax or milliseconds;
// "0" or "off" waits until the workflow rests.
const EnvPromptWait = "TASKBRIDGE_PROMPT_WAIT"

// EnvWorkflowTTL names the environment variable that sets how long a
// workflow task may rest between recorded steps (see
// workflow.Options.TTL).
const EnvWorkflowTTL = "TASKBRIDGE_WORKFLOW_TTL"

// EnvUnknownVersion names the environment variable that says what happens
// to a task whose workflow version is not registered: "fail" (the
// default) or "wait" (see workflow.VersionPolicy).
const EnvUnknownVersion = "TASKBRIDGE_UNKNOWN_VERSION"

// EnvWebhookURL names the environment variable that says where the
// server's workflow webhook handler is reachable from outside (see
// workflow.Options.WebhookURL), e.g. https://ci-hooks.example.com/hooks.
const EnvWebhookURL = "TASKBRIDGE_WEBHOOK_URL"

// EnvBboltPrefault names the environment variable that opens a bbolt
// store with its file prefaulted (bboltstore.WithPrefault): "1" or "true"
// turns it on, "0" or "false" off.
const EnvBboltPrefault = "TASKBRIDGE_BBOLT_PREFAULT"

// DefaultDBFile is the bbolt file used when neither a store, a path nor
// EnvDB is given.
const DefaultDBFile = "taskbridge.db"

// Builder assembles a taskbridge server. Its methods record problems
// instead of failing one by one; Build reports them all.
type Builder struct {
	impl      *mcp.Implementation
	opts      *mcp.ServerOptions
	cfg       taskrouter.Config
	st        store.Store
	dbPath    string
	bbolt     []bboltstore.Option
	useEnv    bool
	logger    *slog.Logger
	tools     []func(r *taskrouter.Router)
	plain     []*workflow.SequentialWorkflow
	tasked    []*workflow.SequentialWorkflow
	setup     []func(*mcp.Server)
	errs      []error
	wopts     workflow.Options // workflow task settings (see workflow.Options)
	observers []taskrouter.Observer
	taskTools *taskrouter.TaskToolsOptions // names of the built-in task tools
	noTools   bool                         // WithoutTaskTools
}

// New starts a builder for a server with the given name and version.
func New(name, version string) *Builder {
	return &Builder{impl: &mcp.Implementation{Name: name, Version: version}, useEnv: true}
}

// WithStore uses st for tasks. The caller keeps ownership: Server.Close
// does not close it.
func (b *Builder) WithStore(st store.Store) *Builder { b.st = st; return b }

// WithDBPath uses a bbolt file at path (created if missing), owned and
// closed by the server. It is WithDB for a file path.
func (b *Builder) WithDBPath(path string) *Builder { b.dbPath = path; return b }

// WithDB selects the store by a spec, owned and closed by the server: a
// URL whose scheme names a backend registered with store.Register (a
// PostgreSQL DSN, "postgres://..." or "postgresql://...", the store for
// several replicas, see package store/postgres; "memory://", a store
// that lives as long as the server; "bbolt://path") or a bbolt file path
// (the embedded default). TASKBRIDGE_DB takes the same forms; OpenStore
// opens them.
func (b *Builder) WithDB(spec string) *Builder { b.dbPath = spec; return b }

// IsPostgresDSN reports whether a store spec names PostgreSQL (the
// "postgres" or "postgresql" scheme) rather than a bbolt file.
func IsPostgresDSN(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// RedactDSN returns a store spec fit for a log line: a postgres:// DSN
// with its password replaced by "xxxxx"; a bbolt path unchanged.
func RedactDSN(spec string) string {
	if !IsPostgresDSN(spec) {
		return spec
	}
	u, err := url.Parse(spec)
	if err != nil {
		return "postgres://(a DSN that does not parse)"
	}
	return u.Redacted()
}

// WithBboltOptions passes opts to bboltstore.Open when the server opens a
// bbolt file itself (WithDB, WithDBPath, EnvDB or DefaultDBFile), for
// example bboltstore.WithPrefault(true). EnvBboltPrefault, read after
// them, can turn prefaulting on or off unless WithoutEnv.
func (b *Builder) WithBboltOptions(opts ...bboltstore.Option) *Builder {
	b.bbolt = append(b.bbolt, opts...)
	return b
}

// WithConfig sets the task engine's configuration (its Store field is
// ignored: use WithStore or WithDBPath).
func (b *Builder) WithConfig(cfg taskrouter.Config) *Builder { b.cfg = cfg; return b }

// WithWorkflowOptions sets the workflow bridge's options (see
// workflow.Options); the With* methods below set single fields of them,
// and the TASKBRIDGE_* variables they name override them unless
// WithoutEnv. Observer and ResultMeta are added to those WithObserver
// wires.
func (b *Builder) WithWorkflowOptions(o workflow.Options) *Builder { b.wopts = o; return b }

// WithWorkflowTTL sets how long a workflow task may rest between two
// recorded steps before it expires, for workflows whose definition sets no
// TTL (see workflow.Options.TTL; zero: the engine's default ttl).
// TASKBRIDGE_WORKFLOW_TTL overrides it unless WithoutEnv.
func (b *Builder) WithWorkflowTTL(d time.Duration) *Builder { b.wopts.TTL = d; return b }

// WithOrphanTimeout sets how long a workflow task whose handoff no client
// received waits before it expires as failed (see
// workflow.Options.OrphanTimeout); zero keeps the default, negative
// disables it. TASKBRIDGE_ORPHAN_TIMEOUT overrides it unless WithoutEnv.
func (b *Builder) WithOrphanTimeout(d time.Duration) *Builder { b.wopts.OrphanTimeout = d; return b }

// WithProgressInterval lets quick Retryable workflow steps share progress
// writes (see workflow.Options.ProgressInterval); zero or negative (the
// default) writes after every step.
// TASKBRIDGE_PROGRESS_INTERVAL overrides it unless WithoutEnv.
func (b *Builder) WithProgressInterval(d time.Duration) *Builder {
	b.wopts.ProgressInterval = d
	return b
}

// WithPromptWait bounds how long a workflow prompt (or continuation) waits
// for the server steps it sets off before it answers (see
// workflow.Options.PromptWait): zero keeps the default, negative waits
// until the workflow rests. TASKBRIDGE_PROMPT_WAIT overrides it unless
// WithoutEnv (there "0" or "off" waits until the workflow rests).
func (b *Builder) WithPromptWait(d time.Duration) *Builder { b.wopts.PromptWait = d; return b }

// WithWebhookURL says where the workflow webhook handler
// (workflow.Bridge.WebhookHandler, which the caller mounts) is reachable
// from outside, so that handoffs carry each webhook step's URL (see
// workflow.Options.WebhookURL). TASKBRIDGE_WEBHOOK_URL overrides it unless
// WithoutEnv.
func (b *Builder) WithWebhookURL(url string) *Builder { b.wopts.WebhookURL = url; return b }

// WithObserver adds an observer of the task engine: metrics
// (package metrics), traces (package tracing), a dashboard's live feed
// (package dashboard). Observers are called in the order added, after the
// one in WithConfig's Config.Observer. Build also wires what o offers
// beyond taskrouter.Observer:
//
//   - a workflow.StepObserver sees every workflow step attempt
//     (workflow.Bridge.Observer);
//   - a ResultMetaSource adds _meta entries to workflow prompt results
//     (workflow.Bridge.ResultMeta), as a tracer does with the task's
//     traceparent;
//   - a RouterAttacher is handed the router once it exists (metrics read
//     the engine's gauges from it).
//
// Nothing is observed by default.
func (b *Builder) WithObserver(o taskrouter.Observer) *Builder {
	if o == nil {
		b.errs = append(b.errs, errors.New("builder: WithObserver(nil)"))
		return b
	}
	b.observers = append(b.observers, o)
	return b
}

// ResultMetaSource is implemented by observers that add _meta entries to
// the prompt results of workflow tasks (see WithObserver).
type ResultMetaSource interface {
	ResultMeta(t *store.Task) map[string]any
}

// RouterAttacher is implemented by observers that need the router once it
// is built (see WithObserver).
type RouterAttacher interface {
	Attach(r *taskrouter.Router)
}

// WithTaskTools names the built-in task tools (task_result, task_cancel
// by default; see taskrouter.Router.AddTaskTools). The builder registers
// them unless WithoutTaskTools: they let a model in an LLM host, which
// can only call tools, wait for and cancel the tasks its long tool calls
// and workflows became.
func (b *Builder) WithTaskTools(opts taskrouter.TaskToolsOptions) *Builder {
	b.taskTools = &opts
	return b
}

// WithoutTaskTools leaves the built-in task tools out.
func (b *Builder) WithoutTaskTools() *Builder { b.noTools = true; return b }

// WithoutEnv stops Build from reading TASKBRIDGE_* environment variables.
func (b *Builder) WithoutEnv() *Builder { b.useEnv = false; return b }

// WithServerOptions sets the go-sdk server options.
func (b *Builder) WithServerOptions(opts *mcp.ServerOptions) *Builder { b.opts = opts; return b }

// WithLogger sets the logger for the engine and the SDK server.
func (b *Builder) WithLogger(l *slog.Logger) *Builder { b.logger = l; return b }

// Setup registers a function that gets the *mcp.Server before tools are
// added, for anything the builder does not cover (resources, middleware).
// Tools that workflows call must be added with Tool or RawTool: workflows
// are validated against those.
func (b *Builder) Setup(f func(*mcp.Server)) *Builder { b.setup = append(b.setup, f); return b }

// Tool adds a typed tool with its task behaviour (see taskrouter.AddTool).
func Tool[In, Out any](b *Builder, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out], opts taskrouter.ToolOptions) *Builder {
	if t == nil || t.Name == "" {
		b.errs = append(b.errs, errors.New("builder: a tool has no name"))
		return b
	}
	b.tools = append(b.tools, func(r *taskrouter.Router) { taskrouter.AddTool(r, t, h, opts) })
	return b
}

// RawTool adds an untyped tool (see taskrouter.Router.AddRawTool).
func (b *Builder) RawTool(t *mcp.Tool, h mcp.ToolHandler, opts taskrouter.ToolOptions) *Builder {
	if t == nil || t.Name == "" {
		b.errs = append(b.errs, errors.New("builder: a tool has no name"))
		return b
	}
	b.tools = append(b.tools, func(r *taskrouter.Router) { r.AddRawTool(t, h, opts) })
	return b
}

// Workflow adds a plain workflow prompt (no task).
func (b *Builder) Workflow(w *workflow.SequentialWorkflow) *Builder {
	b.plain = append(b.plain, w)
	return b
}

// TaskWorkflow adds a task-aware workflow prompt.
func (b *Builder) TaskWorkflow(w *workflow.SequentialWorkflow) *Builder {
	b.tasked = append(b.tasked, w)
	return b
}

// Server is a built taskbridge server.
type Server struct {
	// MCP is the go-sdk server.
	MCP *mcp.Server
	// Router is the task engine.
	Router *taskrouter.Router
	// Bridge serves the task-aware workflows.
	Bridge *workflow.Bridge
	// Store holds the tasks.
	Store store.Store
	// DBPath is the bbolt file, when the builder opened one.
	DBPath string

	ownsStore bool
}

// Build validates everything, opens the store, installs the task engine,
// registers tools and workflows, resolves tasks a previous process left
// behind, and returns the server.
func (b *Builder) Build(ctx context.Context) (*Server, error) {
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	cfg, err := b.routerConfig()
	if err != nil {
		return nil, err
	}
	srv := &Server{Store: b.st}
	if srv.Store == nil {
		if err := b.openStore(ctx, srv); err != nil {
			return nil, err
		}
	}
	fail := func(err error) (*Server, error) {
		_ = srv.Close()
		return nil, err
	}
	if err := b.newRouter(srv, cfg); err != nil {
		return fail(err)
	}
	if err := b.newMCPServer(srv); err != nil {
		return fail(err)
	}
	// Workflows are validated against the tools added through the builder.
	// No session may exist yet: prompts and resources registered while one
	// does make the SDK queue list_changed notifications for every session
	// that connects during its delay, which stateless HTTP sessions cannot
	// receive.
	if err := b.addWorkflows(srv); err != nil {
		return fail(err)
	}
	if err := srv.Router.Start(ctx); err != nil {
		return fail(err)
	}
	return srv, nil
}

// routerConfig is the engine's configuration: the builder's, its logger,
// then the environment's.
func (b *Builder) routerConfig() (taskrouter.Config, error) {
	cfg := b.cfg
	if b.logger != nil {
		cfg.Logger = b.logger
	}
	if b.useEnv {
		return taskrouter.ConfigFromEnv(cfg)
	}
	return cfg, nil
}

// openStore opens the store the builder names (a path, TASKBRIDGE_DB, or
// the default file) for srv, which then owns it.
func (b *Builder) openStore(ctx context.Context, srv *Server) error {
	path := b.dbPath
	if path == "" && b.useEnv {
		path = os.Getenv(EnvDB)
	}
	if path == "" {
		path = DefaultDBFile
	}
	bolt := b.bbolt
	if v := os.Getenv(EnvBboltPrefault); v != "" && b.useEnv {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("builder: %s=%q: want 1, true, 0 or false", EnvBboltPrefault, v)
		}
		bolt = append(slices.Clone(bolt), bboltstore.WithPrefault(on))
	}
	st, err := OpenStore(ctx, path, bolt...)
	if err != nil {
		return err
	}
	srv.Store, srv.ownsStore = st, true
	if store.SchemeOf(path) == "" {
		srv.DBPath = path
	}
	return nil
}

// newRouter makes srv's task engine on its store, with the observers.
func (b *Builder) newRouter(srv *Server, cfg taskrouter.Config) error {
	cfg.Store = srv.Store
	if len(b.observers) > 0 {
		obs := taskrouter.Observers{}
		if cfg.Observer != nil {
			obs = append(obs, cfg.Observer)
		}
		cfg.Observer = append(obs, b.observers...)
	}
	router, err := taskrouter.New(cfg)
	if err != nil {
		return err
	}
	srv.Router = router
	for _, o := range b.observers {
		if a, ok := o.(RouterAttacher); ok {
			a.Attach(router)
		}
	}
	return nil
}

// newMCPServer makes srv's go-sdk server, installs the engine on it and
// adds the tools (the built-in task tools unless WithoutTaskTools).
func (b *Builder) newMCPServer(srv *Server) error {
	opts := b.opts
	if opts == nil {
		opts = &mcp.ServerOptions{}
	}
	if opts.Logger == nil && b.logger != nil {
		o := *opts
		o.Logger = b.logger
		opts = &o
	}
	srv.MCP = mcp.NewServer(b.impl, opts)
	if err := srv.Router.Install(srv.MCP); err != nil {
		return err
	}
	for _, f := range b.setup {
		f(srv.MCP)
	}
	for _, add := range b.tools {
		add(srv.Router)
	}
	if !b.noTools {
		srv.Router.AddTaskTools(b.taskTools)
	}
	return nil
}

// addWorkflows registers the plain workflows, makes srv's workflow bridge
// (with the fork tool unless WithoutTaskTools) and registers the
// task-aware workflows; it reports every invalid workflow at once.
func (b *Builder) addWorkflows(srv *Server) error {
	lookup := workflow.ToolsLookup(srv.Router.RegisteredTools())
	call := workflow.EngineCaller(srv.Router)
	var errs []error
	for _, w := range b.plain {
		if _, err := workflow.RegisterPlain(srv.MCP, w, lookup, call); err != nil {
			errs = append(errs, err)
		}
	}
	wopts, err := b.workflowOptions()
	if err != nil {
		return err
	}
	b.observeWorkflows(&wopts)
	if !b.noTools && wopts.ResultTool == "" {
		wopts.ResultTool = taskrouter.DefaultResultToolName
		if b.taskTools != nil && b.taskTools.ResultName != "" {
			wopts.ResultTool = b.taskTools.ResultName
		}
	}
	if srv.Bridge, err = workflow.NewBridge(srv.Router, &wopts); err != nil {
		return err
	}
	srv.Bridge.Install(srv.MCP)
	if !b.noTools {
		var fork string
		if b.taskTools != nil {
			fork = b.taskTools.ForkName
		}
		srv.Bridge.AddForkTool(srv.MCP, fork)
	}
	for _, w := range b.tasked {
		if _, err := srv.Bridge.Register(srv.MCP, w, lookup); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// workflowOptions are the bridge's options: the builder's, then the
// environment's.
func (b *Builder) workflowOptions() (workflow.Options, error) {
	o := b.wopts
	if !b.useEnv {
		return o, nil
	}
	for _, e := range []struct {
		name string
		dst  *time.Duration
		off  time.Duration // what "0" and "off" mean
	}{
		{EnvWorkflowTTL, &o.TTL, 0},
		{EnvOrphanTimeout, &o.OrphanTimeout, -1},
		{EnvProgressInterval, &o.ProgressInterval, 0},
		{EnvPromptWait, &o.PromptWait, -1},
	} {
		v := os.Getenv(e.name)
		if v == "" {
			continue
		}
		if v == "off" || v == "0" {
			*e.dst = e.off
			continue
		}
		d, err := taskrouter.ParseEnvDuration(v)
		if err != nil {
			return o, fmt.Errorf("builder: %s=%q: %w", e.name, v, err)
		}
		*e.dst = d
	}
	if v := os.Getenv(EnvUnknownVersion); v != "" {
		o.UnknownVersion = workflow.VersionPolicy(v)
	}
	if v := os.Getenv(EnvWebhookURL); v != "" {
		o.WebhookURL = v
	}
	return o, nil
}

// observeWorkflows hands the observers that watch workflow steps, or add
// to workflow prompt results, to the bridge's options.
func (b *Builder) observeWorkflows(br *workflow.Options) {
	var steps workflow.StepObservers
	var metas []ResultMetaSource
	for _, o := range b.observers {
		if so, ok := o.(workflow.StepObserver); ok {
			steps = append(steps, so)
		}
		if ms, ok := o.(ResultMetaSource); ok {
			metas = append(metas, ms)
		}
	}
	if br.Observer != nil {
		steps = append(workflow.StepObservers{br.Observer}, steps...)
	}
	if len(steps) > 0 {
		br.Observer = steps
	}
	if prev := br.ResultMeta; len(metas) > 0 {
		br.ResultMeta = func(t *store.Task) map[string]any {
			out := map[string]any{}
			if prev != nil {
				for k, v := range prev(t) {
					out[k] = v
				}
			}
			for _, ms := range metas {
				for k, v := range ms.ResultMeta(t) {
					out[k] = v
				}
			}
			return out
		}
	}
}

// HTTPHandler serves the server over Streamable HTTP in both task
// dialects (see taskrouter.Router.HTTPHandler). Mount it at /mcp.
func (s *Server) HTTPHandler(opts *taskrouter.HTTPOptions) http.Handler {
	return s.Router.HTTPHandler(opts)
}

// ServeStdio serves one client over standard input and output until the
// client disconnects or ctx ends.
func (s *Server) ServeStdio(ctx context.Context) error {
	return s.MCP.Run(ctx, s.Router.Transport(&mcp.StdioTransport{}))
}

// Connect serves one in-process client and returns the client's end of
// the in-memory transport.
func (s *Server) Connect(ctx context.Context) (mcp.Transport, error) {
	ct, st := mcp.NewInMemoryTransports()
	if _, err := s.MCP.Connect(ctx, s.Router.Transport(st), nil); err != nil {
		return nil, err
	}
	return ct, nil
}

// Close stops background work and closes the store if the builder opened
// it. Tasks still running are left for the next start to resolve.
func (s *Server) Close() error {
	var errs []error
	if s.Bridge != nil {
		s.Bridge.Close()
	}
	if s.Router != nil {
		errs = append(errs, s.Router.Close())
	}
	if s.ownsStore && s.Store != nil {
		errs = append(errs, s.Store.Close())
		s.ownsStore = false
	}
	return errors.Join(errs...)
}
