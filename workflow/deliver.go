package workflow

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Events and webhooks. An event step waits for its event; a step that
// accepts the webhook (Step.Webhook; every event does) may be performed by
// anyone who holds the task's webhook token: an HTTP POST of the event's
// payload, or of a client step's tool arguments, to the bridge's webhook
// handler. In the extension dialect the client delivers events with
// tasks/update: while a workflow waits only for events its task is
// input_required, and tasks/get lists them as inputRequests (elicitation
// forms of their payload schemas).

// VarWebhookToken holds a workflow task's webhook token (a reserved task
// variable: clients cannot read it with TaskVar nor write it).
const VarWebhookToken = "_workflow.webhook"

// ByWebhook says that an event was delivered, or a step performed,
// through the webhook (Attempt.By, StepProgress.CompletedBy); the server
// and the client are string(mcptask.ExecServer) and
// string(mcptask.ExecClient), the execution values as strings: who
// performed a step, where Execution says who is to.
const ByWebhook = "webhook"

// ErrNotWaiting is matched by the error of a delivery to a step that does
// not wait for it now (not reached yet, already done with another
// payload, or not one an outsider performs).
var ErrNotWaiting = errors.New("workflow: the step does not wait for a delivery")

// newWebhookToken returns 128 random bits, hex encoded.
func newWebhookToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// hasWebhook reports whether some step of w accepts the webhook.
func (w *Definition) hasWebhook() bool {
	for _, s := range w.flat() {
		if s.kind.acceptsWebhook() {
			return true
		}
	}
	return false
}

// How a delivery arrived (delivery.via).
const (
	viaAPI     = "api"     // Bridge.Deliver
	viaWebhook = "webhook" // the webhook handler
	viaUpdate  = "update"  // tasks/update answering an input request
	viaTool    = "tool"    // the event tool (a model)
)

// delivery is one outsider's delivery to step s of a workflow task: an
// event's payload (or a declined input request), or the arguments of a
// client step performed through the webhook. The step's kind decides
// what it means (kind.deliver) with the helpers below.
type delivery struct {
	ctx     context.Context
	in      *instance
	s       *Step
	payload json.RawMessage
	by      string // ByWebhook, string(mcptask.ExecClient)
	via     string
	decline string // a declined input request: the skip reason

	kept    bool                // the kind kept it for when the workflow reaches the step
	result  *mcp.CallToolResult // a client step performed: its tool's result
	failure string              // the kind's change fails the workflow with this reason
}

func (d *delivery) declined() bool     { return d.decline != "" }
func (d *delivery) skipReason() string { return d.decline }

// notHere refuses a delivery to a step no outsider performs.
func (d *delivery) notHere() error {
	return fmt.Errorf("step %q is a %s step, which only the server performs: %w", d.s.Name, d.s.Kind(), ErrNotWaiting)
}

// notWaiting refuses a delivery the step does not wait for now.
func (d *delivery) notWaiting(why string) error {
	return fmt.Errorf("step %q of workflow task %s does not wait for a delivery now (%s): %w", d.s.Name, d.in.id, why, ErrNotWaiting)
}

// settled reports a delivery that changes nothing of step record sp: a
// payload delivered already (true, nil: said again, acknowledged), or a
// step that has ended (true, and why it does not wait).
func (d *delivery) settled(p *Progress, sp *StepProgress) (bool, error) {
	switch {
	case sp.Status == mcptask.StepCompleted && !d.declined() && sameJSON(p.Outputs[d.s.binding()], d.payload):
		return true, nil // delivered already
	case sp.ended():
		return true, d.notWaiting(fmt.Sprintf("it is %s", sp.Status))
	}
	return false, nil
}

// reached reports whether the workflow waits for the client on the step
// now (progress p).
func (d *delivery) reached(p *Progress) bool {
	wf := d.in.wf
	i := wf.index[d.s.Name]
	return reached(wf, p, i) && clientSide(d.s, &p.Steps[i])
}

