//go:build !simplant_attempts && !simplant_undo

package workflow

// Planted bugs (issue 39): the simulation's test shows that it catches a
// bug planted in each of three policies, built with a test-only tag (see
// internal/sim's plant_test.go and scripts/simplant). Without a tag they
// are off, and the compiler drops the code they guard.
const (
	// plantExtraAttempt, with simplant_attempts, gives every step one
	// attempt more than its retry policy allows.
	plantExtraAttempt = 0
	// plantUndoForward, with simplant_undo, runs undo steps in the order
	// their steps completed instead of the reverse.
	plantUndoForward = false
)
