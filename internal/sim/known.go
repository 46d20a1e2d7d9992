package sim

// Known lists the invariants that fail on today's engine for a reason
// already named, so that the simulation's test reports them (with the
// reason, in its log) and does not fail on them; every other violation
// fails the test. It is the gate of the simulation: visible, never
// silent.
//
// THE LEAD REMOVES the issue 38 entries once the branch that fixes issue
// 38 (one decision per event) is merged, and runs the simulation: each
// invariant must then hold, or its failure is that branch's bug. The
// second group are bugs the simulation found outside issue 38's list, in
// files that branch reshapes (workflow/drive.go, compensation.go,
// pause.go): they are to be fixed there, then their entries removed.
// testdata/known-plans.tsv holds the shortest plan found for each
// (TestKnownPlans replays them; the engine's concurrency may make one
// pass a given run).
var Known = map[string]string{
	// Issue 38's items.
	InvAttemptsStops: "issue 38 item 2 (a stop or a cut resets the attempt count)",
	InvUndoCancel:    "issue 38 items 3 and 4 (a cancel stops the undo midway; the undo task gets new keys)",
	InvPausedExpiry:  "issue 38 item 5 (a paused task expires)",
	InvPausedTree:    "issue 38 item 6 (a pause does not reach the children)",
	InvQueueFreed:    "issue 38 item 7 (a cancelled holder keeps its place until the next poll)",
	InvLoopBody:      "issue 38 item 8 (a loop over a sleep never wakes)",
	InvEndedClean:    "issue 38 item 10 (an ended task keeps records running or waiting)",

	// Found by the simulation outside issue 38's list, in files issue
	// 38's branch reshapes.
	InvRefusal:     "found by the simulation (seed 1: a write the store refuses once is never made again; the task stays silent until a restart): workflow/drive.go writePlan, and the router's run records",
	InvPausedQueue: "found by the simulation (seed 140: a graceful stop hands a paused task's step back but keeps its queue place, which nobody gives up until the resume): workflow/drive.go drain and queue.go freePlaces",
	InvPausedUndo:  "found by the simulation (seed 5: a task paused during its compensation starts undo steps, and an undo's outcome that arrives while paused is dropped): workflow/compensation.go and pause.go",
}
