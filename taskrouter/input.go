package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// pendingInput is one request for client input a running task is waiting on.
type pendingInput struct {
	key      string
	method   string
	params   json.RawMessage
	reply    chan inputAnswer
	inFlight bool // a core-dialect tasks/result stream is delivering it
}

type inputAnswer struct {
	result json.RawMessage
	err    error
}

// wire is the input request as tasks/get and the store show it.
func (in *pendingInput) wire() json.RawMessage {
	b, _ := json.Marshal(struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}{in.method, in.params})
	return b
}

// On a shared store (several replicas) a task's pending input requests
// and the client's answers also live in the task, as variables, because
// tasks/get and tasks/update may reach any replica while the handler
// waits on one: parking writes each request under varInputRequestPrefix +
// its key (in the write that sets input_required); tasks/update, on any
// replica, moves an answer in one write from the request's variable to
// varInputResponsePrefix + the key (so tasks/get anywhere shows only the
// requests still pending, at once); the waiting handler reads it from the
// store (the change feed wakes it) and deletes it with its next write. An
// exclusive store keeps both in memory only.
const (
	// varInputRequestPrefix + key is a pending input request of a task
	// ({"method", "params"}, as in inputRequests), on shared stores.
	varInputRequestPrefix = "_taskrouter.input.request."
	// varInputResponsePrefix + key is a client's answer to that request
	// not yet taken by the waiting handler, on shared stores.
	varInputResponsePrefix = "_taskrouter.input.response."
)

// storedInputRequests returns the pending input requests t carries (see
// varInputRequestPrefix), nil for none.
func storedInputRequests(t *store.Task) map[string]json.RawMessage {
	var out map[string]json.RawMessage
	for k, v := range t.Variables {
		if key, ok := strings.CutPrefix(k, varInputRequestPrefix); ok {
			if out == nil {
				out = map[string]json.RawMessage{}
			}
			out[key] = v
		}
	}
	return out
}

// pendingInputs are where the input requests of an input_required task
// are: its kind's (InputKind), or its handler's, in the store on a
// shared store (the handler may wait on another replica), or in its run
// here.
type pendingInputs struct {
	kinds  *kinds
	runs   *runTable
	shared bool
}

// of returns task t's pending input requests in the extension's wire
// shape (key -> {"method", "params"}), or nil.
func (p pendingInputs) of(t *store.Task) map[string]json.RawMessage {
	if ik := p.kinds.inputKind(t); ik != nil {
		return ik.InputRequests(t)
	}
	if p.shared {
		return storedInputRequests(t)
	}
	if ru := p.runs.get(t.ID); ru != nil {
		return ru.inputRequests()
	}
	return nil
}

// taskWriter writes tasks: the engine's Update (it wakes the task's
// waiters) and its store. *Router has it.
type taskWriter interface {
	Store() store.Store
	Update(ctx context.Context, id string, u store.Update) (*store.Task, error)
}

