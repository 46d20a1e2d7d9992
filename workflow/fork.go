package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Rerun and fork. A fork is a new task of the same workflow version that
// starts at a step of an existing task: the steps before it keep what the
// original recorded (their outputs, attempts and who performed them), the
// step and every step after it run again, with the original's prompt
// arguments or edited ones. Both tasks record the lineage: the fork its
// origin (LabelForkedFrom, LabelForkedAt), in its own creation; the
// origin its forks, ended or not, one label per fork
// (LabelForkPrefix+id), written right after the fork exists and before
// anyone hears of it. One label per fork merges without a version check,
// so concurrent forks never conflict (a list in one label lost 837 of
// 2,000 concurrent forks to version conflicts). A process that dies
// between the two writes leaves the fork's own record: the original's
// label is rebuilt from it when the fork is next visited (its recovery
// after a restart or a takeover, or its expiry: such a fork's reply was
// lost with the process, so it expires as an orphan).

// The lineage labels.
const (
	// LabelForkedFrom is the id of the task a fork started from.
	LabelForkedFrom = "workflow.forked_from"
	// LabelForkedAt is the step a fork started at.
	LabelForkedAt = "workflow.forked_at"
	// LabelForkPrefix + a fork's task id is the label of the original
	// recording that fork: "<created, Unix nanoseconds>.<sequence>@<step>"
	// (Forks reads it).
	LabelForkPrefix = "workflow.fork."
	// LabelForks listed the forks of a task ("id@step" entries, comma
	// separated, oldest first) before each fork had its own label. Forks
	// still reads it.
	LabelForks = "workflow.forks"
)

// DefaultForkToolName is the name AddForkTool registers by default.
const DefaultForkToolName = "workflow_fork"

// ForkOptions say where a fork starts and with what.
type ForkOptions struct {
	// From is the step the fork runs again from (a group's name, or one
	// of its members, reruns the whole group). Empty means the first step
	// the original has not completed: a rerun of what failed.
	From string
	// Arguments replace prompt arguments of the original (the others are
	// kept); steps from From on see the new values.
	Arguments map[string]string
	// Version, when set, is the served version of the workflow the fork
	// runs on (by default the original's): an operator moves a task whose
	// version is gone onto one that is served. The steps before From keep
	// what the original recorded of the steps of the same names; each of
	// them must exist in the original and have ended.
	Version string
}

// ErrCannotFork is matched by the errors of a fork the original cannot
// give: a step that is not the workflow's, a step before From that has
// not ended, a version no longer served.
var ErrCannotFork = errors.New("workflow: cannot fork the task")

// Fork starts a new task from task id (see ForkOptions), owned by the
// original's owner, and sets its server steps off; it returns the new
// task as created, held by the caller (the orphan rule does not apply to
// it). The original is not changed beyond the label recording the fork.
// The fork is admitted as any task is (a -32000 naming the limit when the
// owner or the server has too many).
func (b *Bridge) Fork(ctx context.Context, id string, opts *ForkOptions) (*store.Task, error) {
	o := ForkOptions{}
	if opts != nil {
		o = *opts
	}
	t, err := b.engine.Task(ctx, id)
	if err != nil {
		return nil, err
	}
	in, err := b.fork(ctx, taskrouter.RequestOf(t), t, o)
	if err != nil {
		return nil, err
	}
	defer b.done(in)
	if ctx.Err() == nil {
		in.touch(context.WithoutCancel(ctx)) // the caller holds it now
	}
	if nt, _ := in.known(); nt != nil {
		return nt, nil
	}
	// The fork's own pass is between two reads of its task (a write it
	// retries): the fork exists, read it.
	return b.engine.Task(context.WithoutCancel(ctx), in.id)
}

