package sim

import (
	"context"
	"slices"
)

// Shrink finds a shorter plan that still shows a violation match
// accepts: it cuts the plan after the operation that first showed it, then drops chunks of
// operations (halves, quarters, ... single ones; delta debugging) and
// keeps every drop after which the run still shows one. The engine's own
// concurrency may make a run pass that would fail another time, so a
// shrink keeps only what it saw fail; tries bounds the runs it makes.
func Shrink(ctx context.Context, cfg Config, match func(Violation) bool, tries int) ([]Op, error) {
	plan := cfg.Plan
	if plan == nil {
		plan = Generate(cfg.Seed, cfg.Ops)
	}
	cfg.Trace, cfg.Dump = nil, false
	breaks := func(p []Op) (bool, int, error) {
		c := cfg
		c.Plan = p
		c.StopAt = match
		res, err := Run(ctx, c)
		if err != nil {
			return false, 0, err
		}
		for _, v := range res.Violations {
			if match(v) {
				return true, v.Op, nil
			}
		}
		return false, 0, nil
	}
	ok, at, err := breaks(plan)
	if err != nil || !ok {
		return plan, err
	}
	plan = slices.Clone(plan[:at+1])
	runs := 1
	for chunk := len(plan) / 2; chunk >= 1 && runs < tries; {
		dropped := false
		for start := 0; start < len(plan) && runs < tries && ctx.Err() == nil; {
			end := min(start+chunk, len(plan))
			try := slices.Concat(plan[:start], plan[end:])
			if len(try) == 0 {
				start = end
				continue
			}
			runs++
			ok, at, err := breaks(try)
			if err != nil {
				return plan, err
			}
			if ok {
				plan, dropped = slices.Clone(try[:at+1]), true
				continue // the same start, now holding later operations
			}
			start = end
		}
		if !dropped || chunk > len(plan)/2 {
			chunk /= 2
		}
	}
	return plan, nil
}
