package sim

import (
	"time"

	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// The catalogue: the workflows a simulation runs, drawn from every kind
// the engine has (server and client steps, conditions, groups, sleeps,
// events, for-each, loops, children, timeouts, undo, queues with limits,
// keys and debounce, pause on failure, versions), on the simulation's
// tools (tools.go). Every step that calls a tool binds its spec (the
// "spec" argument): the spec says how the tool behaves (how often it
// fails, is held, hangs) and what the step promises (its attempt budget,
// its undo), so that the ledger and the invariants know each call's
// rules from its arguments alone.

// A spec is the behaviour and the promises of the steps that bind it.
type spec struct {
	// Budget is the attempts the server may make (the step's
	// MaxAttempts; 1 for a step that is not retryable).
	Budget int
	// Fail, Hold and Hang are the chances that an attempt fails, is held
	// until an operation releases it, or hangs until its context ends.
	Fail, Hold, Hang float64
	// Undo names the spec of the step's undo ("" for none).
	Undo string
	// UndoOf is set on an undo's spec: the spec of the step it undoes.
	UndoOf string
}

// specs are the catalogue's specs by name.
var specs = map[string]spec{
	"seq.a":     {Budget: 3, Fail: 0.3, Hold: 0.2},
	"seq.c":     {Budget: 1, Fail: 0.15, Hold: 0.2},
	"undo.s1":   {Budget: 1, Hold: 0.25, Undo: "undo.u1"},
	"undo.s2":   {Budget: 2, Fail: 0.1, Hold: 0.25, Undo: "undo.u2"},
	"undo.s3":   {Budget: 1, Hold: 0.25, Undo: "undo.u3"},
	"undo.s4":   {Budget: 1, Fail: 0.6, Hold: 0.25},
	"undo.u1":   {Budget: 3, Fail: 0.1, Hold: 0.2, UndoOf: "undo.s1"},
	"undo.u2":   {Budget: 3, Fail: 0.1, Hold: 0.2, UndoOf: "undo.s2"},
	"undo.u3":   {Budget: 3, Fail: 0.1, Hold: 0.2, UndoOf: "undo.s3"},
	"group.x":   {Budget: 2, Fail: 0.2, Hold: 0.3},
	"group.y":   {Budget: 1, Fail: 0.1, Hold: 0.3},
	"group.fin": {Budget: 1, Hold: 0.2},
	"items.it":  {Budget: 2, Fail: 0.15, Hold: 0.2, Undo: "items.itu"},
	"items.itu": {Budget: 3, Fail: 0.1, Hold: 0.1, UndoOf: "items.it"},
	"items.fin": {Budget: 1, Fail: 0.5, Hold: 0.2},
	"loop.p":    {Budget: 2, Fail: 0.1, Hold: 0.2},
	"kid.pre":   {Budget: 1, Hold: 0.2},
	"kid.post":  {Budget: 1, Hold: 0.2},
	"queued.w":  {Budget: 2, Fail: 0.1, Hold: 0.6},
	"stepq.d":   {Budget: 2, Fail: 0.1, Hold: 0.6},
	"bounce.x":  {Budget: 1, Hold: 0.3},
	"slow.t":    {Budget: 2, Hang: 0.4, Hold: 0.1},
	"slow.h":    {Budget: 2, Hang: 0.4, Hold: 0.1},
	"tick.t":    {Budget: 2, Fail: 0.2, Hold: 0.3},
	"ver.a":     {Budget: 1, Hold: 0.2},
	"ver.b":     {Budget: 1, Hold: 0.2},
	"ver.c":     {Budget: 1, Hold: 0.2},
	"pauser.f":  {Budget: 1, Fail: 0.5, Hold: 0.2},
	"naps.b":    {Budget: 1},
}

// The simulation's queues.
var (
	queueOne   = &workflow.Queue{Name: "one", Concurrency: 1}
	queueKeyed = &workflow.Queue{Name: "keyed", Concurrency: 2, PerKey: 1}
	queueLast  = &workflow.Queue{Name: "last", Debounce: 5 * time.Minute}
	// simQueues are the queues, for the invariants.
	simQueues = []*workflow.Queue{queueOne, queueKeyed, queueLast}
)

// server is a server step of spec sp on the tool sim_step.
func server(name, sp string) *workflow.Step { return serverOn(name, sp, false) }

// serverItem is server for a for-each's body: it and its undo read the
// item.
func serverItem(name, sp string) *workflow.Step { return serverOn(name, sp, true) }

func serverOn(name, sp string, item bool) *workflow.Step {
	s := workflow.Server(name, toolStep).Bind("spec", workflow.Const(sp))
	if item {
		s.Bind("item", workflow.Item())
	}
	if b := specs[sp].Budget; b > 1 {
		s.WithRetryPolicy(workflow.RetryPolicy{MaxAttempts: b, Backoff: time.Second, MaxBackoff: 4 * time.Second})
	}
	if u := specs[sp].Undo; u != "" {
		undo := workflow.Server(name+"_undo", toolUndo).Bind("spec", workflow.Const(u)).
			WithRetryPolicy(workflow.RetryPolicy{MaxAttempts: specs[u].Budget, Backoff: time.Second})
		if item {
			undo.Bind("item", workflow.Item())
		}
		s.Undo(undo)
	}
	return s
}

// client is a client step the simulation performs (sim_client).
func client(name string) *workflow.Step {
	return workflow.Client(name, toolClient).Bind("spec", workflow.Const(name)).
		Bind("answer", workflow.FromClient("any value"))
}

// A deploy is the definitions a process serves: the versions of "ver"
// (v1, v2, or both) change between restarts.
type deploy int

// The deploys.
const (
	deployV1   deploy = iota // ver v1 only
	deployBoth               // ver v1 and v2 (new tasks start on v2)
	deployV2                 // ver v2 only: v1's tasks are not served
)

func (d deploy) String() string { return [...]string{"v1", "v1+v2", "v2"}[d] }

// workflowsOf returns the catalogue's definitions as deploy d serves
// them, in registration order (children before their parents).
func workflowsOf(d deploy) []*workflow.Definition {
	approved := workflow.Truthy(workflow.StepOutput("go", "approved"))
	defs := []*workflow.Definition{
		workflow.New("seq", "a retried server step, a client step, a step that is not retried").Step(
			server("a", "seq.a"),
			client("b"),
			server("c", "seq.c"),
		),
		workflow.New("undo", "three steps with undo, then one that fails the workflow").WithUndoOnCancel().Step(
			server("s1", "undo.s1"),
			server("s2", "undo.s2"),
			server("s3", "undo.s3"),
			server("s4", "undo.s4").FailsWorkflow(),
		),
		workflow.New("group", "a group, a sleep, an event and a condition").Step(
			workflow.Parallel("g", server("x", "group.x"), server("y", "group.y"), client("z")),
			workflow.Sleep("nap", time.Hour),
			workflow.Event("go", "whether to finish").WithPayload(map[string]any{
				"type": "object", "properties": map[string]any{"approved": map[string]any{"type": "boolean"}}, "required": []string{"approved"}}),
			server("fin", "group.fin").When(approved),
		),
		workflow.New("items", "a for-each with undo, one at a time, then a step that fails the workflow").Step(
			workflow.ForEach("each", workflow.Const([]string{"i1", "i2", "i3"}),
				serverItem("it", "items.it")).InSequence(),
			server("fin", "items.fin").FailsWorkflow(),
		),
		workflow.New("loop", "a loop that polls until done").Step(
			workflow.Repeat("poll", server("p", "loop.p")).
				Until(workflow.Truthy(workflow.StepOutput("p", "done"))).AtMost(3).Every(10 * time.Minute),
		),
		workflow.New("kid", "a child workflow between two steps").Step(
			server("pre", "kid.pre"),
			workflow.Child("child", "seq"),
			server("post", "kid.post"),
		),
		workflow.New("queued", "a workflow that runs one at a time").OnQueue(queueOne).Step(
			server("w", "queued.w"),
		),
		workflow.New("stepq", "a step queued per key, then a client step").Arg("key", "the queue key", true).Step(
			server("d", "stepq.d").OnQueue(queueKeyed, workflow.QueueKey(workflow.PromptArg("key"))),
			client("ok"),
		),
		workflow.New("bounce", "a debounced workflow: the last start of a key runs").Arg("key", "the debounce key", true).
			OnQueue(queueLast, workflow.QueueKey(workflow.PromptArg("key"))).Step(
			server("x", "bounce.x"),
		),
		workflow.New("slow", "a step with a timeout, a step with a heartbeat").Step(
			server("t", "slow.t").Timeout(30*time.Millisecond),
			server("h", "slow.h").Heartbeat(30*time.Millisecond),
		),
		workflow.New("tick", "what a schedule starts").Arg(workflow.DefaultTimeArgument, "when it fired", true).Step(
			server("t", "tick.t"),
		),
		workflow.New("pauser", "a workflow that pauses on failure").PausesOnFailure().Step(
			server("f", "pauser.f").FailsWorkflow(),
			client("after"),
		),
		workflow.New("naps", "a loop over a sleep").Step(
			workflow.Repeat("l", workflow.Sleep("nap", 5*time.Minute)).Until(workflow.Truthy(workflow.StepOutput("nap"))).AtMost(2),
			server("b", "naps.b"),
		),
	}
	v1 := workflow.New("ver", "a versioned workflow").WithVersion("v1").Step(
		server("a", "ver.a"),
		workflow.Sleep("wait", 30*time.Minute),
		server("b", "ver.b"),
	)
	v2 := workflow.New("ver", "a versioned workflow").WithVersion("v2").Step(
		server("a", "ver.a"),
		workflow.Sleep("wait", 30*time.Minute),
		server("b", "ver.b"),
		server("c", "ver.c"),
	)
	switch d {
	case deployV1:
		defs = append(defs, v1)
	case deployBoth:
		defs = append(defs, v1, v2)
	case deployV2:
		defs = append(defs, v2)
	}
	return defs
}

// schedule starts tick every six hours of the simulated clock.
var schedule = workflow.Schedule{Name: "ticks", Workflow: "tick", Cron: "@every 6h", Missed: taskrouter.MissedRunOnce}

// startable are the workflows a Start operation picks from, with the
// arguments it may give.
var startable = []struct {
	name string
	args []map[string]string
}{
	{"seq", nil}, {"undo", nil}, {"group", nil}, {"items", nil}, {"loop", nil},
	{"kid", nil}, {"queued", nil},
	{"stepq", []map[string]string{{"key": "k1"}, {"key": "k2"}}},
	{"bounce", []map[string]string{{"key": "k1"}, {"key": "k2"}}},
	{"slow", nil}, {"ver", nil}, {"pauser", nil}, {"naps", nil},
}