// fork starts the fork of t for requestor q and records the lineage. It
// returns the new task's instance: release it with done.
func (b *Bridge) fork(ctx context.Context, q *taskrouter.Request, t *store.Task, o ForkOptions) (*instance, error) {
	if t.Labels[taskrouter.LabelKind] != taskrouter.KindWorkflow {
		return nil, fmt.Errorf("task %s is not a workflow task: %w", t.ID, ErrCannotFork)
	}
	p, err := decodeProgress(t)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCannotFork, err)
	}
	wf, err := b.forkTarget(t, p, o.Version)
	if err != nil {
		return nil, err
	}
	from, err := forkStage(wf, p, o.From)
	if err != nil {
		return nil, err
	}
	args := maps.Clone(p.Arguments)
	if args == nil {
		args = map[string]string{}
	}
	maps.Copy(args, o.Arguments)
	if args, err = wf.def.promptArgs(args); err != nil {
		return nil, &refused{rpc: mcptask.InvalidParams("%v", err), cause: ErrCannotFork}
	}
	np := newProgress(wf, args, b.engine.Now())
	for i := range np.Steps {
		old := p.step(np.Steps[i].Name)
		if old == nil {
			continue
		}
		if wf.stage[i] >= from {
			np.Steps[i] = wf.steps[i].kind.fork(np.Steps[i], *old)
			continue
		}
		rec := *old
		rec.Print = np.Steps[i].Print // it runs on wf now
		np.Steps[i] = rec
		if out, ok := p.Outputs[old.Output]; ok {
			np.Outputs[np.Steps[i].Output] = out
		}
	}
	at := wf.steps[wf.stages[from][0]].Name
	if c := wf.container[from]; c != nil {
		at = c.Name
	}
	vars := map[string]json.RawMessage{}
	for k, v := range t.Variables {
		if !strings.HasPrefix(k, ReservedPrefix) && !strings.HasPrefix(k, "_") {
			vars[k] = v // the task variables TaskVar sources read
		}
	}
	// Not touched: until its reply reaches the caller, the fork is a
	// possible orphan like any new workflow task.
	in, err := b.create(ctx, q, wf, np, map[string]string{LabelForkedFrom: t.ID, LabelForkedAt: at}, vars, "")
	if err != nil {
		return nil, err
	}
	nt, _ := in.known()
	if err := b.recordFork(ctx, t.ID, nt); err != nil {
		b.engine.Logger().Warn("recording a fork on its original; it is recorded when the fork is next recovered or expires", "task", t.ID, "fork", in.id, "error", err)
	}
	return in, nil
}

// forkTarget is the version a fork of t (at progress p) runs on: version
// when set (it must be served), else the original's.
func (b *Bridge) forkTarget(t *store.Task, p *Progress, version string) (*compiled, error) {
	if version == "" {
		wf, err := b.compiledFor(t, p)
		if err != nil {
			return nil, fmt.Errorf("%w: %v; fork it onto a served version (ForkOptions.Version)", ErrCannotFork, err)
		}
		return wf, nil
	}
	name := t.Labels[LabelWorkflow]
	b.mu.Lock()
	v := b.workflows[name]
	var wf *compiled
	if v != nil {
		wf = v.byVersion[version]
	}
	b.mu.Unlock()
	if wf == nil {
		served := []string{}
		if v != nil {
			served = v.servedVersions()
		}
		return nil, mcptask.InvalidParams("workflow %q has no served version %q: fork onto one of %s", name, version, quoteList(served))
	}
	return wf, nil
}

