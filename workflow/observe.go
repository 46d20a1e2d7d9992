package workflow

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A StepObserver learns of every attempt at a workflow step when it ends:
// the hook for metrics and traces (Bridge.Observer). It is called after
// the write that records the attempt, outside every lock of the task's
// (a decision's effects are carried out then); it must be quick.
type StepObserver interface {
	StepEvent(e StepEvent)
}

// A StepEvent reports the end of one attempt at a workflow step.
type StepEvent struct {
	// TaskID is the workflow task ("" for a plain workflow prompt).
	TaskID   string
	Workflow string
	Step     string
	Tool     string
	// Attempt is the attempt as recorded: its number, reason, start,
	// duration, outcome and error. Attempt.By says who performed it.
	Attempt Attempt
	// Meta is the _meta of the client's continuation request (client
	// attempts only), where a trace context travels.
	Meta mcp.Meta
}

// emit reports the last attempt of the slot's step (its path names it:
// "deploy[2]" for a for-each's item) at once: a plain workflow's runner,
// which writes nothing. A task's attempts are told after the write that
// records them (stepEvent, then the noticeStep effect or tell).
func emit(o StepObserver, taskID string, p *Progress, sl *slot, meta mcp.Meta) {
	if e, ok := observed(taskID, p, sl, meta); ok && o != nil {
		o.StepEvent(e)
	}
}

// observed is the event of the last attempt of the slot's step; ok is
// false when it has none.
func observed(taskID string, p *Progress, sl *slot, meta mcp.Meta) (e StepEvent, ok bool) {
	if sl == nil || len(sl.sp.History) == 0 {
		return StepEvent{}, false
	}
	return StepEvent{TaskID: taskID, Workflow: p.Workflow, Step: sl.path, Tool: toolOf(sl.s), Attempt: sl.sp.History[len(sl.sp.History)-1], Meta: meta}, true
}

// tell tells the observer of the events a write recorded, after it.
func (b *Bridge) tell(events []StepEvent) {
	if o := b.opts.Observer; o != nil {
		for _, e := range events {
			o.StepEvent(e)
		}
	}
}

// StepObservers combines step observers into one, called in order.
type StepObservers []StepObserver

// StepEvent calls every observer.
func (o StepObservers) StepEvent(e StepEvent) {
	for _, x := range o {
		x.StepEvent(e)
	}
}
