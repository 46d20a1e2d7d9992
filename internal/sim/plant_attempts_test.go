//go:build simplant_attempts

package sim

// plantedInvariant guards the policy the planted bug breaks.
const plantedInvariant = InvAttemptBudget
