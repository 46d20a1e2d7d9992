//go:build simplant_queue

package sim

// plantedInvariant guards the policy the planted bug breaks.
const plantedInvariant = InvQueueReleased