// forkStage is the stage of wf a fork of p starts at: the stage of step
// (or container) from, or the first stage not completed. Every step
// before it must have ended in p (and exist there: p may have been
// recorded by another version).
func forkStage(wf *compiled, p *Progress, from string) (int, error) {
	stage := -1
	switch i, ok := wf.index[from]; {
	case from == "":
		for j, s := range wf.steps {
			if sp := p.step(s.Name); sp == nil || sp.Status != mcptask.StepCompleted {
				stage = wf.stage[j]
				break
			}
		}
		if stage < 0 {
			return 0, fmt.Errorf("every step of the task completed: name the step to run again from (one of %s): %w", quoteList(stepNames(wf)), ErrCannotFork)
		}
	case ok:
		stage = wf.stage[i]
	default:
		for st, c := range wf.container {
			if c != nil && c.Name == from {
				stage = st
			}
		}
		if stage < 0 {
			return 0, mcptask.InvalidParams("workflow %q has no step %q: name one of %s", wf.def.Name, from, quoteList(stepNames(wf)))
		}
	}
	for j, s := range wf.steps {
		if wf.stage[j] >= stage {
			break
		}
		sp := p.step(s.Name)
		switch {
		case sp == nil:
			return 0, fmt.Errorf("step %q, before %q, is not in the original task (another version): fork from %q or an earlier step: %w", s.Name, from, s.Name, ErrCannotFork)
		case !sp.ended():
			return 0, fmt.Errorf("step %q, before %q, has not ended (it is %s): fork from %q or an earlier step: %w",
				sp.Name, from, sp.Status, sp.Name, ErrCannotFork)
		}
	}
	return stage, nil
}

// stepNames lists wf's step and container names in order.
func stepNames(wf *compiled) []string {
	var out []string
	for _, s := range wf.def.Steps {
		out = append(out, s.Name)
		for _, m := range s.kind.members() {
			out = append(out, m.Name)
		}
	}
	return out
}

// forkSeq orders the forks one process records within one clock reading.
var forkSeq atomic.Uint64

// recordFork records fork f (a task record naming its original, id, in
// LabelForkedFrom) on the original: one label of its own, merged without
// a version check (concurrent forks never conflict), ended or not. It
// tries a few times over transient failures.
func (b *Bridge) recordFork(ctx context.Context, id string, f *store.Task) error {
	ctx = context.WithoutCancel(ctx)
	entry := fmt.Sprintf("%d.%d@%s", f.CreatedAt.UnixNano(), forkSeq.Add(1), f.Labels[LabelForkedAt])
	var err error
	for attempt := range 4 {
		_, err = b.engine.Update(ctx, id, store.Update{Annotate: true, Labels: map[string]string{LabelForkPrefix + f.ID: entry}})
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 50 * time.Millisecond)
	}
	return err
}

// relinkFork rebuilds the original's record of fork f from f's own (see
// "Rerun and fork" above) when it is missing: called when the fork is
// visited after its process may have died between the two writes. It
// does nothing for a task that is no fork, or one its original records.
func (b *Bridge) relinkFork(ctx context.Context, f *store.Task) {
	orig := f.Labels[LabelForkedFrom]
	if orig == "" {
		return
	}
	t, err := b.engine.Task(ctx, orig)
	if err != nil {
		return // gone (expired and swept): nothing to record on
	}
	if _, ok := t.Labels[LabelForkPrefix+f.ID]; ok {
		return
	}
	for _, e := range Forks(t) {
		if e.TaskID == f.ID {
			return
		}
	}
	if err := b.recordFork(ctx, orig, f); err != nil {
		b.engine.Logger().Warn("recording a fork on its original", "task", orig, "fork", f.ID, "error", err)
		return
	}
	b.engine.Logger().Info("recorded a fork its original did not list (its process stopped between the two writes)", "task", orig, "fork", f.ID)
}

// Forks returns the forks task t records: task ids and the step each
// started at, oldest first.
func Forks(t *store.Task) []Fork {
	var out []Fork
	for _, e := range strings.Split(t.Labels[LabelForks], ",") {
		if id, step, ok := strings.Cut(e, "@"); ok {
			out = append(out, Fork{TaskID: id, From: step})
		}
	}
	type keyed struct {
		Fork
		at, seq uint64
	}
	var own []keyed
	for k, v := range t.Labels {
		id, ok := strings.CutPrefix(k, LabelForkPrefix)
		if !ok {
			continue
		}
		order, step, _ := strings.Cut(v, "@")
		at, seq, _ := strings.Cut(order, ".")
		e := keyed{Fork: Fork{TaskID: id, From: step}}
		e.at, _ = strconv.ParseUint(at, 10, 64)
		e.seq, _ = strconv.ParseUint(seq, 10, 64)
		own = append(own, e)
	}
	slices.SortFunc(own, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.seq, b.seq), strings.Compare(a.TaskID, b.TaskID))
	})
	for _, e := range own {
		out = append(out, e.Fork)
	}
	return out
}

