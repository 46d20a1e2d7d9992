package workflow

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A sampling step is performed by the client's own model: when its turn
// comes, the server asks the client with sampling/createMessage, the
// prompt being the step's text with the values it binds filled in
// ({{name}} for Bind("name", ...)), and the model's reply is the step's
// output: {"text", "model", "stopReason"}, or with ReturnsJSON the JSON
// object the reply holds. How the request reaches the client depends on
// the client (Asked.Via, recorded in the step's record):
//
//   - "task": a core-dialect (2025-11-25) client that declared
//     capabilities.tasks.requests.sampling.createMessage gets a
//     task-augmented request; it answers with a task of its own, whose id
//     is recorded (Asked.ClientTask) before the server follows it with
//     tasks/get and tasks/result on the client.
//   - "request": a core-dialect client that declared sampling gets a
//     plain request.
//   - "input": a client of the tasks extension (2026-07-28, whose
//     protocol forbids requests from the server) gets an input request of
//     the workflow task: the task is input_required, tasks/get lists the
//     request under the step's name, and tasks/update answers it.
//   - "handoff": a client that declared no sampling (a host whose model
//     reads the handoff) is told in the handoff to write the text itself
//     and deliver it with the event tool; so is any client once the server
//     gave up asking it (the step's failure policy HandToClient; with
//     FailsWorkflow the workflow fails instead).
//
// What survives a restart of the server: an input request is in the
// progress (tasks/get lists it again, and an answer is taken whenever it
// comes); a handoff is too. A request in flight is asked again when the
// step runs again (recorded "restart"): a task-augmented one asks the
// client for its recorded task first (tasks/get), on whichever connection
// of the client names the workflow task next, and follows it to its
// result, asking anew only when the client does not know the task (a
// client that keeps its tasks across its own restarts, such as
// client.Receiver with a store, loses no answer). A plain request's
// answer is lost with the connection: it is asked again.
//
// Who the client is: the connection whose request named the workflow task
// last (the prompt that started it, a continuation, tasks/get, ...; see
// taskrouter.Peer). A step that finds none waits for one a while
// (peerWait), then fails the attempt (retried as its policy says).
// Sampling steps are retried by default (DefaultSampleRetry): a failed
// attempt is a client that could not be reached; a client's own refusal
// (a JSON-RPC error) is not retried.

// The ways a step that asks the client reaches it (Asked.Via).
const (
	// AskViaTask: a task-augmented request; the client runs it as a task
	// of its own (core dialect).
	AskViaTask = "task"
	// AskViaRequest: a plain request (core dialect).
	AskViaRequest = "request"
	// AskViaInput: an input request of the workflow task, answered with
	// tasks/update (extension dialect).
	AskViaInput = "input"
	// AskViaHandoff: the client cannot be asked; the handoff tells its
	// model (or, for a question, the user) to perform the step with the
	// event tool.
	AskViaHandoff = "handoff"
)

// DefaultSampleRetry is the retry policy of a sampling step or a question
// without one of their own: three attempts, 500ms then 1s apart.
var DefaultSampleRetry = RetryPolicy{MaxAttempts: 3, Backoff: 500 * time.Millisecond, MaxBackoff: 5 * time.Second}

// DefaultMaxTokens is the maxTokens of a sampling request without
// MaxTokens.
const DefaultMaxTokens = 1024

// peerWait bounds how long an attempt of a step that asks the client
// waits for a connection of the client (see taskrouter.Peers.Await): after
// a restart the client has to name the workflow task again; an HTTP
// client opens its stream for requests after it initialized.
const peerWait = 10 * time.Second

// maxPromptRunes bounds the prompt the handoff's prose quotes (the input
// request and the JSON hold it whole).
const maxPromptRunes = 4000

// sample is the kind of Sample steps.
type sample struct {
	askKind
	system    string
	maxTokens int
	json      bool
	schema    any // what the JSON reply must match (ReturnsJSON)
}

// Sample returns a step the client's own model performs: prompt, with
// {{name}} replaced by the value Bind("name", source) binds (a string as
// it is, any other value as JSON), is sent to the client as
// sampling/createMessage, and the model's reply is the step's output,
// {"text", "model", "stopReason"} (see the package's sampling steps, and
// ReturnsJSON).
func Sample(name, prompt string) *Step {
	k := &sample{}
	k.askKind = newAskKind(k, mcptask.MethodSampling, prompt)
	return newStep(name, k)
}

