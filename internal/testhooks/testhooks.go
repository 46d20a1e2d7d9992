// Package testhooks lets the module's tests, and the programs its tests
// build (integration/testdata), reach hooks of its packages that are no
// part of their public API: a test stops or kills a process exactly
// between two writes. The hooks live in unexported fields of the
// packages' options, so they are neither documented nor settable by a
// user; this package, internal to the module, is the one way to set them.
//
// It imports nothing of the module. A package with hooks installs its
// setter here in an init function (the seam grpc-go's internal package
// uses for the same job), so a setter is nil in a program that does not
// import its package.
package testhooks

import "context"

// Workflow are the test hooks of a workflow bridge (package workflow).
type Workflow struct {
	// AfterRecord, when set, runs in every continuation right after the
	// client step's outcome was committed to the store, before the call
	// sets off the steps that follow and answers (a test stops a replica
	// exactly there). It may block: the call waits.
	AfterRecord func(ctx context.Context, taskID, step string)
	// AfterLineage, when set, runs at each point where a parent workflow
	// and its child are out of step (see LineagePoint; a test kills the
	// process exactly there).
	AfterLineage func(point LineagePoint, parent, child string)
}

// LineagePoint names a point between the writes of a parent workflow and
// its child (Workflow.AfterLineage).
type LineagePoint string

// The lineage points.
const (
	// LineageChildCreated: the child exists; its parent has not recorded
	// it yet.
	LineageChildCreated LineagePoint = "child-created"
	// LineageChildEnded: the child's end is written; its parent has not
	// heard of it yet.
	LineageChildEnded LineagePoint = "child-ended"
	// LineageEndRecorded: the parent wrote the child's end (at each of the
	// parent's writes after).
	LineageEndRecorded LineagePoint = "end-recorded"
)

// SetWorkflow sets h as the test hooks of the bridge that opts, a
// *workflow.Options, configures (the hooks are copied with the options,
// as every field is). Package workflow installs it.
var SetWorkflow func(opts any, h Workflow)
