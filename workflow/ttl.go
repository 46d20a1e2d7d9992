package workflow

import (
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// The ttl pass: the last of every write of a workflow task
// (instance.write, after a decision's passes, plan.go, or any other
// change): its wake-up time, its expiry and its status. The rules (see
// timerules.go for all of them):
//
//   - A task that records progress moves its expiry to now + its ttl,
//     or to its next wake-up + its ttl when it waits for the clock; never
//     earlier than its expiry already is (DeadlineIdle).
//   - A task no client holds that waits for one expires after
//     Options.OrphanTimeout (DeadlineOrphan).
//   - A paused task (pause.go) does not expire while paused: its expiry
//     is MaxPause after the pause (DeadlinePaused), and when it is resumed
//     its ttl counts again from the resume. One paused longer than that
//     expires saying so (expiryMessage).

// MaxPause bounds how long a workflow stays paused: a paused workflow
// does not expire by its ttl, but MaxPause after it was paused it
// expires, its status message saying so.
const MaxPause = 30 * 24 * time.Hour

// maxPauseText is MaxPause as messages say it.
const maxPauseText = "30 days"

// DeadlinePaused is LabelDeadline of a paused workflow task: it expires
// MaxPause after its pause.
const DeadlinePaused = "paused"

// recordRules applies the time rules to a write u of active task t at
// progress p: its wake-up time, its expiry, and its status.
func (b *Bridge) recordRules(t *store.Task, p *Progress, u *store.Update, now time.Time) {
	wake := p.nextWake(now)
	u.WakeAt = &wake
	b.deadline(t, p, u, now)
	// A workflow waiting only for events needs the client's input
	// (tasks/update, or the webhook): input_required, with its
	// inputRequests; working otherwise.
	if want := wantStatus(t, p); u.Status == "" && t.Status != want {
		u.Status = want
	}
}

// deadline sets u.ExpiresAt by the rules above.
func (b *Bridge) deadline(t *store.Task, p *Progress, u *store.Update, now time.Time) {
	held := t.Labels[LabelTouched] != "" || u.Labels[LabelTouched] != ""
	switch {
	case p != nil && p.Paused != nil && t.TTL > 0:
		at := p.Paused.At.Add(MaxPause)
		if r := renewed(t, p, now); r.After(at) {
			at = r // a pause never brings the expiry closer
		}
		u.ExpiresAt = &at
		setLabel(u, LabelDeadline, DeadlinePaused)
	case !held && b.opts.OrphanTimeout > 0 && waiting(p):
		at := now.Add(b.opts.OrphanTimeout)
		if ttl := renewed(t, p, now); ttl.Before(at) {
			at = ttl
		}
		u.ExpiresAt = &at
		setLabel(u, LabelDeadline, DeadlineOrphan)
	case t.TTL > 0:
		at := renewed(t, p, now)
		u.ExpiresAt = &at
		setLabel(u, LabelDeadline, DeadlineIdle)
	}
}

// renewed is the expiry of t after progress p at now: at least now + its
// ttl and its next wake-up + its ttl, never earlier than its current ttl
// deadline (an orphan's or a pause's deadline is another rule's: it is
// not kept).
func renewed(t *store.Task, p *Progress, now time.Time) time.Time {
	at := now.Add(t.TTL)
	if cur, rule := t.ExpiresAt, t.Labels[LabelDeadline]; rule != DeadlineOrphan && rule != DeadlinePaused && cur.After(at) {
		at = cur
	}
	if first := t.CreatedAt.Add(t.TTL); first.After(at) {
		at = first
	}
	if p != nil {
		if w := p.stepsWake(); !w.IsZero() && w.Add(t.TTL).After(at) {
			at = w.Add(t.TTL) // waiting for the clock is not idle
		}
	}
	return at
}

// pausedExpiry words the expiry of a task paused longer than MaxPause, or
// "" when t was not paused.
func pausedExpiry(t *store.Task) string {
	if t.Labels[LabelDeadline] != DeadlinePaused {
		return ""
	}
	by, since := "an operator", t.ExpiresAt.Add(-MaxPause)
	if p, err := decodeProgress(t); err == nil && p.Paused != nil {
		by, since = p.Paused.By, p.Paused.At
	}
	return fmt.Sprintf("expired: the workflow was paused by %s since %s, longer than the most a workflow stays paused (MaxPause, %s); it was not resumed, and it was ended", by, stamp(since), maxPauseText)
}
