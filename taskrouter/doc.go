// Package taskrouter is taskbridge's task engine: it gives a go-sdk
// *mcp.Server durable MCP tasks in both wire dialects, from one store.
//
// # What it does
//
// A Router creates task records in a store.Store before a client hears of
// them, runs task handlers in the background with bounded concurrency,
// records their outcome durably, wakes waiters at once (tasks/result returns
// within a millisecond of the task ending, no polling), cancels handlers
// when tasks/cancel, ttl expiry or the task timeout says so, sweeps expired
// tasks, and on Start resolves the work a dead process left behind
// (retryable tools re-run, others fail with a reason, other kinds go to
// the hooks registered with HandleKind).
//
//	router, _ := taskrouter.NewRouter(st, nil)     // nil: the default Options
//	_ = router.Install(server)                     // right after mcp.NewServer
//	taskrouter.AddTool(router, tool, handler, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
//	_ = router.Start(ctx)                          // recovery, then the background services
//	http.Handle("/mcp", router.HTTPHandler(nil))   // or server.Run(ctx, router.Transport(&mcp.StdioTransport{}))
//
// # The path of a request
//
//  1. A shim (HTTPHandler for Streamable HTTP, Transport for stdio and
//     in-memory connections) moves a core-dialect params.task into a
//     private _meta key, because go-sdk drops unknown params before any
//     middleware runs. The HTTP shim also refuses malformed bodies and
//     mismatched Mcp-Name headers, and routes 2026-07-28 requests to the
//     SDK's stateless handler and older ones to its stateful one.
//  2. The router's middleware (installed by Install) resolves the request
//     once into a *Request: its mcptask.Dialect, whether it declared the
//     tasks extension, its owner, its source; it removes every private
//     _meta key, so no handler sees them, and stores the *Request in the
//     context, which is the only way the SDK lets custom method handlers
//     (tasks/*) reach it.
//  3. tools/call: a call carrying _meta._task_id goes to the
//     ContinuationHandler (the workflow bridge). Otherwise the dialect
//     decides whether the call becomes a task (the client asks with
//     params.task in the core dialect; the server decides in the
//     extension). Arguments are checked against the tool's input schema
//     before a task exists; a task is created, admitted against the quotas
//     and run in the background through the SDK's own tool dispatch.
//     Every task a component creates (CreateTask: workflows, forks) is
//     admitted at the same door (admit.go), and holds its slot until it
//     ends.
//  4. tasks/get, tasks/result, tasks/list, tasks/cancel, tasks/update:
//     gated by dialect (methods the dialect lacks, the Mcp-Name header, the
//     capability declaration), then the task is loaded if the requestor may
//     see it. tasks/stream passes the same gates, but the shims serve it
//     below the SDK, as subscriptions/listen for tasks (streamwire.go): it
//     writes notifications/tasks/event on the request's stream until the
//     task has ended.
//
// Steps 1 and 2 have a shortcut, the fast path (fastpath.go): the shims
// answer the task methods and the tools/call of tools registered with the
// router (one that creates a task, and a plain one) themselves. They
// decode the body once, in place, build the request the SDK would build,
// run it through the server's receiving chain (the middleware added after
// Install, the router's, the SDK's method handlers: the chain as it stood
// on the first such request), and write the reply as the SDK writes it,
// in one write; the notifications a plain call's handler sends while it
// runs go on the call's own stream before its reply, as on the SDK's path
// (the router's sending middleware carries them there). Anything the SDK
// would treat differently (a batch, an unusual body, a header the SDK
// refuses, an unknown session, a per-request log level, a handler that
// may send the client requests on the call's stream) goes to the SDK
// untouched. Options.DisableFastPath turns it off.
//
// A typed tool's handler is the router's (toolcall.go): it does what
// go-sdk's typed wrapper does, and takes the input the router already
// decoded when the router checked the arguments before running the tool
// (a task about to be created, a plain call in host mode), so the
// arguments are decoded and validated once per call.
//
// # Where the SDK's gaps are worked around
//
//   - params.task is dropped by the SDK's decoder: the shims (shim.go,
//     http.go) move it, with package internal/wire's rewriting.
//   - capabilities.tasks and execution.taskSupport have no SDK fields: the
//     initialize and tools/list results are wrapped and re-encoded
//     (middleware.go).
//   - custom method handlers receive no request: the resolved *Request
//     travels in the context (request.go).
//   - a method handler needs a *mcp.ServerSession: calls the engine makes
//     without a client (restart recovery, in-process tool calls) use a
//     loopback session whose client end discards everything
//     (loopback.go). Tool calls never go through JSON-RPC in-process:
//     RunTool calls the SDK's dispatch below the router's middleware
//     directly (tools.go).
//   - the SDK sends no custom notifications: notifications/tasks/status is
//     written on connections wrapped by Transport (shim.go), and
//     subscriptions/listen for tasks and tasks/stream are served by the
//     shims themselves (listen.go, streamwire.go).
//   - a handler's notifications/progress after its request was answered
//     reaches no client: the router's sending middleware records it as an
//     event of the handler's task (events_log.go).
//   - the SDK does not recover handler panics: the middleware does.
//   - the SDK sends errors without a code as code 0, ends a stream at the
//     first line it cannot read, and echoes ids it cannot hold exactly
//     altered: the middleware gives every error a code (wireError), the
//     stream framer answers such lines itself, the shims refuse such ids
//     (internal/wire's guard.go).
//
// # Upgrading go-sdk
//
// The shims, the fast path and package internal/wire reproduce what
// go-sdk v1.8.0 does with the same bytes, without reading any of its
// private fields. TestGoSDKVersionPinned fails on any other version; an
// upgrade must re-check, before moving the pin:
//
//   - that params.task is still dropped (then the shims must still move
//     it), and that the private _meta keys still reach the middleware;
//   - that AddReceivingMiddleware still makes the latest middleware the
//     outermost and hands it the chain sessions call: the fast path runs
//     its requests through the chain it is handed
//     (TestMiddlewareAfterInstallSeesFastPath);
//   - go-sdk's decoding (segmentio/encoding, case-sensitive fields, the
//     nesting limit of 1000), message validation and per-request _meta
//     checks (wire.DecodeCall, wire.ViewMeta; FuzzParseFastBody);
//   - the Streamable HTTP handler's checks before it reads a POST
//     (wire.SDKReads), its session rules, its replies (headers, SSE
//     framing, the HTTP statuses of protocol errors, the duplicate-id
//     refusal) and jsonrpc2's encoding of results and of -32601
//     (wire.Response, wire.WriteReply);
//   - the _meta serverInfo of 2026-07-28 results, the stateless
//     transport's refusal of server requests (wire.StandIns), and the
//     capability and tools/list shapes the middleware rewraps;
//   - MCPGODEBUG's settings (the fast path is off while it is set).
//
// The differential tests (fastpath_diff_test.go, fastpath_conndiff_test.go)
// send the same requests through the fast path and through the SDK and
// compare the bytes: run them, and the fuzz targets, on the new version.
//
// # Where the dialects differ
//
// mcptask.Dialect answers the questions (which methods exist, who decides a
// call is a task, the status of an isError result, whether cancelling a
// finished task is acknowledged, whether the client retries with
// inputResponses). The replies that differ in shape are in dialect.go:
// createReply, getReply, cancelReply and the gate of tasks/* requests.
// Elsewhere the package asks Dialect, never compares dialects:
// middleware.go's toolsCall (ServerDecidesTasks), methods.go's tasksCancel
// (AcksFinishedCancel), input.go's preflight (ClientRetriesWithInput), and
// tasks.go records the dialect's Label on each task.
//
//	                            core (2025-11-25)            extension (2026-07-28)
//	a tools/call becomes a task client sends params.task      server decides (required, or optional + declared)
//	create reply                {"task": {...}}               flat, resultType "task", content []
//	tasks/get                   the task                      the task + result / error / inputRequests
//	tasks/result, tasks/list    yes                           -32601
//	tasks/update                -32601                        answers inputRequests
//	tasks/cancel, task ended    -32602                        acknowledged
//	isError tool result         task failed                   task completed
//
// # Owners
//
// A request with an authorization context (go-sdk TokenInfo) acts for its
// user and sees only that user's tasks. Without one, the task id is the
// capability (unless Options.SessionBound): any unauthenticated requestor
// that presents the id may read, wait on, cancel and continue the task,
// from any session and after restarts; tasks/list shows only the
// requestor's own tasks. Tasks hidden from a requestor are "not found".
//
// What an owner has beside its tasks (its webhooks for all its tasks, its
// queue keys) is shared within an owner scope (OwnerScope): the owner,
// except that a task a stateless anonymous client created is a scope of
// its own, since every such client acts for the one LocalOwner. The tasks
// a task starts (a workflow's children, forks, undo) are created as the
// task's own request (RequestOf): same owner, access and scope.
//
// # State
//
// The Router has no lock of its own. Its mutable state is in parts, each a
// small type with its own lock guarding only its fields, its methods in
// its own file:
//
//   - tools, a toolRegistry (tools.go; sync.RWMutex): the registered tool
//     entries, the tools that take _task_id, the built-in task tools'
//     names, the continuation handler.
//   - kinds (kinds.go; sync.RWMutex): the KindHandler of each task kind.
//   - runs, a runTable (runs.go): handler runs and Track-ed work by task
//     id, and closed. Close sets closed and collects the work to stop in
//     one critical section.
//   - quotas (admit.go): pending slots by owner and source and in total,
//     the tasks holding one until they end (CreateTask's), running slots
//     by owner, the waiting tasks/result requests by source (a deleted
//     session ends them), the step tools queued; the running and step
//     semaphores are channels beside them.
//   - watches (watch.go): the channels waiters block on, by task id.
//     The fanout (watch.go) takes a task's change to every part that
//     waits on it; the door (admit.go) admits a task at the quotas.
//   - leases (lease.go): the leases this process holds.
//   - listeners (listen.go): the subscriptions/listen streams, by task.
//   - sinks (events.go): the events tasks reported (progress, log lines,
//     output) waiting for their next write, by task; each sink's turn
//     token orders its writes (held for one store write, never with a
//     lock).
//   - streams (stream.go): the feeds of the readers of task events, by
//     task; each feed's fetch token makes one reader read the store for
//     all.
//   - pushers, pushConns (push.go): open shimmed connections and the
//     connection each task was created on.
//   - peers (peer.go): the connections the server sends requests to
//     clients on, the session that named each task last, the requests
//     waiting for their answer.
//   - recent, recentEnded (recent.go): records this process ended moments
//     ago.
//   - workers (workers.go): idle goroutines that run handlers.
//   - loop, loopback (loopback.go): the session of the engine's own calls.
//   - fast, fastPath (fastpath.go): what the fast path learned (versions,
//     sessions, the server's receiving chain), in atomics and sync.Maps.
//   - hooks, the push service (push_*.go): the webhooks known
//     (hookSet; sync.RWMutex), the scan queue's shards (each a
//     sync.Mutex over its queue and cursors), a static webhook's failure
//     counts (its mu), the delivery pool's attempts and circuits
//     (deliveryPool; sync.Mutex).
//   - registry (replicas.go): the latest read of the replicas' registry
//     and the keys of this process's latest heartbeat.
//   - and the background services (below), each with its own state.
//
// Lock order: there is none to follow, because every part's lock is a
// leaf. A part's methods take its lock, touch its own fields and return;
// no part's lock is held while another part's lock is taken or while
// calling out (a hook, a cancel function, a log line, a store call, a
// write to a connection, a session's connect). Code that needs several
// parts (Close, Stats, the door's admit, the fanout's changed and
// announced) calls each part's methods in turn; each such place says
// why seeing the parts a moment apart is fine. A
// run's own mu, a pendingRecord's and a pushConn's are likewise never
// held across a part's lock. TestDocLockRule checks what the code can
// show: no Router method takes a lock, and no lock is taken through a
// field's field.
//
// # Features
//
// The Router keeps the engine (creating, reading, updating, cancelling
// and admitting tasks, running their handlers, serving the two dialects).
// Each feature built on it is a type of its own, reached through a handle
// (River's Client.PeriodicJobs is the model), and sees a narrow interface
// of what it needs of the engine, never the Router:
//
//	r.Webhooks()   *Webhooks   push: webhooks, deliveries (pushEngine)
//	r.Schedules()  *Schedules  cron schedules, their tools (cronEngine)
//	r.Streams()    *Streams    readers of task events; tasks/stream and
//	                           subscriptions/listen are served by the
//	                           same type (streamEngine)
//	r.Peers()      *Peers      requests the server sends a task's client
//	                           (the peers registry alone)
//	r.Pauses()     *Pauses     pausing and resuming (the kinds' registry,
//	                           the store); task_pause and task_resume are
//	                           the built-in task tools' (taskToolEngine)
//	r.Queues()     *Queues     the store's queues on the engine's clock
//	                           (queueEngine)
//
// TestDocNoServiceHoldsTheRouter keeps it so: only the shims, the fast
// path and a handler run hold the *Router.
//
// # Background work
//
// The engine's background work runs as services (package
// internal/service): each is a type with its own configuration (defaults,
// and validation naming the field), Start and Stop, and test signals on
// the service value; the Router owns one Supervisor, which Start starts in
// order and Close stops in reverse. The periodic ones share one timer
// loop (service.Loop: a round, then the wait it asks for, or a poke).
//
//   - registry (replicas.go): heartbeats the keys this process serves
//     (its Placer kinds': the workflow versions) into the store's
//     replicas' registry, first, and keeps the latest read of it: the
//     scheduler and the takeover leave a task to a live replica that
//     serves its key when this process does not; it counts the replicas
//     that left (departures).
//   - feed, a changeFeed (feed.go): follows the store's change feed
//     (store.Notifier), first, so that nothing is missed while recovering.
//   - sched, a scheduler (schedule.go): runs due wake-ups (store.Task.WakeAt)
//     through their kind's Wake hook.
//   - sweeper (sweep.go): deletes expired ended tasks, fails expired
//     active ones.
//   - renewer, a leaseRenewer (lease.go): renews this process's leases and
//     stops the work of those it lost.
//   - takeover, a leaseTakeover (lease.go): on a shared store, claims and
//     resolves tasks whose lease expired, and after a replica left hands
//     the cancelled tasks to the kinds that may owe an effect of their
//     cancel (recovery's owed, as Start does: a workflow's undo task).
//   - hooks, the push service (webhooks, push_scan.go), started with the
//     feed: keeps what the matching needs of the webhook registrations in
//     memory (push_hooks.go), scans the event logs of the tasks they
//     watch into delivery records, and is the KindHandler of those
//     records (KindPush, push_deliver.go), whose attempts run on its own
//     bounded workers, never on the scheduler's wake-ups
//     (push_workers.go). It depends on the engine through a narrow
//     interface (pushEngine), and clients reach it through
//     Router.Webhooks.
//   - crons (schedules.go): fires the registered schedules, each firing
//     once across replicas (a record keyed by schedule and time, written
//     compare-and-swap), by their missed-firing and overlap policies
//     (schedules_overlap.go), and starts their tasks. It depends on the
//     engine through a narrow interface (cronEngine), and clients reach
//     it through Router.Schedules.
//
// No service holds the Router: each sees a narrow interface of what it
// needs of the engine (engineBase: the store and the logger; the
// sweeper's sweepEngine adds endTask, and it deletes through the fanout's
// delete; the takeover resolves through recovery's resolveTask and owed, and the
// feed's feedEngine is the fanout's announced alone) and the parts it
// reads through one-method interfaces (the leases, the replicas'
// registry, the kinds' hooks), so what a service may touch is in its
// constructor's signature. A new piece of background work plugs in the
// same way: a type in its own file, its engine interface, a config struct
// with withDefaults and validate, Name/Start/Stop (a service.Loop for
// periodic rounds), signals of service.Signal, made in NewRouter and
// started in Start. Work that must survive a restart or run on any
// replica is not timed in memory: it is a durable wake-up (a task of its
// own kind, or a WakeAt on the task it belongs to) that the scheduler
// hands to that kind's KindHandler.Wake, which claims the task's lease
// and does one attempt; a failed attempt moves WakeAt (the backoff)
// rather than sleeping. Push deliveries are the model: each is a task of
// kind KindPush whose WakeAt is its next attempt.
//
// # Files
//
// The Router's own methods (the engine: creating, reading, updating,
// cancelling and admitting tasks, running their handlers, serving the two
// dialects, its lifecycle and the handles of its features) are in
// router.go, create.go, tasks.go, runs.go, methods.go,
// middleware.go, tools.go, kinds.go, lease.go and watch.go;
// every other file holds a part, a feature or a service
// (TestDocRouterFiles).
//
// The Router and its lifecycle: router.go (the Router, NewRouter, Start,
// Close, its faces HTTPHandler and Transport, the features' handles),
// options.go (Options, defaults, validation, DefaultOwner), env.go
// (OptionsFromEnv: the one place the package reads the environment,
// push's variables included).
//
// A request's way in: shim.go (the stdio and in-memory connection shim,
// its fast path and status pushes), http.go (the Streamable HTTP shim),
// fasthttp.go (its fast path), fastpath.go (the fast path's part),
// request.go (the Request: its dialect, owner, source and access),
// middleware.go (Install, the router's middleware resolving each request,
// tools/call), listen.go (subscriptions/listen and its listeners),
// push.go (status pushes), peer.go (requests the server sends a client:
// Peer, the Peers handle, and the shims' part of them).
//
// Tasks: create.go (creating a task: the record, a tool task started at
// once, the instant fold, a plain call that outlives the host deadline,
// a workflow's leg), scope.go (owner scopes: OwnerScope, RequestOf,
// anonymous requests), tasks.go (read, update, complete, fail, end,
// count), methods.go (tasks/*), dialect.go (the replies that differ by
// dialect), wire.go (the wire types), watch.go (waiting for a change;
// the fanout: a record's create and delete, this process's writes and
// the feed's, taken to the parts), hostmode.go (the
// argument _task_id of host mode), tasktools.go (the built-in task tools:
// task_result, task_cancel), pause.go (pausing a task: Pauser, the Pauses
// handle, task_pause, task_resume), input.go (input mid-task), admit.go
// (quotas, and the door every task is admitted at), observe.go
// (Observer, Stats), events.go (what a task's work reports: Progress,
// Logger, Output, written as its events),
// events_log.go (captured notifications/progress and
// notifications/message, Logger's slog handler), stream.go (reading a
// task's events live: the Streams handle), streamwire.go (tasks/stream
// over HTTP, stdio and in-memory).
//
// Work: tools.go (the tool registry, in-process calls), toolcall.go (a
// typed tool's handler, its argument check and its output), run.go (a
// handler run: execute, finish, its fenced writes, its input requests),
// runs.go (the runs table, spawn, Track, stopping and cancel), workers.go
// (goroutines for handlers), kinds.go (the kind hooks), lease.go (leases,
// the renewer and the takeover), recover.go (recovery: a restart's
// tasks, a takeover's, a leg run again, a cancel's owed effects), recent.go (tasks ended moments
// ago), loopback.go (the engine's own session), schedule.go,
// sweep.go, feed.go, schedules.go, replicas.go (the services above; the
// last also Placer and ServedBy), schedules_api.go (the Schedules handle:
// adding, listing, pausing, resuming, triggering), schedules_overlap.go
// (a schedule's overlap policy), scheduletools.go (schedule_list,
// schedule_pause, schedule_resume, schedule_trigger), queues.go (the
// Queues handle: the store's queues on the engine's clock, WakeNow),
// simplant.go and simplant_queue.go (a bug planted in the queues'
// release under a test-only build tag, which internal/sim's simulation
// must catch).
//
// Push: push_options.go (PushOptions), push_hooks.go
// (registrations: the records, the in-memory set), push_api.go (the Go
// API: the Webhooks handle and its owner rules), push_scan.go (the
// service, what it needs of the engine: event logs into deliveries),
// push_deliver.go (a delivery's attempts), push_workers.go (the
// attempts' own workers: per-receiver limits, circuits), push_url.go
// (where deliveries may go: URL and address rules, the dialer),
// push_methods.go (the webhook methods).
//
// Packages of its own: internal/wire (the JSON-RPC codec of the shims
// and the fast path: decoding, scanning, framing, replies, calls in
// flight; it imports nothing of the engine), internal/service (Service,
// Supervisor, Loop, Signal). TestDocFileMap fails when a file of the
// package is missing here.
package taskrouter
