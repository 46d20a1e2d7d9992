package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// plainOnly refuses what only a Bridge runs: a plain workflow
// (RegisterPlain) runs its steps in the request, in order, so it has no
// parallel groups, sleeps, events or webhooks (conditions it judges).
func (w *Definition) plainOnly() error {
	var probs []string
	for _, s := range w.Steps {
		switch {
		case s.kind() != KindTool:
			probs = append(probs, fmt.Sprintf("step %q is a %s step", s.Name, s.kind()))
		case s.Webhook:
			probs = append(probs, fmt.Sprintf("step %q accepts the webhook", s.Name))
		}
	}
	if len(probs) > 0 {
		return &ValidationError{Workflow: w.Name, Problems: append(probs, "a plain workflow runs its tool steps in the request, in order: register it with a Bridge (Register) for the other kinds")}
	}
	return nil
}

// What varies by step kind, beyond tool steps (drive.go runs those): the
// sources a step needs, a sleep's start and end, an event's delivery
// (deliver.go). Each kind's validation is in validate.go, its status line
// in status.go, its handoff fields in handoff.go.

// inputs returns the sources step s cannot do without: its arguments and
// its sleep's length or end. (A condition reads an output that a skipped
// step never produced as null, so that a step can run because another
// was skipped.)
func (s *Step) inputs() []Source {
	out := make([]Source, 0, len(s.Args)+1)
	for _, src := range s.Args {
		out = append(out, src)
	}
	if s.For != nil {
		out = append(out, *s.For)
	}
	if s.Until != nil {
		out = append(out, *s.Until)
	}
	return out
}

// sleep starts or ends sleep s: it starts once (its end, Until, is
// recorded, so a restart or a takeover never starts the wait again) and
// ends when the engine's scheduler wakes the task at Until. It returns a
// failure that ends the workflow (a length or end that cannot be read),
// or "".
func (in *instance) sleep(p *Progress, s *Step, sp *StepProgress, now time.Time) string {
	if sp.Until == nil {
		end, err := in.sleepEnd(p, s, now)
		if err != nil {
			return fmt.Sprintf("step %q cannot sleep: %v; the workflow failed", s.Name, err)
		}
		sp.Until = &end
		sp.Status = StepSleeping
		sp.begin(ReasonFirst, ByServer, now)
	}
	if now.Before(*sp.Until) {
		return ""
	}
	sp.end(ReasonFirst, ByServer, now, "")
	sp.Status, sp.CompletedBy = StepCompleted, ByServer
	p.Outputs[s.binding()] = marshal(map[string]any{"sleptUntil": sp.Until.UTC().Format(time.RFC3339Nano)})
	p.UpdatedAt = now
	emit(in.b.opts.Observer, in.id, p, s, nil)
	return ""
}

// sleepEnd is when sleep s, starting now, ends.
func (in *instance) sleepEnd(p *Progress, s *Step, now time.Time) (time.Time, error) {
	if s.Duration > 0 {
		return now.Add(s.Duration), nil
	}
	r := &runner{wf: in.wf.def, vars: in.vars}
	src, until := s.For, false
	if s.Until != nil {
		src, until = s.Until, true
	}
	if src == nil {
		return time.Time{}, errors.New("it has no length")
	}
	raw, err := r.value(p, *src)
	if errors.Is(err, errNotProvided) && src.Default != nil {
		raw, err = src.Default, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	if until {
		return parseTime(raw)
	}
	d, err := parseLength(raw)
	if err != nil {
		return time.Time{}, err
	}
	return now.Add(d), nil
}

// parseLength reads a sleep's length: a number of seconds, or a Go
// duration string (a string of digits is seconds).
func parseLength(raw json.RawMessage) (time.Duration, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("the length %s is not JSON", raw)
	}
	var d time.Duration
	switch v := v.(type) {
	case float64:
		d = time.Duration(v * float64(time.Second))
	case string:
		if secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			d = time.Duration(secs * float64(time.Second))
			break
		}
		parsed, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("the length %q is neither seconds nor a duration such as 90s", v)
		}
		d = parsed
	default:
		return 0, fmt.Errorf("the length %s is neither a number of seconds nor a duration string", raw)
	}
	if d < 0 {
		return 0, fmt.Errorf("the length %s is negative", raw)
	}
	return d, nil
}

// parseTime reads a sleep's end: an RFC 3339 time, or Unix seconds.
func parseTime(raw json.RawMessage) (time.Time, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return time.Time{}, fmt.Errorf("the time %s is not JSON", raw)
	}
	switch v := v.(type) {
	case float64:
		return time.Unix(0, int64(v*float64(time.Second))).UTC(), nil
	case string:
		if secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return time.Unix(0, int64(secs*float64(time.Second))).UTC(), nil
		}
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
		if err != nil {
			return time.Time{}, fmt.Errorf("the time %q is neither RFC 3339 nor Unix seconds", v)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("the time %s is neither an RFC 3339 string nor Unix seconds", raw)
}