// commit applies change to the step's record in one conditional write
// (the task is then held by a client); change reports whether it changed
// anything. The workflow goes on from there (unless the delivery was only
// kept).
func (d *delivery) commit(change func(p *Progress, sp *StepProgress, now time.Time) (bool, error)) error {
	in, wf := d.in, d.in.wf
	changed := false
	var told []StepEvent // the attempt it records, told after the write
	err := in.commitTurn(context.WithoutCancel(d.ctx), func(p *Progress) (store.Update, error) {
		told = nil
		sp := &p.Steps[wf.index[d.s.Name]]
		now := in.b.engine.Now()
		ok, err := change(p, sp, now)
		if err != nil || !ok {
			if err == nil {
				err = errUnchanged
			}
			return store.Update{}, err
		}
		changed = true
		if !d.kept {
			markReached(wf, p, now)
			p.refresh()
			p.PauseReason = pauseReason(wf, p)
			if e, ok := observed(in.id, p, wf.slotAt(p, d.s.Name), nil); ok {
				told = append(told, e)
			}
		}
		u := store.Update{Labels: map[string]string{LabelTouched: "1"}}
		if d.failure != "" {
			p.PauseReason = d.failure
			closeRecords(p, now, "the workflow failed before it ended", false)
			raw, err := in.b.resultJSON(in.task, p, mcptask.StatusFailed, d.failure)
			if err != nil {
				return store.Update{}, err
			}
			u.Status, u.StatusMessage, u.Result = mcptask.StatusFailed, &d.failure, raw
		}
		return u, nil
	})
	switch {
	case errors.Is(err, errUnchanged):
		return nil
	case errors.Is(err, errEnded):
		if !d.declined() && in.b.delivered(d.ctx, in.id, d.s, d.payload) {
			return nil // delivered already, and the workflow ended since
		}
		return fmt.Errorf("workflow task %s has ended: %w", in.id, ErrNotWaiting)
	case err != nil:
		return err
	}
	in.b.tell(told)
	if changed && !d.kept {
		in.kick("")
	}
	return nil
}

// delivered reports whether task id recorded step s with payload as its
// output.
func (b *Bridge) delivered(ctx context.Context, id string, s *Step, payload json.RawMessage) bool {
	t, err := b.engine.Task(context.WithoutCancel(ctx), id)
	if err != nil {
		return false
	}
	p, err := decodeProgress(t)
	if err != nil {
		return false
	}
	sp := p.step(s.Name)
	return sp != nil && sp.Status == mcptask.StepCompleted && sameJSON(p.Outputs[s.binding()], payload)
}

// perform performs the client step of the delivery (which accepts the
// webhook when webhook is set) with the payload as its tool's arguments,
// as a continuation would.
func (d *delivery) perform(webhook bool) error {
	in, s := d.in, d.s
	if !webhook || d.via == viaUpdate {
		return fmt.Errorf("step %q does not accept the webhook: %w", s.Name, ErrNotWaiting)
	}
	b := in.b
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: toolOf(s), Arguments: d.payload,
		Meta: mcp.Meta{mcptask.MetaTaskID: in.id, mcptask.MetaIdempotencyKey: idempotencyKey(in.id, s.Name)}}}
	if t, _ := in.known(); t != nil {
		if refused := in.prepareCall(d.ctx, t, req, s.Name); refused != nil {
			return mcptask.InvalidParams("%s", refused.Content[0].(*mcp.TextContent).Text)
		}
	}
	// The arguments, with the values the server binds added, are checked
	// against the tool's input schema before anything runs or is recorded:
	// the tool would refuse them only after its attempt was counted.
	if err := b.engine.CheckToolArguments(toolOf(s), req.Params.Arguments); err != nil {
		return err
	}
	at, replay, err := in.claimStep(d.ctx, nil, req, s.Name) // the task stepOf read
	switch {
	case err != nil:
		return fmt.Errorf("%w: %v", ErrNotWaiting, err)
	case replay != nil:
		d.result = b.answer(d.ctx, in, at, replay, reader{d: mcptask.Core}, true)
		return nil
	case at.path != s.Name:
		in.releaseStep(at.path)
		return fmt.Errorf("the webhook names step %q, but step %q is the one waiting for tool %q: %w", s.Name, at.path, toolOf(s), ErrNotWaiting)
	}
	defer in.releaseStep(at.path)
	tctx, untrack := b.engine.Track(d.ctx, in.id)
	res, callErr := b.engine.RunTool(withStep(tctx, in.id, at.path, in.nextAttempt(at.path), ByWebhook), req)
	untrack()
	if callErr != nil {
		return callErr
	}
	recorded, err := in.recordClient(context.WithoutCancel(d.ctx), at, req, res, nil, ByWebhook)
	if err != nil {
		return err
	}
	if recorded != nil {
		d.result = b.answer(d.ctx, in, at, recorded, reader{d: mcptask.Core}, true)
		return nil
	}
	if !res.IsError {
		in.kick("")
	}
	d.result = b.answer(d.ctx, in, at, res, reader{d: mcptask.Core}, false)
	return nil
}

