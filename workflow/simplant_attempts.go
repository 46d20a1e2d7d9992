//go:build simplant_attempts

package workflow

// See simplant.go: a step gets one attempt more than its policy allows.
const (
	plantExtraAttempt = 1
	plantUndoForward  = false
)
