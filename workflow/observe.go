package workflow

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A StepObserver learns of every attempt at a workflow step when it ends:
// the hook for metrics and traces (Bridge.Observer). It is called
// synchronously after the attempt is recorded; it must be quick.
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
// "deploy[2]" for a for-each's item).
func emit(o StepObserver, taskID string, p *Progress, sl *slot, meta mcp.Meta) {
	if o == nil || sl == nil || len(sl.sp.History) == 0 {
		return
	}
	o.StepEvent(StepEvent{TaskID: taskID, Workflow: p.Workflow, Step: sl.path, Tool: toolOf(sl.s), Attempt: sl.sp.History[len(sl.sp.History)-1], Meta: meta})
}

// StepObservers combines step observers into one, called in order.
type StepObservers []StepObserver

// StepEvent calls every observer.
func (o StepObservers) StepEvent(e StepEvent) {
	for _, x := range o {
		x.StepEvent(e)
	}
}