// Deliver records an outsider's delivery to step step of workflow task id
// (by says who: ByWebhook or string(mcptask.ExecClient)): an event's payload (a JSON object
// matching the step's payload schema, which becomes its output), or the
// arguments of a client step that accepts the webhook, whose tool then
// runs. An event delivered before the workflow awaits it is kept and
// delivered when it does (the answer says so). A delivery that repeats the
// recorded one is answered as done; nothing is recorded on a refusal: an
// unknown task or step (store.ErrNotFound), a step that does not take a
// delivery now (ErrNotWaiting), a payload that does not match (-32602).
func (b *Bridge) Deliver(ctx context.Context, id, step string, payload json.RawMessage, by string) (*mcp.CallToolResult, error) {
	res, _, err := b.deliver(ctx, id, step, payload, by, viaAPI, reader{d: mcptask.Core})
	return res, err
}

// deliver is Deliver arriving via via; kept reports an event kept for
// later.
func (b *Bridge) deliver(ctx context.Context, id, step string, payload json.RawMessage, by, via string, rd reader) (res *mcp.CallToolResult, kept bool, err error) {
	in, s, err := b.stepOf(ctx, id, step)
	if err != nil {
		return nil, false, err
	}
	defer b.done(in)
	d := &delivery{ctx: ctx, in: in, s: s, payload: payload, by: by, via: via}
	if err := s.kind.deliver(d); err != nil {
		return nil, false, err
	}
	if d.result != nil {
		return d.result, false, nil
	}
	cur, p := b.settle(ctx, id)
	return b.eventResult(cur, p, s, d.kept, rd), d.kept, nil
}