// The builder methods of sampling steps.
type sampler interface {
	setSystem(text string)
	setMaxTokens(n int)
	setJSON(schema any)
}

// SystemPrompt sets the system prompt of a sampling step's request.
func (s *Step) SystemPrompt(text string) *Step {
	return s.sampling("SystemPrompt", func(k sampler) { k.setSystem(text) })
}

// MaxTokens bounds the reply of a sampling step's request (the request's
// maxTokens; DefaultMaxTokens without it).
func (s *Step) MaxTokens(n int) *Step {
	return s.sampling("MaxTokens", func(k sampler) { k.setMaxTokens(n) })
}

// ReturnsJSON makes a sampling step's output the JSON object the model's
// reply holds, matching schema when it is not nil (a JSON Schema): the
// prompt asks for it, and a reply without one fails the attempt (retried
// as the step's policy says). Later steps read its fields with
// StepOutput(step, field).
func (s *Step) ReturnsJSON(schema any) *Step {
	return s.sampling("ReturnsJSON", func(k sampler) { k.setJSON(schema) })
}

// sampling applies set to the step's kind when it is a sampling step, and
// records builder method's misuse otherwise.
func (s *Step) sampling(method string, set func(k sampler)) *Step {
	return on(s, method, "only a sampling step asks a model", set)
}

func (k *sample) setSystem(text string) { k.system = text }
func (k *sample) setMaxTokens(n int)    { k.maxTokens = n }
func (k *sample) setJSON(schema any)    { k.json, k.schema = true, schema }

func (k *sample) name() mcptask.StepKind { return mcptask.StepKindSampling }

func (k *sample) print() any {
	return printed{Args: k.printArgs(), Extra: map[string]any{"method": k.method, "text": k.text, "system": k.system,
		"maxTokens": k.maxTokens, "json": k.json, "schema": k.schema}}
}

func (k *sample) check(c *checker) {
	k.checkAsk(c)
	if k.maxTokens < 0 {
		c.add("MaxTokens is negative (%d)", k.maxTokens)
	}
	if k.schema != nil {
		if err := checkObjectSchema(k.schema); err != nil {
			c.add("the schema of ReturnsJSON %v", err)
		}
	}
}

// params are the sampling request's params for the filled-in prompt.
func (k *sample) params(text string) map[string]any {
	if k.json {
		text += "\n\nAnswer with one JSON object and nothing else."
		if k.schema != nil {
			text += " It must match this JSON Schema: " + string(marshal(k.schema))
		}
	}
	p := map[string]any{
		"messages":  []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": text}}},
		"maxTokens": cmp.Or(k.maxTokens, DefaultMaxTokens),
	}
	if k.system != "" {
		p["systemPrompt"] = k.system
	}
	return p
}

