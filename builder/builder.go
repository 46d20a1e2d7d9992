// Package builder is taskbridge's front door: one fluent chain
// takes tools, plain and task-aware workflow prompts, a store (bbolt by
// default) and options, validates everything, and returns a ready server
// that serves over stdio, Streamable HTTP or an in-memory transport.
//
//	b := builder.New("demo", "1.0.0").WithDB("tasks.db")
//	builder.Tool(b, &mcp.Tool{Name: "fetch"}, fetch, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
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
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// DefaultDBFile is the bbolt file used when neither WithStore, WithDB nor
// EnvDB names a store.
const DefaultDBFile = "taskbridge.db"

// Builder assembles a taskbridge server. Its methods record problems
// instead of failing one by one; Build reports them all.
//
// The store is chosen one way: WithStore hands over a store you opened
// (and close), or WithDB names one the server opens and closes, by a spec:
// a bbolt file path, or a URL whose scheme names a registered backend
// (postgres://...). EnvDB, when set, names it instead of WithDB (the
// environment overrides the code, as every TASKBRIDGE_* variable does,
// unless WithoutEnv; Build logs the override at Warn), then
// DefaultDBFile. EnvDB with WithStore cannot take effect: Build refuses
// it.
//
// The settings of the parts are the parts' own options, set whole:
// WithRouterOptions (taskrouter.Options), WithWorkflowOptions
// (workflow.Options), WithServerOptions (go-sdk's); Build then has each
// part read its environment (taskrouter.OptionsFromEnv,
// workflow.OptionsFromEnv, and the builder's own EnvDB and
// EnvBboltPrefault) unless WithoutEnv. The builder's setters keep a copy
// of what they are given.
type Builder struct {
	impl      *mcp.Implementation
	opts      *mcp.ServerOptions
	router    taskrouter.Options
	st        store.Store
	db        string // WithDB's spec
	bbolt     bboltstore.Options
	useEnv    bool
	logger    *slog.Logger
	tools     []func(r *taskrouter.Router)
	plain     []*workflow.Definition
	tasked    []*workflow.Definition
	schedules []workflow.Schedule
	setup     []func(*mcp.Server)
	below     []mcp.Middleware // WithMiddleware's
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

// WithDB selects the store by a spec, owned and closed by the server: a
// URL whose scheme names a backend registered with store.Register (a
// PostgreSQL DSN, "postgres://..." or "postgresql://...", the store for
// several replicas, see package store/postgres; "memory://", a store
// that lives as long as the server; "bbolt://path") or a bbolt file path
// (the embedded default; created if missing). TASKBRIDGE_DB takes the
// same forms and, when set, overrides spec (unless WithoutEnv): an
// operator points a server written for one bbolt file at PostgreSQL for
// replicas without a change of code. OpenStore opens them.
func (b *Builder) WithDB(spec string) *Builder { b.db = spec; return b }

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

// WithBboltOptions sets the options of bboltstore.Open when the server
// opens a bbolt file itself (WithDB, EnvDB or DefaultDBFile), for example
// bboltstore.Options{Prefault: true}. EnvBboltPrefault and
// EnvBboltCommitWindow override their fields unless WithoutEnv.
func (b *Builder) WithBboltOptions(o bboltstore.Options) *Builder { b.bbolt = o; return b }

// WithRouterOptions sets the task engine's options (taskrouter.Options;
// the store is chosen with WithStore or WithDB). The TASKBRIDGE_*
// variables taskrouter.OptionsFromEnv reads override them unless
// WithoutEnv; WithLogger's logger replaces o.Logger, and WithObserver's
// observers are added to o.Observer.
func (b *Builder) WithRouterOptions(o taskrouter.Options) *Builder { b.router = o; return b }

// WithWorkflowOptions sets the workflow bridge's options (see
// workflow.Options). The TASKBRIDGE_* variables workflow.OptionsFromEnv
// reads override them unless WithoutEnv. Observer and ResultMeta are
// added to those WithObserver wires; ResultTool defaults to the built-in
// task_result tool unless WithoutTaskTools.
func (b *Builder) WithWorkflowOptions(o workflow.Options) *Builder { b.wopts = o; return b }

// WithObserver adds an observer of the task engine: metrics
// (package metrics), traces (package tracing), a dashboard's live feed
// (package dashboard). Observers are called in the order added, after the
// one in WithRouterOptions's Options.Observer. Build also wires what o
// offers beyond taskrouter.Observer:
//
//   - a workflow.StepObserver sees every workflow step attempt
//     (workflow.Options.Observer);
//   - a ResultMetaSource adds _meta entries to workflow prompt results
//     (workflow.Options.ResultMeta), as a tracer does with the task's
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

// WithMiddleware adds receiving middleware that runs below the task
// engine: it sees every request the engine hands on (prompts/get, a
// tool's call) and every tools/call the engine makes in process, a
// workflow's server steps included, with the step in its context
// (workflow.StepFrom). A test kit injects failures there
// (workflowtest); a server traces or meters its steps. Middleware added
// with mcp.Server.AddReceivingMiddleware (in Setup) runs above the
// engine instead, and never sees the engine's own calls.
func (b *Builder) WithMiddleware(mw ...mcp.Middleware) *Builder {
	b.below = append(b.below, mw...)
	return b
}

// Setup registers a function that gets the *mcp.Server before tools are
// added, for anything the builder does not cover (resources, middleware).
// Tools that workflows call must be added with Tool or RawTool: workflows
// are validated against those.
func (b *Builder) Setup(f func(*mcp.Server)) *Builder { b.setup = append(b.setup, f); return b }

// Tool adds a typed tool with its task behaviour (see taskrouter.AddTool).
func Tool[In, Out any](b *Builder, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out], opts *taskrouter.ToolOptions) *Builder {
	if t == nil || t.Name == "" {
		b.errs = append(b.errs, errors.New("builder: a tool has no name"))
		return b
	}
	b.tools = append(b.tools, func(r *taskrouter.Router) { taskrouter.AddTool(r, t, h, opts) })
	return b
}

