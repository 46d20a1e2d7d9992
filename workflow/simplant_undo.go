//go:build simplant_undo

package workflow

// See simplant.go: undo steps run in the order their steps completed.
const (
	plantExtraAttempt = 0
	plantUndoForward  = true
)
