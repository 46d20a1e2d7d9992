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

	"github.com/google/jsonschema-go/jsonschema"
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

// Who delivered an event, or performed a step through the webhook
// (Attempt.By, StepProgress.CompletedBy). ByServer and ByClient are the
// execution values (mcptask.ExecServer, mcptask.ExecClient) as strings:
// who performed a step, where Execution says who is to.
const (
	ByWebhook = "webhook"
	ByClient  = string(mcptask.ExecClient)
	ByServer  = string(mcptask.ExecServer)
)

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
		if s.Webhook || s.kind() == KindEvent {
			return true
		}
	}
	return false
}

// Deliver records the event of event step step on task id (its output is
// payload, a JSON object matching the step's payload schema), or performs
// client step step with payload as its tool's arguments when the step
// accepts the webhook, and sets off what follows. by says who delivered it
// (ByWebhook, ByClient). A delivery that repeats the recorded one is
// answered as done; nothing is recorded on a refusal: an unknown task or
// step (store.ErrNotFound), a step that does not wait for it now
// (ErrNotWaiting), a payload that does not match (-32602).
func (b *Bridge) Deliver(ctx context.Context, id, step string, payload json.RawMessage, by string) (*mcp.CallToolResult, error) {
	in, s, err := b.stepOf(ctx, id, step)
	if err != nil {
		return nil, err
	}
	defer b.done(in)
	if s.kind() == KindTool {
		return b.performByWebhook(ctx, in, s, payload)
	}
	if s.kind() != KindEvent {
		return nil, fmt.Errorf("step %q is a %s step, which only the server performs: %w", step, s.kind(), ErrNotWaiting)
	}
	if err := checkPayload(s, payload); err != nil {
		return nil, err
	}
	if err := in.endEvent(ctx, s, payload, by, ""); err != nil {
		return nil, err
	}
	cur, p := b.settle(ctx, id)
	return b.eventResult(cur, p, s), nil
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
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.task == nil || t.Version > in.task.Version {
		in.adopt(t)
	}
	if in.verr != nil {
		err := in.verr
		in.unserved(ctx)
		b.done(in)
		return nil, nil, fmt.Errorf("%w: %v", ErrNotWaiting, err)
	}
	s := in.wf.byName[step]
	if s == nil {
		b.done(in)
		return nil, nil, fmt.Errorf("workflow %q has no step %q: %w", in.wf.def.Name, step, store.ErrNotFound)
	}
	return in, s, nil
}

// endEvent ends event step s, waiting now: completed with payload as its
// output, or, when skip is set, skipped for that reason (the client
// declined it). A completion that repeats the recorded one is no error.
func (in *instance) endEvent(ctx context.Context, s *Step, payload json.RawMessage, by, skip string) error {
	b, wf := in.b, in.wf
	in.mu.Lock()
	err := in.commit(context.WithoutCancel(ctx), func(p *Progress) (store.Update, error) {
		i := wf.index[s.Name]
		sp := &p.Steps[i]
		switch {
		case skip == "" && sp.Status == StepCompleted && sameJSON(p.Outputs[s.binding()], payload):
			return store.Update{}, errUnchanged // delivered already: done
		case sp.ended() || !reached(wf, p, i) || !clientSide(s, sp):
			return store.Update{}, fmt.Errorf("step %q of workflow task %s does not wait for its event now (it is %s): %w", s.Name, in.id, sp.Status, ErrNotWaiting)
		}
		now := b.engine.Now()
		sp.end(ReasonClient, by, now, skip)
		sp.ReachedAt, sp.Deadline = nil, nil
		if skip != "" {
			sp.Status, sp.SkipReason = StepSkipped, skip
		} else {
			sp.Status, sp.CompletedBy = StepCompleted, by
			p.Outputs[s.binding()] = compact(payload)
		}
		markReached(wf, p, now)
		p.refresh()
		p.PauseReason = pauseReason(wf, p)
		emit(b.opts.Observer, in.id, p, s, nil)
		return store.Update{Labels: map[string]string{LabelTouched: "1"}}, nil
	})
	in.mu.Unlock()
	switch {
	case errors.Is(err, errUnchanged):
		return nil
	case errors.Is(err, errEnded):
		if skip == "" && in.b.delivered(ctx, in.id, s, payload) {
			return nil // delivered already, and the workflow ended since
		}
		return fmt.Errorf("workflow task %s has ended: %w", in.id, ErrNotWaiting)
	case err != nil:
		return err
	}
	in.kick("")
	return nil
}

