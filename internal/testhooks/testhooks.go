// Package testhooks holds the moments production code lets a test step
// into, so that a test can stop a server at an exact point (a replica
// "paused" right after a write) instead of hoping a sleep lands there.
// Every hook is nil unless a test sets it; nothing outside tests does.
// It imports nothing heavier than sync/atomic, so production packages may
// call it.
package testhooks

import (
	"context"
	"sync/atomic"
)

// ContinuationRecordedFunc is the type of ContinuationRecorded.
type ContinuationRecordedFunc func(ctx context.Context, taskID, step string)

var continuationRecorded atomic.Pointer[ContinuationRecordedFunc]

// SetContinuationRecorded makes f run in every workflow continuation
// (workflow's continueCall) of this process right after the client
// step's outcome was committed to the store, before the call sets off the
// steps that follow and answers. f may block: the call waits, as a paused
// replica would. It returns the function that removes f again. A test
// that sets it must not run in parallel with other tests of its binary
// that continue workflows, or must let f ignore their tasks (taskID).
func SetContinuationRecorded(f ContinuationRecordedFunc) (restore func()) {
	continuationRecorded.Store(&f)
	return func() { continuationRecorded.Store(nil) }
}

// ContinuationRecorded runs the hook set by SetContinuationRecorded, if
// any.
func ContinuationRecorded(ctx context.Context, taskID, step string) {
	if f := continuationRecorded.Load(); f != nil {
		(*f)(ctx, taskID, step)
	}
}
