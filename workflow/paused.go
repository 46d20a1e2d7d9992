package workflow

import (
	"encoding/json"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// pausedEvent is the mcptask.EventPaused event of a pass that leaves the
// workflow waiting for its client: nothing runs or starts (busy counts
// the steps that do), some step is the client's to perform, and the pause
// reason is new (t is the task before the pass's write: a pass that
// writes the same pause again adds none). Push webhooks that ask for
// mcptask.WebhookPaused are told of it. A workflow created waiting for
// its client (a client step first) has none: the prompt's reply, the
// handoff, tells its client already.
func pausedEvent(t *store.Task, p *Progress, busy int) (store.Event, bool) {
	if busy > 0 || t == nil || p.PauseReason == t.StatusMessage {
		return store.Event{}, false
	}
	steps := clientSteps(p)
	if len(steps) == 0 {
		return store.Event{}, false
	}
	data, err := json.Marshal(mcptask.PausedEvent{Reason: p.PauseReason, ClientSteps: steps})
	if err != nil {
		return store.Event{}, false
	}
	return store.Event{Type: mcptask.EventPaused, Data: data}, true
}
