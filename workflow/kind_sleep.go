package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A sleep waits, durably: it starts once (its end is recorded, so a
// restart or a takeover never starts the wait again from zero) and ends
// when the engine's scheduler wakes the task at that end, on whichever
// process is up then. Its length is fixed (Sleep), read from a source
// (SleepFor: a number of seconds, or a Go duration string), or its end is
// (SleepUntil: an RFC 3339 time, or Unix seconds). A sleep is never longer
// than MaxWait. A sleeping task is not idle: its ttl counts from the
// sleep's end (see the time rules).

// sleep is the kind of Sleep, SleepFor and SleepUntil steps.
type sleep struct {
	base
	length time.Duration
	forSrc *Source
	until  *Source
}

// Sleep returns a step that waits d, durably.
func Sleep(name string, d time.Duration) *Step { return newStep(name, &sleep{length: d}) }

// SleepFor returns a step that waits as long as src says: a number of
// seconds, or a Go duration string ("90s", "1h30m"; a prompt argument
// "30" is seconds). A prompt argument it reads is a duration (ArgDuration),
// checked when a task starts.
func SleepFor(name string, src Source) *Step { return newStep(name, &sleep{forSrc: &src}) }

// SleepUntil returns a step that waits until the time src says: an RFC
// 3339 time, or Unix seconds. A prompt argument it reads is a time
// (ArgTime), checked when a task starts.
func SleepUntil(name string, src Source) *Step { return newStep(name, &sleep{until: &src}) }

// Labels of a sleep's reads.
const (
	labelSleepLength = "(sleep length)"
	labelSleepEnd    = "(sleep end)"
)

func (k *sleep) name() mcptask.StepKind { return mcptask.StepKindSleep }

func (k *sleep) print() any {
	return printed{Length: k.length, For: printSourcePtr(k.forSrc), Until: printSourcePtr(k.until)}
}

func (k *sleep) reads() []read {
	switch {
	case k.forSrc != nil:
		return []read{{label: labelSleepLength, src: *k.forSrc}}
	case k.until != nil:
		return []read{{label: labelSleepEnd, src: *k.until}}
	}
	return nil
}

func (k *sleep) argType(label string) *ArgType {
	t := map[string]ArgType{labelSleepLength: ArgDuration, labelSleepEnd: ArgTime}[label]
	if t == "" {
		return nil
	}
	return &t
}

func (k *sleep) check(c *checker) {
	n := 0
	if k.length > 0 {
		n++
	}
	if k.forSrc != nil {
		n++
	}
	if k.until != nil {
		n++
	}
	for _, r := range k.reads() {
		c.source(r.label, r.src, toolSchema{}, false)
	}
	switch {
	case k.length < 0:
		c.add("the sleep's length is negative")
	case k.length > MaxWait:
		c.add("the sleep's length %s is longer than the maximum, MaxWait (%s): split the wait, or use a schedule", k.length, maxWaitText)
	case n != 1:
		c.add("a sleep needs exactly one of a length (Sleep), a length source (SleepFor) or an end source (SleepUntil)")
	}
}

// serve starts the sleep (recording its end), or ends it when its end has
// come.
func (k *sleep) serve(x *turn) string {
	sp := x.sp
	if sp.Until == nil {
		end, err := k.end(x)
		if err != nil {
			return fmt.Sprintf("step %q cannot sleep: %v; the workflow failed", x.s.Name, err)
		}
		sp.Until = &end
		sp.Status = mcptask.StepSleeping
		sp.begin(ReasonFirst, string(mcptask.ExecServer), x.now)
	}
	if x.now.Before(*sp.Until) {
		return ""
	}
	sp.end(ReasonFirst, string(mcptask.ExecServer), x.now, "")
	sp.Status, sp.CompletedBy = mcptask.StepCompleted, string(mcptask.ExecServer)
	x.sl.output(x.p, marshal(map[string]any{"sleptUntil": sp.Until.UTC().Format(time.RFC3339Nano)})) // a body's run keeps its own
	x.p.UpdatedAt = x.now
	x.emit()
	return ""
}

// end is when the sleep, starting at x.now, ends.
func (k *sleep) end(x *turn) (time.Time, error) {
	if k.length > 0 {
		return x.now.Add(k.length), nil
	}
	r := k.reads()
	if len(r) == 0 {
		return time.Time{}, errors.New("it has no length")
	}
	src := r[0].src
	raw, err := x.value(src)
	if errors.Is(err, errNotProvided) && src.Default != nil {
		raw, err = src.Default, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	if k.until != nil {
		t, err := parseTime(raw)
		if err == nil && t.Sub(x.now) > MaxWait {
			err = fmt.Errorf("its end %s is more than the maximum, %s, away", t.UTC().Format(time.RFC3339), maxWaitText)
		}
		return t, err
	}
	d, err := parseLength(raw)
	if err != nil {
		return time.Time{}, err
	}
	return x.now.Add(d), nil
}

func (k *sleep) status(s *Step, sp *StepProgress) (string, rank) {
	if sp.Status != mcptask.StepSleeping || sp.Until == nil {
		return "", rankNone
	}
	return fmt.Sprintf("sleeping until %s (step %q)", sp.Until.UTC().Format(time.RFC3339), s.Name), rankTimer
}

func (k *sleep) entry(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep) {
	rs.Until = sp.Until
	if sp.Until != nil {
		rs.Do = fmt.Sprintf("the server waits until %s, then goes on; nothing to do.", stamp(*sp.Until))
		return
	}
	rs.Do = "the server sleeps here once the steps before it are done; nothing to do."
}

// parseLength reads a sleep's length: a number of seconds, or a Go
// duration string (a string of digits is seconds), from 0 to MaxWait.
func parseLength(raw json.RawMessage) (time.Duration, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("the length %s is not JSON", raw)
	}
	switch v := v.(type) {
	case float64:
		return secondsLength(v, string(raw))
	case string:
		t := strings.TrimSpace(v)
		if secs, err := strconv.ParseFloat(t, 64); err == nil {
			return secondsLength(secs, strconv.Quote(v))
		}
		d, err := time.ParseDuration(t)
		switch {
		case err != nil && durationSyntax.MatchString(t):
			return 0, fmt.Errorf("the length %q is longer than the maximum, %s", v, maxWaitText) // it overflows
		case err != nil:
			return 0, fmt.Errorf("the length %q is neither seconds nor a duration such as 90s or 1h30m (units h, m, s, ms; no days)", v)
		case d < 0:
			return 0, fmt.Errorf("the length %q is negative", v)
		case d > MaxWait:
			return 0, fmt.Errorf("the length %q is longer than the maximum, %s", v, maxWaitText)
		}
		return d, nil
	}
	return 0, fmt.Errorf("the length %s is neither a number of seconds nor a duration string", raw)
}

// durationSyntax is what time.ParseDuration reads, whatever the size.
var durationSyntax = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// secondsLength is a length of secs seconds (shown as what), refusing
// what no duration is.
func secondsLength(secs float64, what string) (time.Duration, error) {
	switch {
	case math.IsNaN(secs) || math.IsInf(secs, 0):
		return 0, fmt.Errorf("the length %s is not a finite number of seconds", what)
	case secs < 0:
		return 0, fmt.Errorf("the length %s is negative", what)
	case secs > MaxWait.Seconds():
		return 0, fmt.Errorf("the length %s is longer than the maximum, %s", what, maxWaitText)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// parseTime reads a sleep's end: an RFC 3339 time, or Unix seconds, that
// the store can index (years 1678 to 2262).
func parseTime(raw json.RawMessage) (time.Time, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return time.Time{}, fmt.Errorf("the time %s is not JSON", raw)
	}
	unix := func(secs float64, what string) (time.Time, error) {
		if math.IsNaN(secs) || math.IsInf(secs, 0) || math.Abs(secs) > float64(math.MaxInt64)/1e9 {
			return time.Time{}, fmt.Errorf("the time %s is not a Unix time in seconds the server can keep", what)
		}
		return time.Unix(0, int64(secs*float64(time.Second))).UTC(), nil
	}
	switch v := v.(type) {
	case float64:
		return unix(v, string(raw))
	case string:
		if secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return unix(secs, strconv.Quote(v))
		}
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
		if err != nil {
			return time.Time{}, fmt.Errorf("the time %q is neither RFC 3339 nor Unix seconds", v)
		}
		if t.Year() < 1678 || t.Year() > 2261 {
			return time.Time{}, fmt.Errorf("the time %q is outside the years 1678 to 2261 the server can keep", v)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("the time %s is neither an RFC 3339 string nor Unix seconds", raw)
}