// RawTool adds an untyped tool (see taskrouter.Router.AddRawTool).
func (b *Builder) RawTool(t *mcp.Tool, h mcp.ToolHandler, opts *taskrouter.ToolOptions) *Builder {
	if t == nil || t.Name == "" {
		b.errs = append(b.errs, errors.New("builder: a tool has no name"))
		return b
	}
	b.tools = append(b.tools, func(r *taskrouter.Router) { r.AddRawTool(t, h, opts) })
	return b
}

// PlainWorkflow adds a plain workflow prompt: it runs the server steps
// during prompts/get and returns the trace, with no task (see
// workflow.RegisterPlain).
func (b *Builder) PlainWorkflow(w *workflow.Definition) *Builder {
	b.plain = append(b.plain, w)
	return b
}

// TaskWorkflow adds a task-aware workflow prompt: a durable task that
// runs the server steps, hands the rest to the client and follows it to
// the end (see workflow.Bridge.Register).
func (b *Builder) TaskWorkflow(w *workflow.Definition) *Builder {
	b.tasked = append(b.tasked, w)
	return b
}

// Schedule starts a task-aware workflow's task at the times of a cron
// expression (see workflow.Schedule and workflow.Bridge.AddSchedule);
// add the workflow with TaskWorkflow. Unless WithoutTaskTools, a server
// with schedules also has the tools schedule_list, schedule_pause,
// schedule_resume and schedule_trigger (taskrouter.Schedules.AddTools).
func (b *Builder) Schedule(s workflow.Schedule) *Builder {
	b.schedules = append(b.schedules, s)
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
	ropts, err := b.routerOptions()
	if err != nil {
		return nil, err
	}
	var env environment
	if b.useEnv {
		if env, err = readEnvironment(); err != nil {
			return nil, err
		}
	}
	srv := &Server{Store: b.st}
	if srv.Store == nil {
		if err := b.openStore(ctx, srv, env, ropts.Logger); err != nil {
			return nil, err
		}
	} else if env.db != "" {
		return nil, fmt.Errorf("builder: %s=%s cannot take effect: this server uses the store its code hands over with WithStore; unset %s, or choose the store with WithDB (which %s overrides) or WithoutEnv", EnvDB, RedactDSN(env.db), EnvDB, EnvDB)
	}
	warnReplica(srv.Store, env, ropts.Logger)
	fail := func(err error) (*Server, error) {
		_ = srv.Close()
		return nil, err
	}
	if err := b.newRouter(srv, ropts); err != nil {
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

// routerOptions are the engine's options: the builder's, its logger and
// observers, then the environment's.
func (b *Builder) routerOptions() (*taskrouter.Options, error) {
	o := b.router
	if b.logger != nil {
		o.Logger = b.logger
	}
	if len(b.observers) > 0 {
		obs := taskrouter.Observers{}
		if o.Observer != nil {
			obs = append(obs, o.Observer)
		}
		o.Observer = append(obs, b.observers...)
	}
	if b.useEnv {
		return taskrouter.OptionsFromEnv(&o)
	}
	return &o, nil
}

// openStore opens the store the builder names (TASKBRIDGE_DB, WithDB, or
// the default file) for srv, which then owns it, and logs which it opened
// and why (at Warn when the environment overrides the code's WithDB, on
// slog's default logger when the builder has none).
func (b *Builder) openStore(ctx context.Context, srv *Server, env environment, log *slog.Logger) error {
	warn := log
	if log == nil {
		// A warning is never discarded: without a logger it goes to
		// slog's default (stderr).
		log, warn = slog.New(slog.DiscardHandler), slog.Default()
	}
	spec, from := b.db, "WithDB"
	bolt := env.bbolt(b.bbolt)
	if envSpec := env.db; b.useEnv {
		switch {
		case envSpec == "":
		case spec != "" && envSpec != spec:
			warn.Warn("the store is the one "+EnvDB+" names, not the one the code names with WithDB: the environment overrides the code (WithoutEnv keeps the code's)",
				"store", RedactDSN(envSpec), "overridden", RedactDSN(spec))
			spec, from = envSpec, EnvDB
		default:
			spec, from = envSpec, EnvDB
		}
	}
	if spec == "" {
		spec, from = DefaultDBFile, "the default"
	}
	log.Info("opening the store", "store", RedactDSN(spec), "from", from)
	st, err := OpenStore(ctx, spec, &bolt)
	if err != nil {
		return err
	}
	srv.Store, srv.ownsStore = st, true
	if store.SchemeOf(spec) == "" {
		srv.DBPath = spec
	}
	return nil
}

// warnReplica logs, at Warn (on slog's default logger when the builder
// has none), a replica id (taskrouter.EnvReplicaID) set
// for a store that is not shared: it names this process among replicas
// that share one store, and a bbolt file (or memory) is this process's
// alone, so another process given the same setting runs apart, on its
// own tasks.
func warnReplica(st store.Store, env environment, log *slog.Logger) {
	if env.replicaID == "" || store.IsShared(st) {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	log.Warn(taskrouter.EnvReplicaID+" is set, but the store is not shared: each process on its own store runs apart, with its own tasks. Replicas share one store: "+EnvDB+"=postgres://…",
		"replica", env.replicaID)
}

// newRouter makes srv's task engine on its store.
func (b *Builder) newRouter(srv *Server, opts *taskrouter.Options) error {
	router, err := taskrouter.NewRouter(srv.Store, opts)
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
	srv.MCP.AddReceivingMiddleware(b.below...) // below the engine, which Install adds last
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
	wopts := &b.wopts
	if b.useEnv {
		var err error
		if wopts, err = workflow.OptionsFromEnv(wopts); err != nil {
			return err
		}
	} else {
		o := *wopts
		wopts = &o
	}
	b.observeWorkflows(wopts)
	if !b.noTools && wopts.ResultTool == "" {
		wopts.ResultTool = taskrouter.DefaultResultToolName
		if b.taskTools != nil && b.taskTools.ResultName != "" {
			wopts.ResultTool = b.taskTools.ResultName
		}
	}
	if !b.noTools && wopts.ResumeTool == "" {
		wopts.ResumeTool = taskrouter.DefaultResumeToolName
		if b.taskTools != nil && b.taskTools.ResumeName != "" {
			wopts.ResumeTool = b.taskTools.ResumeName
		}
	}
	var err error
	if srv.Bridge, err = workflow.NewBridge(srv.Router, wopts); err != nil {
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
	for _, s := range b.schedules {
		if err := srv.Bridge.AddSchedule(s); err != nil {
			errs = append(errs, err)
		}
	}
	if len(b.schedules) > 0 && !b.noTools {
		srv.Router.Schedules().AddTools(nil)
	}
	return errors.Join(errs...)
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