// result reads a sampling result (CreateMessageResult, whose content may
// be one block or a list) into the step's output.
func (k *sample) result(raw json.RawMessage) (json.RawMessage, string, error) {
	var res struct {
		Content    json.RawMessage `json:"content"`
		Model      string          `json:"model"`
		StopReason string          `json:"stopReason"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, "", fmt.Errorf("it is not a sampling result: %v", err)
	}
	text, err := sampledText(res.Content)
	if err != nil {
		return nil, "", err
	}
	if k.json {
		out, err := jsonReply(text, k.schema)
		return out, "", err
	}
	out := map[string]any{"text": text}
	if res.Model != "" {
		out["model"] = res.Model
	}
	if res.StopReason != "" {
		out["stopReason"] = res.StopReason
	}
	return marshal(out), "", nil
}

// payload is the JSON Schema of what the event tool delivers for the step
// (its output): the text, or the JSON object the step returns.
func (k *sample) payload() any {
	if k.json {
		if k.schema != nil {
			return k.schema
		}
		return map[string]any{"type": "object"}
	}
	return map[string]any{"type": "object", "required": []string{"text"}, "properties": map[string]any{
		"text": map[string]any{"type": "string", "description": "your answer to the prompt"}}}
}

func (k *sample) words() askWords {
	return askWords{what: "sampling", who: "the client's model", capability: "sampling", cannot: "your client cannot be asked"}
}

// doText is what the handoff tells a model to do about the step when it
// performs it (why: why the client is not asked).
func (k *sample) doText(prompt, why string) string {
	what := "the answer to this prompt"
	if k.json {
		what = "a JSON object (the payload) answering this prompt"
	}
	if why != "" {
		why += ", so "
	}
	return fmt.Sprintf("is yours to write: %swrite %s yourself (do not ask the user): %s", why, what, quotePrompt(prompt))
}

func (k *sample) person() bool { return false }

// ---- what sampling steps and questions share ----

// asker is a kind that asks the client (a sampling step, a question): what
// it asks and how it reads the answer.
type asker interface {
	kind
	// params are the request's params for the filled-in text.
	params(text string) map[string]any
	// result reads the client's result into the step's output, or why the
	// client declined (a final failure), or why it does not do (a failed
	// attempt).
	result(raw json.RawMessage) (out json.RawMessage, declined string, err error)
	// payload is the JSON Schema of what the event tool delivers for the
	// step.
	payload() any
	// words name what the step asks.
	words() askWords
	// doText is the handoff's sentence for a model that performs the
	// step itself, given the filled-in text and why the client is not
	// asked.
	doText(text, why string) string
	// person reports whether a person answers (the model asks the user).
	person() bool
}

// askWords name what a step that asks the client asks, in its messages.
type askWords struct {
	what       string // "sampling", "a question"
	who        string // who answers: "the client's model", "the user"
	capability string // the client capability it needs: "sampling", "elicitation"
	cannot     string // why a client without it does not do: "your client cannot be asked"
}

// clientAsk is what sampling steps and questions share: the request's
// method and text, and a tool call's bindings (the text's values), retry
// and failure policies, client wait and attempt timeout.
type clientAsk struct {
	toolCall
	method string // mcptask.MethodSampling, mcptask.MethodElicit
	text   string // the prompt or message, with {{name}} for bound values
}

// askKind is a kind that asks the client: the contract's methods, for
// the asker it is part of (self).
type askKind struct {
	base
	clientAsk
	self asker
}

// newAskKind is the askKind of self, which asks method with text.
func newAskKind(self asker, method, text string) askKind {
	a := clientAsk{toolCall: newCall(""), method: method, text: text}
	a.retryable, a.retry = true, DefaultSampleRetry
	a.perform = a.performFor(self)
	return askKind{clientAsk: a, self: self}
}

func (k *askKind) reads() []read                    { return k.callReads() }
func (k *askKind) acceptsWebhook() bool             { return false }
func (k *askKind) tools(o *Options) []string        { return []string{o.EventTool} }
func (k *askKind) clientSide(sp *StepProgress) bool { return askedClient(sp) }
func (k *askKind) missed(s *Step) string            { return k.missedText(s, k.self) }
func (k *askKind) serve(x *turn) string             { return k.serveAsk(x, k.self) }
func (k *askKind) deliver(d *delivery) error        { return k.deliverAsk(d, k.self) }
func (k *askKind) status(s *Step, sp *StepProgress) (string, rank) {
	return k.statusAsk(s, sp, k.self)
}
func (k *askKind) entry(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep) {
	k.entryAsk(v, s, sp, rs, k.self)
}
func (k *askKind) inputRequest(_ *Step, sp *StepProgress) json.RawMessage { return askedRequest(sp) }
func (k *askKind) answer(d *delivery, key string, raw json.RawMessage) error {
	return k.answerAsk(d, key, raw, k.self)
}

// checkAsk checks what sampling steps and questions share: the text and
// the values it names, their sources, the policies.
func (a *clientAsk) checkAsk(c *checker) {
	if !slices.Contains(c.w.Steps, c.step) {
		c.add("a %s step must be a step of the workflow itself: it cannot be a group's member or a for-each's or a loop's body", c.step.Kind())
	}
	names, err := templateNames(a.text)
	switch {
	case strings.TrimSpace(a.text) == "":
		c.add("its text is empty: say what to ask")
	case err != nil:
		c.add("its text %v", err)
	}
	for _, n := range names {
		if _, ok := a.args[n]; !ok {
			c.add("its text names {{%s}}, which is not bound: bind it with Bind(%q, ...)", n, n)
		}
	}
	for _, r := range a.callReads() {
		if !slices.Contains(names, r.label) {
			c.add("value %q is bound but its text does not use it: write {{%s}} where it goes, or remove the binding", r.label, r.label)
		}
		if r.src.Kind == SourceClient {
			c.add("value %q is FromClient, but the server fills in the text it asks with: bind it to another source", r.label)
			continue
		}
		c.source(r.label, r.src, toolSchema{}, false)
	}
	if p := a.failurePolicy(); p != HandToClient && p != FailWorkflow {
		c.add("unknown failure policy %q: use HandToClient or FailWorkflow", p)
	}
	if a.retry.MaxAttempts < 0 || a.retry.Backoff < 0 || a.retry.MaxBackoff < 0 {
		c.add("the retry policy has a negative value")
	}
	if a.webhook {
		c.add("a %s step cannot be performed through the webhook: remove AcceptsWebhook", c.step.Kind())
	}
	c.wait(&a.waits)
	if a.waits.policy() == TimeoutServer && a.waits.max > 0 {
		c.add("when the wait runs out the server cannot perform it itself: use TimeoutFail or TimeoutSkip")
	}
}

// text resolves the step's text against p (the handoff's: values not
// there yet are named "<name>").
func (a *clientAsk) resolveText(r *resolver, p *Progress, partial bool) (string, error) {
	args, err := a.resolve(r, p, partial, false)
	if err != nil {
		return "", err
	}
	return fillTemplate(a.text, args), nil
}

// serveAsk is the step's turn: the client answers an input request, or
// its model performs the step, or the server asks the client (an
// attempt).
func (a *clientAsk) serveAsk(x *turn, self asker) string {
	sp := x.sp
	if via, why := a.route(x, self); via != "" {
		asked := &Asked{Via: via, Why: why}
		if via == AskViaInput {
			text, err := a.resolveText(x.resolver(), x.p, false)
			if err != nil {
				return x.attempt() // the attempt fails on it, as the step's policy says
			}
			params := self.params(text)
			params["_meta"] = mcptask.RelatedTaskMeta(x.r.id)
			asked.Request = marshal(map[string]any{"method": a.method, "params": params})
			sp.Status = mcptask.StepAwaitingEvent
		} else {
			sp.Status = mcptask.StepAwaitingClient
		}
		sp.Asked = asked
		startWait(x.s, sp, x.now)
		return ""
	}
	return x.attempt()
}

// missedText words a wait for the client that ran out.
func (a *clientAsk) missedText(s *Step, self asker) string {
	return fmt.Sprintf("%s did not answer step %q (%s)", self.words().who, s.Name, self.words().what)
}

// statusAsk is the status line of a step that asks the client.
func (a *clientAsk) statusAsk(s *Step, sp *StepProgress, self asker) (string, rank) {
	w := self.words()
	switch {
	case sp.Status == mcptask.StepRunning:
		how := ""
		if sp.Asked != nil && sp.Asked.Via == AskViaTask {
			how = fmt.Sprintf(", as the client's task %s", sp.Asked.ClientTask)
		}
		return fmt.Sprintf("asking %s for step %q (%s%s), attempt %d", w.who, s.Name, a.method, how, sp.Attempts), rankRunning
	case sp.HandedToClient:
		return fmt.Sprintf("step %q (%s) could not be asked of the client after %d attempt(s): %s; it is the client's to perform now, as the handoff says",
			s.Name, w.what, sp.Attempts, oneLine(sp.Error)), rankHanded
	case sp.Asked == nil:
	case sp.Asked.Via == AskViaInput && sp.Status == mcptask.StepAwaitingEvent:
		return fmt.Sprintf("waiting for %s to answer step %q (%s): answer the task's input request %q with tasks/update, or perform it as the handoff says", w.who, s.Name, a.method, s.Name), rankWaiting
	case sp.Asked.Via == AskViaHandoff && sp.Status == mcptask.StepAwaitingClient:
		return fmt.Sprintf("waiting for the client to perform step %q (%s) itself, as the handoff says: %s", s.Name, w.what, sp.Asked.Why), rankWaiting
	}
	return "", rankNone
}

// entryAsk fills the handoff entry of a step that asks the client.
func (a *clientAsk) entryAsk(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep, self asker) {
	w := self.words()
	rs.Payload = marshal(self.payload())
	if v.wf != nil {
		for _, r := range a.callReads() {
			if r.src.Kind != SourceStepOutput {
				continue
			}
			if from := v.wf.def.producer(r.src.Name); from != nil && !slices.Contains(rs.DependsOn, from.Name) {
				rs.DependsOn = append(rs.DependsOn, from.Name)
			}
		}
	}
	why := ""
	switch {
	case sp.Status == mcptask.StepRunning:
		rs.Do = fmt.Sprintf("the server is asking %s for it now (%s): your client answers that request; do not call a tool for it.", w.who, a.method)
		return
	case sp.RetryAt != nil:
		rs.Do = fmt.Sprintf("the server could not ask your client%s; it asks again at %s; nothing to do now.", errNote(sp.Error), stamp(*sp.RetryAt))
		return
	case sp.HandedToClient:
		why = fmt.Sprintf("asking your client did not succeed (%s)", trimDot(oneLine(sp.Error)))
	case sp.Asked != nil && sp.Asked.Via == AskViaHandoff:
		why = sp.Asked.Why
	case sp.Asked != nil && sp.Asked.Via == AskViaInput:
		why = ""
	default:
		rs.Do = fmt.Sprintf("once the steps before it are done, the server asks %s for it (%s); nothing to do now.", w.who, a.method)
		return
	}
	var text string
	if v.wf != nil && v.resolver != nil {
		text, _ = a.resolveText(v.resolver, v.p, true)
	}
	rs.Do = self.doText(text, why)
	if sp.Asked != nil && sp.Asked.Via == AskViaInput && !sp.HandedToClient {
		// A program answers the input request; a model in a host, which
		// has no tasks/update, performs it with the event tool.
		rs.Do += fmt.Sprintf(" (a program may instead answer the task's input request %q with tasks/update)", s.Name)
	} else {
		rs.Execution = mcptask.ExecClient
	}
	rs.Call = &handoff.Call{Tool: v.b.opts.EventTool, Person: self.person(), Fill: payloadFill(self.payload()),
		Arguments: map[string]json.RawMessage{mcptask.ArgTaskID: marshal(v.t.ID), "event": marshal(s.Name)}}
}

// answerAsk reads the client's answer to the step's input request.
func (a *clientAsk) answerAsk(d *delivery, key string, raw json.RawMessage, self asker) error {
	out, declined, err := self.result(raw)
	switch {
	case err != nil:
		return mcptask.InvalidParams("inputResponses[%q] does not answer the %s of step %q: %v", key, a.method, d.s.Name, err)
	case declined != "":
		d.decline = declined
	default:
		d.payload = out
	}
	return nil
}

// deliverAsk records what the client delivers for the step (its answer
// to the input request, or what the event tool brings): its output. A
// declined question follows the step's failure policy: the workflow fails
// (FailsWorkflow), or the step is handed to the client's model.
func (a *clientAsk) deliverAsk(d *delivery, self asker) error {
	if !d.declined() {
		var v any
		refuse := func(format string, args ...any) error {
			return mcptask.InvalidParams("the payload for step %q (%s) %s", d.s.Name, self.words().what, fmt.Sprintf(format, args...))
		}
		if err := json.Unmarshal(d.payload, &v); err != nil {
			return refuse("is not JSON: %v", err)
		}
		if _, ok := v.(map[string]any); !ok {
			return refuse("must be a JSON object")
		}
		if err := matchSchema(self.payload(), v); err != nil {
			return refuse("does not match its schema: %v", err)
		}
	}
	return d.commit(func(p *Progress, sp *StepProgress, now time.Time) (bool, error) {
		if settled, err := d.settled(p, sp); settled {
			return false, err
		}
		switch {
		case !d.reached(p):
			why := "the workflow has not reached it"
			if sp.Status == mcptask.StepRunning {
				why = "the server is asking the client for it now"
			}
			return false, d.notWaiting(why)
		case d.declined():
			sl := d.in.wf.slotAt(p, d.s.Name)
			fail(p, sl, d.by, d.decline, now)
			if a.failurePolicy() == FailWorkflow {
				d.failure = failedWorkflowMessage(d.s, d.decline)
				return true, nil
			}
			sp.Asked = &Asked{Via: AskViaHandoff, Why: d.decline}
			sp.Status = mcptask.StepAwaitingClient
			return true, nil
		}
		complete(p, d.in.wf.slotAt(p, d.s.Name), d.by, nil, &mcp.CallToolResult{StructuredContent: compact(d.payload)}, now)
		sp.ReachedAt, sp.Deadline = nil, nil
		return true, nil
	})
}
