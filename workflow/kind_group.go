package workflow

import (
	"fmt"
	"strings"

	"github.com/taskbridge/taskbridge/mcptask"
)

// A parallel group holds steps that start together: the server runs its
// server steps concurrently, and the client may perform its client steps
// in any order. The group ends when every member has ended. It fails
// fast (StopOnFailure: the first member the server gives up on stops the
// others, recorded as cancelled, and fails the workflow) or collects
// (every member runs to its end, each failure follows its own policy, and
// a member whose failure fails the workflow does so once the group has
// ended). Members may not read each other's outputs, nor be groups. A
// fork from the group, or from one of its members, runs the whole group
// again.

// group is the kind of Parallel steps.
type group struct {
	base
	steps    []*Step
	failFast bool
}

// Parallel returns a group of steps that start together (see group).
func Parallel(name string, members ...*Step) *Step {
	return newStep(name, &group{steps: members})
}

func (k *group) name() mcptask.StepKind { return mcptask.StepKindGroup }
func (k *group) members() []*Step       { return k.steps }
func (k *group) stopOnFailure()         { k.failFast = true }
func (k *group) print() any             { return printed{FailFast: k.failFast} }

func (k *group) check(c *checker) {
	if len(k.steps) == 0 {
		c.add("it has no steps: give Parallel at least one")
	}
	if c.step.Condition != nil {
		c.add("a group has no condition: put conditions on its steps")
	}
	for _, m := range k.steps {
		if m != nil && m.kind != nil && len(m.kind.members()) > 0 {
			c.add("step %q is a group: groups do not nest", m.Name)
		}
	}
}

// memberGaveUp: a group that fails fast fails the workflow at once and
// stops its other members; one that collects holds a member's failure
// until the group has ended.
func (k *group) memberGaveUp(self, m *Step, msg string, fails bool) (failure string, stopOthers, hold bool) {
	if k.failFast {
		return fmt.Sprintf("%s of group %q failed: %s; the group fails fast, so the workflow failed", toolLine(m), self.Name, oneLine(msg)), true, false
	}
	return "", false, fails
}

// stageFailed words the failure of a group whose members have all ended,
// some given up on (held failures).
func (k *group) stageFailed(self *Step, gaveUp []string) string {
	return fmt.Sprintf("group %q failed: %s; the workflow failed", self.Name, strings.Join(gaveUp, "; "))
}

// together completes the status line of members running at once.
func (k *group) together(self *Step) string { return fmt.Sprintf(" of group %q together", self.Name) }

// stopped is why a member stopped by a failing sibling did not end.
func (k *group) stopped(self *Step) string {
	return fmt.Sprintf("stopped: another step of group %q failed and the group fails fast", self.Name)
}
