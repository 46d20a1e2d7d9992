package workflow

import (
	"encoding/json"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// pausedEvent is the mcptask.EventPaused event of a pass that leaves the
// workflow waiting: for its client (nothing runs or starts, busy counting
// the steps that do, and some step is the client's to perform), or for an
// operator to resume it (the pass paused it: PauseOnFailure); in either
// case only when the pause reason is new (t is the task before the
// pass's write: a pass that writes the same pause again adds none). Push
// webhooks that ask for mcptask.WebhookPaused are told of it. A workflow
// created waiting for its client (a client step first) has none: the
// prompt's reply, the handoff, tells its client already.
func pausedEvent(t *store.Task, p *Progress, busy int) (store.Event, bool) {
	if t == nil || p.PauseReason == t.StatusMessage {
		return store.Event{}, false
	}
	if p.Paused != nil {
		if before, err := decodeProgress(t); err == nil && before.Paused != nil {
			return store.Event{}, false // paused already: told then
		}
		return pauseEvent(p)
	}
	steps := clientSteps(p)
	if busy > 0 || len(steps) == 0 {
		return store.Event{}, false
	}
	data, err := json.Marshal(mcptask.PausedEvent{Reason: p.PauseReason, ClientSteps: steps})
	if err != nil {
		return store.Event{}, false
	}
	return store.Event{Type: mcptask.EventPaused, Data: data}, true
}

// pauseEvent is the mcptask.EventPaused event of workflow progress p
// just paused (p.Paused set): who paused it, and its status line.
func pauseEvent(p *Progress) (store.Event, bool) {
	data, err := json.Marshal(mcptask.PausedEvent{Reason: p.PauseReason, By: p.Paused.By})
	if err != nil {
		return store.Event{}, false
	}
	return store.Event{Type: mcptask.EventPaused, Data: data}, true
}
