//go:build simplant_attempts || simplant_undo || simplant_queue

package sim

import (
	"context"
	"testing"
)

// TestPlantedBugIsCaught runs with a bug planted in one policy (a
// test-only build tag: simplant_attempts gives every step one attempt
// more than its policy; simplant_undo runs undo steps first to last;
// simplant_queue makes a dequeue free nothing) and requires that the
// simulation catches it within the CI budget: one of the first ciSeeds
// seeds breaks the invariant that guards the policy. scripts/simplant
// runs it for each tag.
func TestPlantedBugIsCaught(t *testing.T) {
	want := plantedInvariant
	for seed := int64(1); seed <= ciSeeds; seed++ {
		cfg := Config{Seed: seed, Ops: ciOps, Store: storeFor(seed), Dir: t.TempDir(),
			StopAt: func(v Violation) bool { return v.Invariant == want }}
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Violations {
			if v.Invariant == want {
				t.Logf("caught by seed %d (of the CI budget's %d), at operation %d: %s", seed, ciSeeds, v.Op, v)
				return
			}
		}
		t.Logf("seed %d: not caught in %d operations", seed, res.Ran)
	}
	t.Fatalf("the planted bug was not caught by any of the CI budget's %d seeds (invariant %s)", ciSeeds, want)
}
