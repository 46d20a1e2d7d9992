package workflow

import "github.com/taskbridge/taskbridge/internal/testhooks"

// The test hooks' seam: the module's tests set a bridge's hooks
// (Options.hooks) through internal/testhooks, which no user can import.
func init() {
	testhooks.SetWorkflow = func(opts any, h testhooks.Workflow) { opts.(*Options).hooks = h }
}