// delivered reports whether task id recorded event s with payload.
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
	return sp != nil && sp.Status == StepCompleted && sameJSON(p.Outputs[s.binding()], payload)
}

// inputRequests lists the events workflow task t waits for as elicitation
// forms keyed by step name, for the extension's tasks/get (see
// taskrouter.InputKind).
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
		if sp := &p.Steps[i]; s.kind() != KindEvent || sp.Status != StepAwaitingEvent {
			continue
		}
		schema := s.Payload
		if schema == nil {
			schema = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		out[s.Name] = marshal(map[string]any{
			"method": "elicitation/create",
			"params": map[string]any{"mode": "form", "message": eventMessage(s), "requestedSchema": schema},
		})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// answerInputs takes the client's tasks/update answers for workflow task
// t: each key names an event step, each value is an elicitation result.
// "accept" delivers its content as the event's payload; "decline" and
// "cancel" skip the step (steps whose arguments need its output are
// skipped too). Keys that name no event waiting now are ignored, as the
// extension asks of unknown keys (an answer may repeat one another
// replica recorded).
func (b *Bridge) answerInputs(ctx context.Context, t *store.Task, responses map[string]json.RawMessage) error {
	for _, key := range slices.Sorted(maps.Keys(responses)) {
		var res struct {
			Action  string          `json:"action"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(responses[key], &res); err != nil {
			return mcptask.InvalidParams("inputResponses[%q] is not an elicitation result: %v", key, err)
		}
		in, s, err := b.stepOf(ctx, t.ID, key)
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrNotWaiting) {
			continue
		}
		if err != nil {
			return err
		}
		if s.kind() != KindEvent {
			b.done(in)
			continue
		}
		switch res.Action {
		case "accept":
			payload := res.Content
			if len(payload) == 0 || string(payload) == "null" {
				payload = json.RawMessage("{}")
			}
			if err = checkPayload(s, payload); err == nil {
				err = in.endEvent(ctx, s, payload, ByClient, "")
			}
		case "decline", "cancel":
			err = in.endEvent(ctx, s, nil, ByClient, fmt.Sprintf("the client answered %q to event %q", res.Action, s.Name))
		default:
			err = mcptask.InvalidParams("inputResponses[%q]: action %q is none of accept, decline, cancel", key, res.Action)
		}
		b.done(in)
		if err != nil && !errors.Is(err, ErrNotWaiting) {
			return err
		}
	}
	return nil
}

// eventResult is the answer to a delivered event: where the workflow
// stands now.
func (b *Bridge) eventResult(t *store.Task, p *Progress, s *Step) *mcp.CallToolResult {
	lead := fmt.Sprintf("Event %q is recorded on workflow task %s.", s.Name, t.ID)
	res, err := b.toolResult(t, p, mcptask.Core, lead)
	if err != nil {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: lead}}}
	}
	return res
}

// checkPayload refuses an event payload that is not a JSON object, or
// does not match the step's payload schema.
func checkPayload(s *Step, payload json.RawMessage) error {
	var v any
	if err := json.Unmarshal(payload, &v); err != nil {
		return mcptask.InvalidParams("the payload of event %q is not JSON: %v", s.Name, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return mcptask.InvalidParams("the payload of event %q must be a JSON object", s.Name)
	}
	if s.Payload == nil {
		return nil
	}
	raw, err := json.Marshal(s.Payload)
	if err != nil {
		return mcptask.InternalError("event %q: encoding its payload schema: %v", s.Name, err)
	}
	var schema jsonschema.Schema
	if err := json.Unmarshal(raw, &schema); err != nil {
		return mcptask.InternalError("event %q: its payload schema: %v", s.Name, err)
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		return mcptask.InternalError("event %q: its payload schema: %v", s.Name, err)
	}
	if err := resolved.Validate(v); err != nil {
		return mcptask.InvalidParams("the payload of event %q does not match its schema: %v", s.Name, err)
	}
	return nil
}

// performByWebhook performs client step s (which accepts the webhook) with
// payload as its tool's arguments, as a continuation would.
func (b *Bridge) performByWebhook(ctx context.Context, in *instance, s *Step, payload json.RawMessage) (*mcp.CallToolResult, error) {
	if !s.Webhook {
		return nil, fmt.Errorf("step %q does not accept the webhook: %w", s.Name, ErrNotWaiting)
	}
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: s.Tool, Arguments: payload,
		Meta: mcp.Meta{MetaTaskID: in.id, mcptask.MetaIdempotencyKey: idempotencyKey(in.id, s.Name)}}}
	step, replay, err := in.claimStep(ctx, nil, req) // the task stepOf read
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrNotWaiting, err)
	case replay != nil:
		return b.answer(ctx, in, step, replay, mcptask.Core, true), nil
	case step.Name != s.Name:
		in.releaseStep(step.Name)
		return nil, fmt.Errorf("the webhook names step %q, but step %q is the one waiting for tool %q: %w", s.Name, step.Name, s.Tool, ErrNotWaiting)
	}
	defer in.releaseStep(step.Name)
	tctx, untrack := b.engine.Track(ctx, in.id)
	res, callErr := b.engine.RunTool(tctx, req)
	untrack()
	if callErr != nil {
		return nil, callErr
	}
	recorded, err := in.recordClient(context.WithoutCancel(ctx), step, req, res, nil, ByWebhook)
	if err != nil {
		return nil, err
	}
	if recorded != nil {
		return b.answer(ctx, in, step, recorded, mcptask.Core, true), nil
	}
	if !res.IsError {
		in.kick("")
	}
	return b.answer(ctx, in, step, res, mcptask.Core, false), nil
}

// maxWebhookBody bounds a webhook's body.
const maxWebhookBody = 1 << 20

// WebhookHandler serves the workflow webhooks: POST /{task id}/{step} (mount
// it with http.StripPrefix under, say, /hooks/) with the task's webhook
// token as "Authorization: Bearer TOKEN" (or the header
// X-Taskbridge-Token, or the query parameter token), and a JSON object as
// the body: an event's payload, or the arguments of a client step that
// accepts the webhook. The answer is JSON: the task id, the step, the
// task's status after the delivery and its status message (200); or an
// error: 400 (malformed body or payload), 401 (bad token), 404 (unknown
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
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			fail(http.StatusMethodNotAllowed, "POST the payload")
			return
		}
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			fail(http.StatusNotFound, "the path is /{task id}/{step}")
			return
		}
		id, step := parts[0], parts[1]
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
		body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
		switch {
		case err != nil:
			fail(http.StatusBadRequest, "reading the body: %v", err)
			return
		case len(body) > maxWebhookBody:
			fail(http.StatusRequestEntityTooLarge, "the body is over %d bytes", maxWebhookBody)
			return
		case len(strings.TrimSpace(string(body))) == 0:
			body = []byte("{}")
		}
		res, err := b.Deliver(r.Context(), id, step, body, ByWebhook)
		var je *jsonrpc.Error
		switch {
		case errors.Is(err, store.ErrNotFound):
			fail(http.StatusNotFound, "%v", err)
			return
		case errors.Is(err, ErrNotWaiting):
			fail(http.StatusConflict, "%v", err)
			return
		case errors.As(err, &je) && je.Code == mcptask.CodeInvalidParams:
			fail(http.StatusBadRequest, "%s", je.Message)
			return
		case err != nil:
			fail(http.StatusInternalServerError, "%v", err)
			return
		}
		cur, _ := b.engine.Task(context.WithoutCancel(r.Context()), id)
		out := map[string]any{"taskId": id, "step": step, "isError": res.IsError}
		if cur != nil {
			out["status"], out["statusMessage"] = cur.Status, cur.StatusMessage
		}
		reply(http.StatusOK, out)
	})
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
