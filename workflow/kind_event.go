package workflow

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// An event step waits for a named event that the client or an outside
// system delivers: the event tool (Options.EventTool; any client, core
// dialect included), tasks/update (the extension dialect answers the
// task's input request), an HTTP POST to the webhook with the task's
// token, or Bridge.Deliver. The event's payload (a JSON object matching
// WithPayload's schema) is the step's output. An event is a durable
// message: one delivered before the workflow reaches the step is kept in
// the task and delivered when the wait starts (once: a second, different
// payload is refused; the same one again is accepted as a repeat). A
// declined input request skips the step. With WaitsAtMost the wait is
// bounded (TimeoutFail or TimeoutSkip: no tool could perform it).

// event is the kind of Event steps.
type event struct {
	base
	schema any
	waits  clientWait
	tool   string // the bridge's event tool, named by its status line (configure)
}

// Event returns a step that waits for the event of its name (see event);
// description tells whoever delivers it what it is.
func Event(name, description string) *Step {
	s := newStep(name, &event{})
	s.Guidance = description
	return s
}

func (k *event) name() mcptask.StepKind        { return mcptask.StepKindEvent }
func (k *event) execution() mcptask.Execution  { return mcptask.ExecClient }
func (k *event) setPayload(schema any)         { k.schema = schema }
func (k *event) wait() *clientWait             { return &k.waits }
func (k *event) acceptWebhook()                {}
func (k *event) clientSide(*StepProgress) bool { return true }
func (k *event) awaiting() mcptask.StepStatus  { return mcptask.StepAwaitingEvent }
func (k *event) missed(s *Step) string {
	return fmt.Sprintf("the event of step %q did not arrive", s.Name)
}
func (k *event) serve(*turn) string   { return "" }
func (k *event) acceptsWebhook() bool { return true }

// tools: a model performs an event with the bridge's event tool.
func (k *event) tools(o *Options) []string { return []string{o.EventTool} }

// configure: the status line names the bridge's event tool.
func (k *event) configure(o *Options) { k.tool = o.EventTool }

// invalidPayload is the -32602 refusal of an event's payload.
func invalidPayload(s *Step, format string, args ...any) error {
	return mcptask.InvalidParams("the payload of event %q %s", s.Name, fmt.Sprintf(format, args...))
}

func (k *event) check(c *checker) {
	if c.bodyOf != nil {
		// A delivery names a step of the workflow; the records a
		// container keeps have none of their own to take it.
		c.add("an event step cannot be the body of %s step %q: a delivery reaches the workflow's own steps, not the runs of a body; make the event a step of the workflow (before the %s, or in a workflow the %s starts as a child)", c.bodyOf.Kind(), c.bodyOf.Name, c.bodyOf.Kind(), c.bodyOf.Kind())
	}
	if k.schema != nil {
		if _, err := json.Marshal(k.schema); err != nil {
			c.add("the payload schema cannot be encoded: %v", err)
		}
	}
	c.wait(&k.waits)
	if k.waits.policy() == TimeoutServer && k.waits.max > 0 {
		c.add("an event has no tool the server could call when its wait runs out: use TimeoutFail or TimeoutSkip")
	}
}

func (k *event) status(s *Step, sp *StepProgress) (string, rank) {
	if sp.Status != mcptask.StepAwaitingEvent {
		return "", rankNone
	}
	return eventMessage(s, k.tool), rankWaiting
}

// eventMessage is the status line of a workflow waiting for an event: it
// names first what every client can do, whatever its dialect (the event
// tool, the webhook; the core dialect has no tasks/update), then the
// extension's input request.
func eventMessage(s *Step, tool string) string {
	if tool == "" {
		tool = DefaultEventTool
	}
	msg := fmt.Sprintf("waiting for event %q", s.Name)
	if s.Guidance != "" {
		msg += " (" + oneLine(s.Guidance) + ")"
	}
	return msg + fmt.Sprintf(": deliver it with tool %q or the task's webhook (an extension-dialect client may answer the task's input request with tasks/update)", tool)
}

func (k *event) entry(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep) {
	if k.schema != nil {
		rs.Payload, _ = json.Marshal(k.schema)
	}
	rs.Webhook = v.webhook(s.Name)
	what := "an event"
	if s.Guidance != "" {
		what = trimDot(oneLine(s.Guidance))
	}
	if sp.Status != mcptask.StepAwaitingEvent {
		rs.Do = fmt.Sprintf("waits for %s once the steps before it are done (one delivered earlier is kept until then).", what)
		return
	}
	// A person's decision: a model asks the user and delivers the answer
	// with the event tool; a program may answer the task's input request
	// (tasks/update), an outside system POST to the webhook.
	rs.Do = fmt.Sprintf("waits for a person's decision: %s", what)
	rs.Call = &handoff.Call{Tool: v.b.opts.EventTool, Person: true, Fill: payloadFill(k.schema), Arguments: map[string]json.RawMessage{
		mcptask.ArgTaskID: marshal(v.t.ID), "event": marshal(s.Name)}}
}