// stepOf returns the instance of workflow task id (release it with done)
// and its step named step.
func (b *Bridge) stepOf(ctx context.Context, id, step string) (*instance, *Step, error) {
	t, err := b.engine.Task(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if t.Labels[taskrouter.LabelKind] != taskrouter.KindWorkflow {
		return nil, nil, fmt.Errorf("task %s is not a workflow task: %w", id, store.ErrNotFound)
	}
	in := b.use(id)
	wf, verr := in.refresh(ctx, t)
	if verr != nil {
		b.done(in)
		return nil, nil, fmt.Errorf("%w: %v", ErrNotWaiting, verr)
	}
	s := wf.byName[step]
	if s == nil {
		b.done(in)
		return nil, nil, fmt.Errorf("workflow %q has no step %q: %w", wf.def.Name, step, store.ErrNotFound)
	}
	return in, s, nil
}

// inputRequests lists the input requests of the steps workflow task t
// waits on (events, as elicitation forms) keyed by step name, for the
// extension's tasks/get (see taskrouter.InputKind).
func (b *Bridge) inputRequests(t *store.Task) map[string]json.RawMessage {
	p, err := decodeProgress(t)
	if err != nil {
		return nil
	}
	wf, err := b.compiledFor(t, p)
	if err != nil {
		return nil
	}
	out := map[string]json.RawMessage{}
	for i, s := range wf.steps {
		if req := s.kind.inputRequest(s, &p.Steps[i]); req != nil {
			out[s.Name] = req
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// answerInputs takes the client's tasks/update answers for workflow task
// t: each key names a step, each value the result of the step's input
// request, which its kind reads (kind.answer): an elicitation result for
// an event ("accept" delivers its content as the step's payload, and one
// the workflow has not reached yet is kept for when it does; "decline"
// and "cancel" skip the step, and the steps that need its output), a
// sampling result for a sampling step. Keys that name no step taking an
// answer are ignored, as the extension asks of unknown keys (an answer
// may repeat one another replica recorded).
func (b *Bridge) answerInputs(ctx context.Context, t *store.Task, responses map[string]json.RawMessage) error {
	for _, key := range slices.Sorted(maps.Keys(responses)) {
		if !json.Valid(responses[key]) {
			return mcptask.InvalidParams("inputResponses[%q] is not JSON", key)
		}
		if err := b.respond(ctx, t.ID, key, responses[key]); err != nil {
			return err
		}
	}
	return nil
}

// respond takes one answer (raw, the result of the input request) to an
// input request of step key of workflow task id, as the step's kind reads
// it. A key that names no step taking an answer now is no error (the
// extension ignores unknown keys).
func (b *Bridge) respond(ctx context.Context, id, key string, raw json.RawMessage) error {
	in, s, err := b.stepOf(ctx, id, key)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrNotWaiting) {
		return nil
	}
	if err != nil {
		return err
	}
	defer b.done(in)
	d := &delivery{ctx: ctx, in: in, s: s, by: string(mcptask.ExecClient), via: viaUpdate}
	if err := s.kind.answer(d, key, raw); err != nil {
		return err
	}
	if err := s.kind.deliver(d); err != nil && !errors.Is(err, ErrNotWaiting) {
		return err
	}
	return nil
}

// elicited reads raw, an elicitation result answering the input request
// of inputResponses[key], into d: "accept" delivers its content (an
// object; none is {}), "decline" and "cancel" decline.
func (d *delivery) elicited(key string, raw json.RawMessage) error {
	var res struct {
		Action  string          `json:"action"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return mcptask.InvalidParams("inputResponses[%q] is not an elicitation result: %v", key, err)
	}
	switch res.Action {
	case "accept":
		d.payload = res.Content
		if len(d.payload) == 0 || string(d.payload) == "null" {
			d.payload = json.RawMessage("{}")
		}
	case "decline", "cancel":
		d.decline = fmt.Sprintf("the client answered %q to %q", res.Action, d.s.Name)
	default:
		return mcptask.InvalidParams("inputResponses[%q]: action %q is none of accept, decline, cancel", key, res.Action)
	}
	return nil
}

// eventResult is the answer to a delivered event: where the workflow
// stands now (the handoff, and in _meta the summary a continuation's
// reply carries, mcptask.MetaWorkflow).
func (b *Bridge) eventResult(t *store.Task, p *Progress, s *Step, kept bool, rd reader) *mcp.CallToolResult {
	lead := fmt.Sprintf("Event %q is recorded on workflow task %s.", s.Name, t.ID)
	if kept {
		lead = fmt.Sprintf("Event %q arrived before workflow task %s waits for it: it is kept, and delivered when the workflow reaches step %q.", s.Name, t.ID, s.Name)
	}
	res, err := b.toolResult(t, p, rd, lead)
	if err != nil {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: lead}}}
	}
	res.Meta[mcptask.MetaWorkflow] = b.summary(t, p, s.Name, false) // as a continuation's reply carries it
	res.StructuredContent = nil                                     // the handoff is in _meta, as a continuation's is
	return res
}

// maxWebhookBody bounds a webhook's body.
const maxWebhookBody = 1 << 20

// WebhookHandler serves the workflow webhooks: POST .../{task id}/{step},
// the last two segments of the path, so it works mounted under any prefix
// as it is (mux.Handle("/hooks/", h)) or behind http.StripPrefix, with
// the task's webhook
// token as "Authorization: Bearer TOKEN" (or the header
// X-Taskbridge-Token, or the query parameter token), and a JSON object as
// the body: an event's payload, or the arguments of a client step that
// accepts the webhook. The answer is JSON: the task id, the step, the
// task's status after the delivery and its status message (200; 202 with
// "kept": true for an event the workflow has not reached yet, which is
// kept and delivered when it does); or an
// error: 400 (a body that is not one JSON object, or that does not match:
// a client step's tool's input schema, an event's payload schema; nothing
// is recorded, the tool does not run), 401 (bad token), 404 (unknown
// task or step), 405 (not POST), 409 (the step does not wait for it now).
// The token of a task is in its handoff (each webhook step's webhook
// field).
func (b *Bridge) WebhookHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply := func(code int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(v)
		}
		fail := func(code int, format string, args ...any) {
			reply(code, map[string]string{"error": fmt.Sprintf(format, args...)})
		}
		// refused answers a delivery refused before or while it ran.
		refused := func(err error) {
			var je *jsonrpc.Error
			switch {
			case errors.Is(err, store.ErrNotFound):
				fail(http.StatusNotFound, "%v", err)
			case errors.Is(err, ErrNotWaiting):
				fail(http.StatusConflict, "%v", err)
			case errors.As(err, &je) && je.Code == mcptask.CodeInvalidParams:
				fail(http.StatusBadRequest, "%s; nothing was recorded", je.Message)
			default:
				fail(http.StatusInternalServerError, "%v", err)
			}
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			fail(http.StatusMethodNotAllowed, "POST the payload")
			return
		}
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if len(parts) < 2 || parts[len(parts)-2] == "" || parts[len(parts)-1] == "" {
			fail(http.StatusNotFound, "the path ends in /{task id}/{step}")
			return
		}
		id, step := parts[len(parts)-2], parts[len(parts)-1]
		t, err := b.engine.Task(r.Context(), id)
		if err != nil || t.Labels[taskrouter.LabelKind] != taskrouter.KindWorkflow {
			fail(http.StatusNotFound, "no workflow task %q", id)
			return
		}
		var want string
		_ = json.Unmarshal(t.Variables[VarWebhookToken], &want)
		got := webhookToken(r)
		if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			fail(http.StatusUnauthorized, "the webhook token of task %s is missing or wrong", id)
			return
		}
		body, code, why := webhookBody(r)
		if code != 0 {
			fail(code, "%s", why)
			return
		}
		res, kept, err := b.deliver(r.Context(), id, step, body, ByWebhook, viaWebhook, reader{d: mcptask.Core})
		if err != nil {
			refused(err)
			return
		}
		cur, _ := b.engine.Task(context.WithoutCancel(r.Context()), id)
		out := map[string]any{"taskId": id, "step": step, "isError": res.IsError}
		if cur != nil {
			out["status"], out["statusMessage"] = cur.Status, cur.StatusMessage
		}
		code = http.StatusOK
		if kept {
			out["kept"] = true // an event before its step: delivered when the workflow reaches it
			code = http.StatusAccepted
		}
		reply(code, out)
	})
}

// webhookBody reads a webhook's body: one JSON object (an empty body is
// {}), checked before anything runs or is recorded, as a client step's
// tool would refuse other arguments only after its attempt was counted;
// otherwise the HTTP status and why.
func webhookBody(r *http.Request) (body []byte, code int, why string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
	switch {
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Sprintf("reading the body: %v", err)
	case len(body) > maxWebhookBody:
		return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", maxWebhookBody)
	case len(strings.TrimSpace(string(body))) == 0:
		body = []byte("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return nil, http.StatusBadRequest, "the body must be one JSON object (an event's payload, or a step's tool arguments); nothing was recorded"
	}
	return body, 0, ""
}

// webhookToken reads the token a webhook request presents.
func webhookToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return strings.TrimSpace(strings.TrimPrefix(h, "Bearer "))
	}
	if h := r.Header.Get("X-Taskbridge-Token"); h != "" {
		return strings.TrimSpace(h)
	}
	return r.URL.Query().Get("token")
}
