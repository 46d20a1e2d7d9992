//go:build simplant_undo

package sim

// plantedInvariant guards the policy the planted bug breaks.
const plantedInvariant = InvUndoOrder