// A Fork is one entry of a task's lineage.
type Fork struct {
	TaskID string
	From   string
}

// forkIn is the workflow_fork tool's input.
type forkIn struct {
	TaskID    string            `json:"task_id" jsonschema:"the id of the workflow task to run again"`
	From      string            `json:"from,omitempty" jsonschema:"the step to run again from (the steps before it keep their recorded outputs); leave it out to rerun from the first step that did not complete"`
	Arguments map[string]string `json:"arguments,omitempty" jsonschema:"prompt arguments to change for the new run (the others are kept)"`
}

// AddForkTool registers the tool name (DefaultForkToolName when empty)
// on s: called with a workflow task's id, a step and optionally changed
// arguments, it forks the task (see Fork) and returns the new task's
// handoff. The caller must be allowed to see the original task; the fork
// is the caller's.
func (b *Bridge) AddForkTool(s *mcp.Server, name string) {
	if name == "" {
		name = DefaultForkToolName
	}
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: "Run a workflow task again from one of its steps, as a new task: the steps before it keep their recorded outputs, that step and the ones after it run again (optionally with changed prompt arguments). Returns the new task's handoff."},
		func(ctx context.Context, req *mcp.CallToolRequest, in forkIn) (*mcp.CallToolResult, any, error) {
			q := b.engine.Resolve(ctx, req)
			if q.OwnerErr != nil {
				return nil, nil, q.OwnerErr
			}
			// What the caller can fix is a tool error (as task_result
			// answers an unknown id); a store failure is the server's.
			refuse := func(err error) (*mcp.CallToolResult, any, error) {
				var je *jsonrpc.Error
				switch {
				case errors.As(err, &je) && je.Code == mcptask.CodeInvalidParams:
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: je.Message}}}, nil, nil
				case errors.Is(err, ErrCannotFork):
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil, nil
				}
				return nil, nil, err
			}
			t, err := b.load(ctx, q, in.TaskID)
			if err != nil {
				return refuse(err)
			}
			fin, err := b.fork(ctx, q, t, ForkOptions{From: in.From, Arguments: in.Arguments})
			if err != nil {
				return refuse(err)
			}
			defer b.done(fin)
			nt, p := b.settle(ctx, fin.id)
			if ctx.Err() == nil {
				// The handoff is about to be returned: the caller holds
				// the fork now (a reply cut before this is an orphan).
				fin.touch(context.WithoutCancel(ctx))
			}
			res, err := b.toolResult(nt, p, readerOf(q), fmt.Sprintf("Workflow task %s runs again from step %q as task %s.", t.ID, nt.Labels[LabelForkedAt], nt.ID))
			return res, nil, err
		})
}

// ForkPoints lists the steps (a group by its name) a fork of workflow
// task t may start at: those whose earlier steps have all ended. It is
// empty when t is not a workflow task of a version served here.
func (b *Bridge) ForkPoints(t *store.Task) []string {
	p, err := decodeProgress(t)
	if err != nil || t.Labels[taskrouter.LabelKind] != taskrouter.KindWorkflow {
		return nil
	}
	wf, err := b.compiledFor(t, p)
	if err != nil {
		return nil
	}
	var out []string
	for st, members := range wf.stages {
		name := wf.steps[members[0]].Name
		if _, err := forkStage(wf, p, name); err != nil {
			break
		}
		if c := wf.container[st]; c != nil {
			name = c.Name
		}
		out = append(out, name)
	}
	return out
}