// deliverInputs records a client's answers to the input requests task t
// carries, for whichever replica's handler waits on them (see
// varInputRequestPrefix), through e; answers to keys not pending are
// ignored.
func deliverInputs(ctx context.Context, e taskWriter, t *store.Task, answers map[string]json.RawMessage) error {
	for attempt := 0; ; attempt++ {
		vars := map[string]json.RawMessage{}
		for key, val := range answers {
			if _, pending := t.Variables[varInputRequestPrefix+key]; pending {
				vars[varInputRequestPrefix+key] = json.RawMessage("null")
				vars[varInputResponsePrefix+key] = val
			}
		}
		if len(vars) == 0 || t.Status.Terminal() {
			return nil
		}
		_, err := e.Update(ctx, t.ID, store.Update{IfVersion: t.Version, Variables: vars})
		switch {
		case err == nil, errors.Is(err, store.ErrTerminal), errors.Is(err, store.ErrNotFound):
			return nil // the task ended meanwhile: nothing waits for the answers
		case errors.Is(err, store.ErrConflict) && attempt < 8:
			if t, err = e.Store().Get(ctx, t.ID); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

// storedAnswer waits (until ctx ends) for the answer to input key of task
// id to appear in the store (see varInputResponsePrefix) and sends it on
// the returned channel. Call it once the request is stored. A failed read
// is tried again: an answer must not be lost to a passing store error.
func (ru *run) storedAnswer(ctx context.Context, key string) <-chan inputAnswer {
	r, id := ru.r, ru.id
	ch := make(chan inputAnswer, 1)
	go func() {
		for ctx.Err() == nil {
			t, err := r.Await(ctx, id, func(t *store.Task) bool {
				_, ok := t.Variables[varInputResponsePrefix+key]
				return ok
			})
			if err == nil {
				ch <- inputAnswer{result: t.Variables[varInputResponsePrefix+key]}
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(r.opts.ChangePollInterval):
			}
		}
	}()
	return ch
}

// Elicit asks the client for input from inside a tool handler. When the
// handler runs as a task, the task moves to input_required and the request
// reaches the client the way its dialect prescribes: on the stream of its
// pending tasks/result (core), or as inputRequests in tasks/get answered by
// tasks/update (extension); the task returns to working once answered.
// Outside a task it is req.Session.Elicit.
func Elicit(ctx context.Context, req *mcp.CallToolRequest, params *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	ru := runOf(ctx)
	if ru == nil {
		if req == nil || req.Session == nil {
			return nil, errors.New("taskrouter: Elicit outside a task needs a request with a session")
		}
		return req.Session.Elicit(ctx, params)
	}
	var res mcp.ElicitResult
	if err := ru.requestInput(ctx, mcptask.MethodElicit, params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// requestInput parks the run's task in input_required until the client
// answers.
func (ru *run) requestInput(ctx context.Context, method string, params any, out any) error {
	r := ru.r
	raw, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("taskrouter: encoding input request: %w", err)
	}
	raw, err = wire.MergeMeta(raw, mcptask.RelatedTaskMeta(ru.id))
	if err != nil {
		return err
	}
	in := ru.addInput(method, raw)
	msg := "waiting for client input"
	park := store.Update{Status: mcptask.StatusInputRequired, StatusMessage: &msg, Events: inputRequestEvents(r.opts.Now(), in)}
	var stored <-chan inputAnswer
	if r.shared {
		park.Variables = map[string]json.RawMessage{varInputRequestPrefix + in.key: in.wire()}
	}
	if _, err := ru.fenced(ctx, park); err != nil {
		ru.removeInput(in.key)
		return err
	}
	if r.shared {
		// After the park: the task may exist in the store only from then
		// on (an instant task is stored at its first write).
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		stored = ru.storedAnswer(wctx, in.key)
	}
	var ans inputAnswer
	select {
	case ans = <-in.reply:
	case ans = <-stored:
	case <-ctx.Done():
		if ru.removeInput(in.key) == 0 {
			// The handler withdrew its question (its context ended, the
			// task's own did not: the answer came another way): the
			// task works again. A task that ended refuses the write.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, _ = ru.fenced(wctx, store.Update{Status: mcptask.StatusWorking, StatusMessage: ptr("")})
			cancel()
		}
		return context.Cause(ctx)
	}
	remaining := ru.removeInput(in.key)
	if ans.err == nil {
		var u store.Update
		if r.shared {
			null := json.RawMessage("null")
			u.Variables = map[string]json.RawMessage{varInputRequestPrefix + in.key: null, varInputResponsePrefix + in.key: null}
		}
		if remaining == 0 {
			u.Status, u.StatusMessage = mcptask.StatusWorking, ptr("")
		}
		if u.Status != "" || u.Variables != nil {
			if _, err := ru.fenced(ctx, u); err != nil {
				return err
			}
		}
	}
	if ans.err != nil {
		return ans.err
	}
	if err := json.Unmarshal(ans.result, out); err != nil {
		return fmt.Errorf("taskrouter: decoding client input: %w", err)
	}
	return nil
}

// serviceInputs sends a core-dialect task's pending input requests to the
// client on the stream of the tasks/result call that ctx belongs to.
func serviceInputs(ctx context.Context, ss *mcp.ServerSession, ru *run) {
	if ss == nil {
		return
	}
	for _, in := range ru.claimInputs() {
		switch in.method {
		case mcptask.MethodElicit:
			var p mcp.ElicitParams
			if err := json.Unmarshal(in.params, &p); err != nil {
				ru.answer(in.key, inputAnswer{err: err})
				continue
			}
			res, err := ss.Elicit(ctx, &p)
			if err != nil {
				if ctx.Err() != nil {
					ru.release(in)
					return
				}
				ru.answer(in.key, inputAnswer{err: fmt.Errorf("taskrouter: client input: %w", err)})
				continue
			}
			b, err := json.Marshal(res)
			ru.answer(in.key, inputAnswer{result: b, err: err})
		default:
			ru.answer(in.key, inputAnswer{err: fmt.Errorf("taskrouter: unsupported input method %q", in.method)})
		}
	}
}

// preflight runs a tool's Preflight before its task exists. In the
// extension dialect a need for input goes back to the client as an
// input_required result (SEP-2322), returned here. In the core dialect,
// whose clients cannot retry with inputResponses, the router asks the
// client itself on the request's stream and runs Preflight again until it
// is satisfied; it returns nil, nil then.
func preflight(ctx context.Context, q *Request, req *mcp.CallToolRequest, te toolEntry) (mcp.Result, error) {
	if q.Dialect.ClientRetriesWithInput() {
		need, err := te.opts.Preflight(ctx, req)
		if err != nil || len(need) == 0 {
			return nil, err
		}
		return &inputRequiredResult{ResultType: mcptask.ResultTypeInputRequired, InputRequests: need}, nil
	}
	for range 3 {
		need, err := te.opts.Preflight(ctx, req)
		if err != nil || len(need) == 0 {
			return nil, err
		}
		if req.Params.InputResponses == nil {
			req.Params.InputResponses = mcp.InputResponseMap{}
		}
		for key, ir := range need {
			ep, ok := ir.(*mcp.ElicitParams)
			if !ok || req.Session == nil {
				return nil, mcptask.InternalError("tool %q needs client input (%T) this connection cannot deliver", req.Params.Name, ir)
			}
			res, err := req.Session.Elicit(ctx, ep)
			if err != nil {
				return nil, mcptask.InternalError("asking the client for input: %v", err)
			}
			req.Params.InputResponses[key] = res
		}
	}
	return nil, mcptask.InternalError("tool %q kept asking for input", req.Params.Name)
}
