// Package workflow runs workflow prompts: a Definition is a list of steps
// (tool calls the server or the client performs, conditions, parallel
// groups, durable sleeps, events, for-each and loops, sampling steps the
// client's own model performs, questions a person answers through the
// client), registered as an MCP prompt (and optionally a tool). A Bridge runs each use of a workflow as a durable
// task on a task engine (package taskrouter) and hands the client a
// handoff (package handoff): prose a model follows plus a JSON document a
// program parses. RegisterPlain runs a workflow without a task, in the
// request.
//
// # Writing a workflow
//
//	w := workflow.New("release_notes", "Draft, review and publish release notes").
//		Arg("repo", "repository", true).
//		Step(
//			workflow.Server("draft", "draft_notes").Bind("repo", workflow.PromptArg("repo")),
//			workflow.Client("review", "review_notes").
//				Bind("draft", workflow.StepOutput("draft", "draft")).
//				Bind("approved", workflow.FromClient("true to publish")),
//			workflow.Server("publish", "publish_notes").
//				When(workflow.Truthy(workflow.StepOutput("review", "approved"))).
//				Bind("text", workflow.StepOutput("review", "final_text")),
//		)
//
// Register validates the definition against the server's tools and
// reports every problem with its step and fix. A definition's version is
// derived from its steps (or declared with WithVersion); a task runs to its
// end on the version it started with, and several versions may be served
// at once, by one process or by replicas side by side during a rolling
// deploy (see VersionOf, Options.VersionGrace).
//
// Settings come as *Options (NewBridge; nil: the defaults), as in every
// package of the module, with one exception: where a run takes its place
// on a queue, OnQueue takes functional options (QueueKey,
// QueuePriority), because they are the queue's per-placement choices,
// optional and composable, which DBOS, the anchor for queues, passes the
// same way (WithQueue, WithPriority, WithDeduplicationID on a
// workflow's start).
//
// # The path of a prompt
//
// prompts/get (or the workflow's tool) reaches TaskPromptHandler.start
// (prompt.go): the prompt arguments are checked, a fresh Progress is made
// and the task is created with it in its variables (Bridge.create), holding
// the lease. The drive loop (drive.go) is kicked: it decides what is due
// (decide, plan.go: one pure decision per event, walking the steps stage
// by stage, which calls nothing), writes that decision in one conditional
// write (instance.commit, instance.go), then carries its effects out
// (instance.carry, effects.go) outside every lock: it starts the tools of
// the attempts the write opened (instance.launch) apart from any request,
// asks queues for places and starts children, and decides their answers
// and the attempts' outcomes as they come. The prompt meanwhile waits for
// the first decision to be written (instance.decided), then until the
// workflow rests (Bridge.settle: nothing runs or is due before
// Options.PromptWait), then answers with the handoff (handoff.go) as it
// stands. A caller that gives up cancels nothing.
//
// # The path of a continuation
//
// A tools/call with the task id (the argument _task_id, or
// _meta._task_id) reaches Bridge.continueCall (continue.go) through the
// engine's continuation hook. It finds the step the call performs
// (claimStep: the client steps reached, a server step handed to the
// client), runs the tool in the request, records its result against the
// step (recordClient, one conditional write that also marks the client
// steps now reached), kicks the drive loop for what became runnable, and
// answers with the tool's own result followed by the handoff. A call that
// repeats a recorded one gets the recorded result (replayed). Events
// arrive the same way through Bridge.Deliver (deliver.go): tasks/update,
// or the webhook.
//
// # The path of a recovery
//
// A task outlives the process that ran it. At start the engine hands each
// active workflow task to Bridge.recoverTask (recover.go): a step found
// running was cut short and runs again (recorded "restart", or "takeover"
// when another replica's lease ran out: the step events say which), anything due
// runs, and the rest waits. Time-based work (a retry's backoff, a client's
// wait running out, a sleep's end) is the task's wake-up time
// (store.Task.WakeAt): the engine's scheduler wakes the task on whichever
// process is up then (Bridge.wake), after a restart or on another replica.
// On a shared store the task's lease says which process runs its server
// steps; every write is fenced by it.
//
// # The engine contract
//
// The Bridge needs from the engine only what TaskEngine lists: create,
// read, update and await tasks; run tools in process; track work so that a
// cancel, an expiry, a lost lease or the shutdown stops it; claim leases;
// and register the hooks of workflow tasks (HandleKind: recovery,
// wake-ups, expiry wording, touches, input requests). *taskrouter.Router
// implements it; the package's unit tests use a small fake.
//
// # Files
//
//	definition.go         Definition and its constructors, registration as prompt and tool
//	step.go               Step: what every kind of step holds, its builder methods
//	args.go               declared arguments: prompt arguments, the tool's properties
//	source.go             sources: where an argument's value comes from
//	kind.go               the step-kind contract every kind_*.go file implements
//	kind_server.go        a server step
//	kind_client.go        a client step
//	kind_group.go         a parallel group
//	kind_sleep.go         a sleep
//	kind_event.go         an event step
//	kind_foreach.go       a for-each
//	kind_loop.go          a loop
//	kind_child.go         a child workflow
//	kind_condition.go     the condition gate (When, Unless) any step may carry
//	kind_sample.go        sampling and question steps (Sample, Ask)
//	kind_ask.go           a question: its form, its answer
//	kind_sample_route.go  how their requests reach the client
//	kind_sample_text.go   their prompt templates and the model's replies
//	call.go               a tool call: what server and client steps share
//	container.go          what a for-each and a loop share: their records' turns
//	slot.go               slots: the records a step's rules apply to
//	validate.go           registration checks
//	version.go            versions, fingerprints, the compiled form of a definition
//	unserved.go           a task whose version this process does not serve
//	bridge.go             Bridge, Options, Register, RegisterPlain
//	env.go                OptionsFromEnv
//	engine.go             TaskEngine and the hooks handed to the engine
//	prompt.go             starting and resuming a task, settle, the final result
//	plan.go               the decision: one pure function per event, its passes in order
//	effects.go            events and effects: what a decision is about and leaves to do
//	instance.go           one task in this process: commit, write, lease, wake-up
//	drive.go              the drive loop: decide, write, carry the effects out, drain
//	attempt.go            the attempt budget: attempts, outcomes, stops, crashes, giving up
//	queue.go              queues: places taken and freed
//	queue_owner.go        queue keys in their owner's scope (Queue.SharedKeys)
//	pause.go              pause and resume
//	paused.go             the event of a pause for the client (push webhooks hear of it)
//	compensation.go       undo steps (compensation)
//	cancel.go             an end the engine wrote (cancel, expiry): places, children, undo (owed: made at a start or a takeover)
//	timerules.go          the time rules: waits, retries, deadlines, wake-ups
//	ttl.go                the ttl pass: the wake-up, the expiry and the status of a write
//	lineage.go            child workflows and their parents
//	continue.go           continuation calls, one walk: the step a call performs, its
//	                      record, the answer (a retried call's from the record)
//	leg.go                legs: a call that becomes a task for a host that runs tasks
//	deliver.go            events and webhooks
//	eventtool.go          the event tool, for a model in an LLM host
//	events.go             a task's step events, written with its progress
//	fork.go               rerun and fork
//	schedules.go          a workflow started at the times of a cron expression
//	recover.go            recovery, wake-ups, touches
//	status.go             status lines
//	handoff.go            the handoff document of a task
//	progress.go           Progress, the record kept in the task's variables
//	exec.go               argument resolution; the plain runner
//	plain.go              plain workflow prompts
//	tool.go               workflows as tools
//	context.go            StepInfo: which step a tool call performs
//	observe.go            step observers
//	testhooks.go          the test hooks' seam (internal/testhooks): no user sets them
//	simplant.go           bugs planted under a test-only build tag (simplant_attempts.go,
//	                      simplant_undo.go), which internal/sim's simulation must catch
//
// TestDocFileMap fails when a file of the package is missing here.
package workflow
