package workflow

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// What the kinds that keep records of their body's runs (a for-each's
// items, a loop's iterations) share: running the records' turns, showing
// where they stand on the container's own record, and ending the
// container. The records are slots (slot.go): their attempts, client
// calls and handoff entries go through the engine as a step's do.

// busy reports whether the record has an attempt going or waits for the
// clock (it holds one of a container's places).
func busy(sp *StepProgress) bool {
	return sp.Status == mcptask.StepRunning || sp.open() != nil || sp.RetryAt != nil || sp.Until != nil
}

// runRecords runs the turns of the records the container at x keeps, in
// order: a record whose condition does not hold is skipped, a record the
// client performs is reached (it waits for the client), and the others
// run on the server, at most limit at once (0: no bound). It returns a
// failure that ends the workflow, or "".
func runRecords(x *turn, limit int) string {
	recs := x.sl.children()
	active := 0
	for _, c := range recs {
		if !c.sp.ended() && busy(c.sp) {
			active++
		}
	}
	for _, c := range recs {
		sp := c.sp
		if sp.ended() || sp.GaveUp {
			continue
		}
		if sp.Status == mcptask.StepPending && sp.Attempts == 0 {
			if why := x.r.resolver(c.item).skipReason(x.p, c.s); why != "" {
				sp.Status, sp.SkipReason = mcptask.StepSkipped, why
				continue
			}
		}
		if clientSide(c.s, sp) {
			failure, back := reach(x.p, c.s, sp, x.now)
			if failure != "" || !back {
				if failure != "" {
					return failure
				}
				continue
			}
		}
		if !busy(sp) && sp.Attempts == 0 && sp.Items == nil {
			if limit > 0 && active >= limit {
				continue // its turn comes when a place frees
			}
			active++
		}
		if failure := c.s.kind.serve(x.sub(c)); failure != "" {
			return failure
		}
	}
	return ""
}

// settleContainer shows where the records of the container at x stand on
// its own record (running, waiting for the clock or for the client, and
// the earliest of their timers, which the time rules wake the task for),
// and ends the container once every record has ended: completed with
// out's output, or failed with the failures its records held. It returns
// a failure that ends the workflow, or "".
func settleContainer(x *turn, out func(recs []*slot) json.RawMessage) string {
	recs := x.sl.children()
	sp := x.sp
	var gaveUp []string
	var retry, until, deadline *time.Time
	open, running, client := false, false, false
	earliest := func(cur **time.Time, t *time.Time) {
		if t != nil && (*cur == nil || t.Before(**cur)) {
			v := *t
			*cur = &v
		}
	}
	for _, c := range recs {
		switch {
		case c.sp.GaveUp:
			gaveUp = append(gaveUp, fmt.Sprintf("%s: %s", c.path, oneLine(c.sp.Error)))
		case c.sp.ended():
		default:
			open = true
			running = running || c.sp.Status == mcptask.StepRunning || c.sp.Status == mcptask.StepAwaitingChild || c.sp.open() != nil && c.sp.Items == nil
			client = client || clientSide(c.s, c.sp) && c.sp.Status != mcptask.StepPending || c.sp.Status == mcptask.StepAwaitingClient
			earliest(&retry, c.sp.RetryAt)
			earliest(&until, c.sp.Until)
			earliest(&deadline, c.sp.Deadline)
		}
	}
	if open {
		sp.RetryAt, sp.Until, sp.Deadline = retry, until, deadline
		switch {
		case running:
			sp.Status = mcptask.StepRunning
		case client:
			sp.Status = mcptask.StepAwaitingClient
		case until != nil:
			sp.Status = mcptask.StepSleeping
		default:
			sp.Status = mcptask.StepRunning // records between their turns: the server's
		}
		return ""
	}
	sp.RetryAt, sp.Until, sp.Deadline = nil, nil, nil
	if len(gaveUp) > 0 {
		return x.s.kind.stageFailed(x.s, gaveUp)
	}
	sp.end(ReasonFirst, string(mcptask.ExecServer), x.now, "")
	sp.Status, sp.CompletedBy = mcptask.StepCompleted, string(mcptask.ExecServer)
	x.sl.output(x.p, out(recs))
	x.p.UpdatedAt = x.now
	x.emit()
	return ""
}

// recordsLine says where the records of container step s (body) stand:
// `step "build" (tool "build_service"): 3 of 5 items done, 2 running`.
func recordsLine(s, body *Step, sp *StepProgress, noun string) string {
	done, run, client, wait, queued, total := 0, 0, 0, 0, 0, len(sp.Items)
	var queue *QueuePlace
	for i := range sp.Items {
		r := &sp.Items[i]
		switch {
		case r.ended():
			done++
		case r.Status == mcptask.StepRunning || r.open() != nil:
			run++
		case r.Status == mcptask.StepAwaitingClient || r.Status == mcptask.StepAwaitingEvent || r.HandedToClient:
			client++
		case r.Queue.waiting():
			queued++
			queue = r.Queue
		case r.RetryAt != nil || r.Until != nil:
			wait++
		}
	}
	parts := []string{fmt.Sprintf("%d of %d %ss done", done, total, noun)}
	queuedWhat := ""
	if queue != nil {
		queuedWhat = fmt.Sprintf("queued on %q", queue.Queue) // QUEUES.md: a queued run's status names its queue
		if queue.Key != "" {
			queuedWhat += fmt.Sprintf(" (key %q)", queue.Key)
		}
	}
	for _, p := range []struct {
		n    int
		what string
	}{{run, "running"}, {client, "waiting for the client"}, {queued, queuedWhat}, {wait, "waiting for a retry or a timer"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	return fmt.Sprintf("step %q: %s (%s per %s)", s.Name, strings.Join(parts, ", "), bodyLine(body), noun)
}

// bodyLine names what a container runs per record: its tool, or its kind.
func bodyLine(body *Step) string {
	if t := toolOf(body); t != "" {
		return fmt.Sprintf("tool %q", t)
	}
	return fmt.Sprintf("a %s step", body.Kind())
}

// rankOf ranks a container's status line as its record stands.
func rankOf(sp *StepProgress) rank {
	switch {
	case sp.Status == mcptask.StepRunning:
		return rankRunning
	case sp.RetryAt != nil || sp.Until != nil:
		return rankTimer
	case sp.Status == mcptask.StepAwaitingClient:
		return rankWaiting
	}
	return rankNone
}

// clientRecords are the handoff entries of the records of the container
// at sl that the client may act on now, each named by its path (the call
// that performs one sends the task id as "TASK#path").
func clientRecords(v *view, sl *slot) []handoff.RemainingStep {
	var out []handoff.RemainingStep
	for _, c := range sl.children() {
		if c.sp.ended() || c.sp.Status == mcptask.StepPending || !clientSide(c.s, c.sp) {
			out = append(out, c.s.kind.entries(v, c)...) // a container's records, nested
			continue
		}
		rs := v.sub(c).entryFor(c.s, c.sp)
		rs.Name = c.path
		out = append(out, rs)
	}
	return out
}
