package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A tool call: what the kinds that call a tool (kind_server.go,
// kind_client.go) share, and the engine's side of it: their arguments,
// retry and failure policies, the client's wait, the webhook, and
// resolving their arguments against a progress record.

// toolCall is the tool a step calls and how.
type toolCall struct {
	tool      string
	args      map[string]Source
	retryable bool
	retry     RetryPolicy
	onFailure FailurePolicy
	waits     clientWait
	webhook   bool
	timeout   time.Duration // an attempt longer than this is cut and fails
	heartbeat time.Duration // an attempt silent longer than this is lost and fails
	// perform, when set, is the attempt itself in place of calling tool
	// (a step that asks the client, kind_sample.go): its result is the
	// attempt's, recorded as a tool's is.
	perform func(ctx context.Context, w *attemptWork) (*mcp.CallToolResult, error)
}

func newCall(tool string) toolCall { return toolCall{tool: tool, args: map[string]Source{}} }

func (c *toolCall) call() *toolCall { return c }

func (c *toolCall) bind(arg string, src Source) {
	if c.args == nil {
		c.args = map[string]Source{}
	}
	c.args[arg] = src
}

func (c *toolCall) setTimeout(d time.Duration)       { c.timeout = d }
func (c *toolCall) setHeartbeat(d time.Duration)     { c.heartbeat = d }
func (c *toolCall) setRetry(p RetryPolicy)           { c.retryable, c.retry = true, p }
func (c *toolCall) setFailure(p FailurePolicy)       { c.onFailure = p }
func (c *toolCall) wait() *clientWait                { return &c.waits }
func (c *toolCall) acceptWebhook()                   { c.webhook = true }
func (c *toolCall) calls(tool string) bool           { return c.tool == tool }
func (c *toolCall) acceptsWebhook() bool             { return c.webhook }
func (c *toolCall) argNames() []string               { return slices.Sorted(maps.Keys(c.args)) }
func (c *toolCall) source(arg string) (Source, bool) { src, ok := c.args[arg]; return src, ok }

// callReads lists the call's arguments, by name.
func (c *toolCall) callReads() []read {
	out := make([]read, 0, len(c.args))
	for _, a := range c.argNames() {
		out = append(out, read{label: a, src: c.args[a]})
	}
	return out
}

// printArgs is what the fingerprint covers of the call's arguments.
func (c *toolCall) printArgs() map[string]printedSource {
	if len(c.args) == 0 {
		return nil
	}
	args := make(map[string]printedSource, len(c.args))
	for k, v := range c.args {
		args[k] = printSource(v)
	}
	return args
}

// RetryPolicy says how the server retries a failing tool step.
type RetryPolicy struct {
	// MaxAttempts is how many times the server runs the step before it
	// gives up (at least 1).
	MaxAttempts int
	// Backoff is the pause before the second attempt; it doubles before
	// each later one, up to MaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// DefaultRetryPolicy is the policy of a retryable step without its own:
// three attempts, 100ms then 200ms apart.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 3, Backoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}

// policy returns the call's effective retry policy: one attempt for a step
// that is not retryable.
func (c *toolCall) policy() RetryPolicy {
	if !c.retryable {
		return RetryPolicy{MaxAttempts: 1 + plantExtraAttempt}
	}
	p := c.retry
	if p.MaxAttempts <= 0 {
		p = DefaultRetryPolicy
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = max(p.Backoff, DefaultRetryPolicy.MaxBackoff)
	}
	p.MaxAttempts += plantExtraAttempt
	return p
}

// FailurePolicy says what happens when the server gives up on a tool step.
type FailurePolicy string

// The failure policies.
const (
	// HandToClient (the default) keeps the task working and hands the step
	// to the client: the handoff lists it as a step the client may perform
	// (with its resolved arguments and the error), a continuation call of
	// its tool with the task id records it and lets the server run what
	// follows, and a resume (the workflow's prompt or tool with the task
	// id) makes the server try it again.
	HandToClient FailurePolicy = "hand_to_client"
	// FailWorkflow ends the task failed, with the step's error as the
	// reason.
	FailWorkflow FailurePolicy = "fail_workflow"
)

func (c *toolCall) failurePolicy() FailurePolicy {
	if c.onFailure == "" {
		return HandToClient
	}
	return c.onFailure
}

// checkCall checks the call of step c.step: its tool exists, every bound
// argument is one the tool takes, read from a valid source; a server run
// binds every required argument; the policies are known.
func (c *toolCall) checkCall(ch *checker, client bool) {
	schema, known := ch.tool(c.tool)
	for _, r := range c.callReads() {
		ch.source(r.label, r.src, schema, known)
		if r.src.Kind == SourceClient && !client {
			ch.add("argument %q is FromClient, but the step runs on the server: bind it to another source, or make it a Client step", r.label)
		}
	}
	if known && !client {
		for _, req := range schema.required {
			src, bound := c.args[req]
			switch {
			case !bound:
				ch.add("required argument %q of tool %q is not bound: bind it with Bind(%q, ...)", req, c.tool, req)
			case src.Kind == SourcePromptArg && !ch.w.requiredArg(src.Name) && src.Default == nil:
				ch.add("required argument %q of tool %q is bound to optional prompt argument %q, which may be left out: make the prompt argument required, or give the binding a default with PromptArg(%q).WithDefault(...)", req, c.tool, src.Name, src.Name)
			}
		}
	}
	if p := c.failurePolicy(); p != HandToClient && p != FailWorkflow {
		ch.add("unknown failure policy %q: use HandToClient or FailWorkflow", p)
	}
	if c.retry.MaxAttempts < 0 || c.retry.Backoff < 0 || c.retry.MaxBackoff < 0 {
		ch.add("the retry policy has a negative value")
	}
	ch.wait(&c.waits)
}

// resolve computes the call's arguments against p. An argument bound to
// an optional prompt argument that was not given is left out (or gets
// its default). With partial set, unresolvable arguments become handoff
// placeholders instead of errors; with takeover (the server performs a
// client step whose wait ran out), FromClient arguments take their
// defaults.
func (c *toolCall) resolve(r *resolver, p *Progress, partial, takeover bool) (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage, len(c.args))
	for _, name := range c.argNames() {
		src := c.args[name]
		if takeover && src.Kind == SourceClient && src.Default != nil {
			out[name] = src.Default
			continue
		}
		v, err := r.value(p, src)
		switch {
		case errors.Is(err, errNotProvided):
			if src.Default != nil {
				out[name] = src.Default
			}
			continue
		case err != nil && partial:
			out[name] = placeholder(src, err)
			continue
		case err != nil:
			return nil, fmt.Errorf("argument %q: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// placeholder is the handoff's stand-in for an argument value that does
// not exist yet.
func placeholder(src Source, err error) json.RawMessage {
	desc := src.Description
	switch src.Kind {
	case SourceStepOutput, SourceTaskVar:
		desc = "from " + src.String()
	case SourcePromptArg:
		desc = "prompt argument " + src.Name
	}
	if desc == "" {
		desc = err.Error()
	}
	return marshal("<" + desc + ">")
}

// callEntry fills the handoff entry of a tool step: its arguments
// (resolved where known) and the steps whose outputs they need.
func (c *toolCall) callEntry(v *view, sp *StepProgress, rs *handoff.RemainingStep) {
	rs.Tool = c.tool
	if v.wf == nil {
		return
	}
	rs.Arguments, _ = c.resolve(v.resolver, v.p, true, sp.ServerTakeover)
	for _, r := range c.callReads() {
		if r.src.Kind != SourceStepOutput {
			continue
		}
		if from := v.wf.def.producer(r.src.Name); from != nil && !slices.Contains(rs.DependsOn, from.Name) {
			rs.DependsOn = append(rs.DependsOn, from.Name)
		}
	}
	if c.webhook {
		rs.Webhook = v.webhook(sp.Name)
	}
}

// serverDo says what the server does about a tool step it performs: it
// runs it now, retries it later, or runs it once its inputs exist.
func serverDo(sp *StepProgress) string {
	switch {
	case sp.Status == mcptask.StepRunning:
		return "the server is running it now; do not call it yourself."
	case sp.RetryAt != nil:
		return fmt.Sprintf("failed%s; the server tries it again at %s; do not call it yourself.", errNote(sp.Error), stamp(*sp.RetryAt))
	}
	return "the server runs it by itself; do not call it yourself."
}

// callFor is how the client performs the call's step now (the handoff's
// Call): the task id and the values to fill in, with the values the
// server adds itself; for a step the server gave up on (fix), every value,
// for the client to correct the one that caused the error.
func (c *toolCall) callFor(v *view, sp *StepProgress, fix bool) *handoff.Call {
	call := &handoff.Call{Tool: c.tool, Arguments: map[string]json.RawMessage{mcptask.ArgTaskID: marshal(v.taskRef())}}
	if v.wf == nil {
		return call
	}
	args, _ := c.resolve(v.resolver, v.p, true, sp.ServerTakeover)
	if fix {
		call.Fix = oneLine(sp.Error)
	}
	for _, name := range c.argNames() {
		src, val := c.args[name], args[name]
		switch {
		case src.Kind == SourceClient:
			call.Fill = append(call.Fill, c.fillOf(v, name, src))
		case val == nil:
		case fix:
			call.Arguments[name] = val
		default:
			if call.Server == nil {
				call.Server = map[string]json.RawMessage{}
			}
			call.Server[name] = val
		}
	}
	return call
}

// fillOf describes argument name, which the client supplies (src is its
// FromClient source): its type and values from the tool's input schema,
// its meaning from the source (or the schema).
func (c *toolCall) fillOf(v *view, name string, src Source) handoff.Fill {
	f := handoff.Fill{Name: name, Description: src.Description}
	sch, ok := v.wf.schemas[c.tool]
	if !ok {
		return f
	}
	var p struct {
		Type        any               `json:"type"`
		Enum        []json.RawMessage `json:"enum"`
		Description string            `json:"description"`
	}
	_ = json.Unmarshal(sch.props[name], &p)
	f.Type, f.Enum = jsonType(p.Type), p.Enum
	if f.Description == "" {
		f.Description = p.Description
	}
	f.Optional = !slices.Contains(sch.required, name)
	return f
}

// jsonType is a schema's "type" as one word: a string, or the first
// type of a list other than null.
func jsonType(t any) string {
	switch t := t.(type) {
	case string:
		return t
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok && s != "null" {
				return s
			}
		}
	}
	return ""
}

// handedMessage is the status line of a tool step the server gave up on
// and handed to the client.
func handedMessage(s *Step, sp *StepProgress) string {
	tool := toolOf(s)
	return fmt.Sprintf("step %q (tool %q) failed after %d attempt(s): %s; the client may perform it by calling tool %q with the task id as argument _task_id (correct its arguments if they caused the error), or resume the workflow to have the server try again",
		s.Name, tool, sp.Attempts, oneLine(sp.Error), tool)
}

// toolLine names the tool of a step for status lines: `step "x" (tool
// "y")`.
func toolLine(s *Step) string {
	if t := toolOf(s); t != "" {
		return fmt.Sprintf("step %q (tool %q)", s.Name, t)
	}
	return fmt.Sprintf("step %q", s.Name)
}

// joinQuoted quotes each name and joins them with commas.
func joinQuoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// Attempt bounds: a tool step's timeout and heartbeat (the server runs
// the attempt; a client performs its own calls).

type (
	timed  interface{ setTimeout(d time.Duration) }
	beater interface{ setHeartbeat(d time.Duration) }
)

// Timeout bounds each attempt of a tool step the server runs (a client
// step's, once the server takes it over): at d the tool's context is
// cancelled and the attempt fails ("timed out"), and the step's retry
// policy applies. A client's own calls are not timed.
func (s *Step) Timeout(d time.Duration) *Step {
	return on(s, "Timeout", "only a tool step's attempts are timed", func(k timed) { k.setTimeout(d) })
}

// Heartbeat makes each attempt of a tool step report liveness with
// workflow.Heartbeat(ctx) at least every d: an attempt silent longer is
// treated as lost (its context is cancelled, the attempt fails) and the
// retry policy applies. (An attempt on a replica that died is taken over
// with the task's lease, heartbeat or not.)
func (s *Step) Heartbeat(d time.Duration) *Step {
	return on(s, "Heartbeat", "only a tool step's attempts beat", func(k beater) { k.setHeartbeat(d) })
}

// errCut is the cause of an attempt's context cut by its own bound.
type errCut struct{ why string }

func (e *errCut) Error() string { return e.why }

type beatKey struct{}

// Heartbeat reports that the attempt of the workflow step running in ctx
// is alive (see Step.Heartbeat); it does nothing elsewhere.
func Heartbeat(ctx context.Context) {
	if beat, ok := ctx.Value(beatKey{}).(chan struct{}); ok {
		select {
		case beat <- struct{}{}:
		default:
		}
	}
}

// attemptGrace is how long an attempt cut by its bound waits for its tool
// to return before the attempt is recorded failed anyway (a tool that
// ignores its context).
const attemptGrace = time.Second

// run runs call under the call's bounds: its timeout and heartbeat cut
// the attempt's context, and cut says why ("" when none did). A tool that
// ignores the cut is waited for attemptGrace more, then left behind.
func (c *toolCall) run(ctx context.Context, call func(context.Context) (*mcp.CallToolResult, error)) (res *mcp.CallToolResult, err error, cut string) {
	if c.timeout <= 0 && c.heartbeat <= 0 {
		res, err = call(ctx)
		return res, err, ""
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if c.timeout > 0 {
		t := time.AfterFunc(c.timeout, func() { cancel(&errCut{fmt.Sprintf("timed out after %s (the step's Timeout)", c.timeout)}) })
		defer t.Stop()
	}
	beat := make(chan struct{}, 1)
	if c.heartbeat > 0 {
		ctx = context.WithValue(ctx, beatKey{}, beat)
		go func() {
			t := time.NewTimer(c.heartbeat)
			defer t.Stop()
			for {
				select {
				case <-beat:
					t.Reset(c.heartbeat)
				case <-t.C:
					cancel(&errCut{fmt.Sprintf("lost: no heartbeat within %s (the step's Heartbeat)", c.heartbeat)})
					return
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := call(ctx)
		done <- outcome{res, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		select {
		case o = <-done:
		case <-time.After(attemptGrace):
			o.err = context.Cause(ctx)
		}
	}
	var e *errCut
	if errors.As(context.Cause(ctx), &e) {
		cut = e.why
	}
	return o.res, o.err, cut
}