// inputRequest is the elicitation form tasks/get lists while the event
// is awaited (extension dialect).
func (k *event) inputRequest(s *Step, sp *StepProgress) json.RawMessage {
	if sp.Status != mcptask.StepAwaitingEvent {
		return nil
	}
	schema := k.schema
	if schema == nil {
		schema = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return marshal(map[string]any{
		"method": "elicitation/create",
		"params": map[string]any{"mode": "form", "message": question(s), "requestedSchema": schema},
	})
}

// question is what an input request asks: a host that runs tasks shows it
// to a person (Claude Code's question card), so it names the decision,
// not the ways to deliver it (the status line does).
func question(s *Step) string {
	what := "a decision"
	if s.Guidance != "" {
		what = trimDot(oneLine(s.Guidance))
	}
	return fmt.Sprintf("The workflow waits for your decision (event %q): %s.", s.Name, what)
}

// deliver takes a payload (or a declined input request): the event ends
// now when the workflow waits for it, or is kept for when it does.
func (k *event) deliver(d *delivery) error {
	if !d.declined() {
		if err := k.checkPayload(d.s, d.payload); err != nil {
			return err
		}
	}
	return d.commit(func(p *Progress, sp *StepProgress, now time.Time) (bool, error) {
		if settled, err := d.settled(p, sp); settled {
			return false, err
		}
		switch {
		case d.reached(p):
			k.arrive(p, d.s, sp, d.payload, d.by, d.skipReason(), now)
			return true, nil
		case sp.Early != nil && sp.Early.Skip == d.skipReason() && sameJSON(sp.Early.Payload, d.payload):
			return false, nil // kept already
		case sp.Early != nil:
			return false, d.notWaiting(fmt.Sprintf("an earlier delivery (%s) is kept for it already, to be delivered when the workflow reaches it; an event is delivered once", sp.Early.At.UTC().Format(time.RFC3339)))
		}
		sp.Early = &Early{Payload: compact(d.payload), By: d.by, At: now, Skip: d.skipReason()}
		d.kept = true
		return true, nil
	})
}

// onReach delivers an event that arrived before the workflow reached the
// step.
func (k *event) onReach(p *Progress, s *Step, sp *StepProgress, now time.Time) bool {
	if sp.Early == nil {
		return false
	}
	e := sp.Early
	sp.Early = nil
	k.arrive(p, s, sp, e.Payload, e.By, e.Skip, now)
	return true
}

// arrive ends the event: completed with payload as its output, or
// skipped for the reason skip.
func (k *event) arrive(p *Progress, s *Step, sp *StepProgress, payload json.RawMessage, by, skip string, now time.Time) {
	sp.end(ReasonClient, by, now, skip)
	sp.ReachedAt, sp.Deadline = nil, nil
	if skip != "" {
		sp.Status, sp.SkipReason = mcptask.StepSkipped, skip
		return
	}
	sp.Status, sp.CompletedBy = mcptask.StepCompleted, by
	p.Outputs[s.binding()] = compact(payload)
}

// checkPayload refuses a payload that is not a JSON object, or does not
// match the event's schema.
func (k *event) checkPayload(s *Step, payload json.RawMessage) error {
	var v any
	if err := json.Unmarshal(payload, &v); err != nil {
		return invalidPayload(s, "is not JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return invalidPayload(s, "must be a JSON object")
	}
	for _, f := range payloadFill(k.schema) {
		if sent, ok := m[f.Name]; ok && f.Under != "" && echoed(marshal(sent), marshal("<"+f.Description+">"), f) {
			return invalidPayload(s, "has field %q still holding the handoff's placeholder %s: put %s there (%s)", f.Name, marshal(sent), article(f.Type), f.Description)
		}
	}
	if err := matchSchema(k.schema, v); err != nil {
		return invalidPayload(s, "does not match its schema: %v", err)
	}
	return nil
}

// payloadFill lists the fields of an event's payload schema as values to
// fill in under "payload".
func payloadFill(schema any) []handoff.Fill {
	var sch struct {
		Properties map[string]struct {
			Type        any               `json:"type"`
			Enum        []json.RawMessage `json:"enum"`
			Description string            `json:"description"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if raw, err := json.Marshal(schema); err == nil {
		_ = json.Unmarshal(raw, &sch)
	}
	if len(sch.Properties) == 0 {
		return []handoff.Fill{{Name: "payload", Type: "object", Description: "the event's payload"}}
	}
	var out []handoff.Fill
	for _, name := range slices.Sorted(maps.Keys(sch.Properties)) {
		p := sch.Properties[name]
		out = append(out, handoff.Fill{Name: name, Under: "payload", Type: jsonType(p.Type), Enum: p.Enum,
			Description: p.Description, Optional: !slices.Contains(sch.Required, name)})
	}
	return out
}
