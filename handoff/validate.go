package handoff

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/taskbridge/taskbridge/mcptask"
)

// statuses lists the valid statuses in the order error messages name them.
var statuses = []string{string(mcptask.StatusWorking), string(mcptask.StatusInputRequired), string(mcptask.StatusCompleted), string(mcptask.StatusFailed), string(mcptask.StatusCancelled)}

// stepStatuses lists the valid remaining-step statuses.
var stepStatuses = []mcptask.StepStatus{mcptask.StepPending, mcptask.StepRunning, mcptask.StepAwaitingClient, mcptask.StepAwaitingEvent, mcptask.StepSleeping, mcptask.StepAwaitingChild, mcptask.StepFailed, mcptask.StepCancelled}

// Validate reports the first problem that makes d unusable, as an error
// wrapping [ErrInvalid]: a schemaVersion outside [MinSchemaVersion] to
// [SchemaVersion], an
// empty taskId or workflow, an unknown status, a step without a name or
// tool, a remaining step with an unknown execution, a result or argument
// value that is not valid JSON (an empty argument value counts as
// invalid), a dependsOn entry that is empty or names its own step, an
// error without a step or message, duplicate step names across completed and remaining steps, or a continuation whose
// metaKey is not "_task_id", whose taskId differs from the document's or
// whose statusMethod is empty.
func (d *Document) Validate() error {
	if d == nil {
		return invalidf("document is nil")
	}
	switch {
	case d.SchemaVersion == 0:
		return invalidf("schemaVersion is missing (this package supports schemaVersions %d to %d)", MinSchemaVersion, SchemaVersion)
	case d.SchemaVersion < MinSchemaVersion || d.SchemaVersion > SchemaVersion:
		return invalidf("schemaVersion %d is not supported (this package supports schemaVersions %d to %d)", d.SchemaVersion, MinSchemaVersion, SchemaVersion)
	}
	if d.TaskID == "" {
		return invalidf("taskId is empty")
	}
	if d.Workflow == "" {
		return invalidf("workflow is empty")
	}
	if d.Status == "" {
		return invalidf("status is empty (want one of %s)", strings.Join(statuses, ", "))
	}
	if !validStatus(d.Status) {
		return invalidf("status %q is not one of %s", d.Status, strings.Join(statuses, ", "))
	}
	seen := make(map[string]string) // step name -> where it was first used
	for i, s := range d.CompletedSteps {
		where := fmt.Sprintf("completedSteps[%d]", i)
		if err := checkStep(where, s.Name, s.Tool, s.Kind, seen); err != nil {
			return err
		}
		if s.Result != nil && !json.Valid(s.Result) {
			return invalidf("%s: result is not valid JSON", where)
		}
	}
	for i := range d.RemainingSteps {
		if err := d.RemainingSteps[i].validate(fmt.Sprintf("remainingSteps[%d]", i), seen); err != nil {
			return err
		}
	}
	for i, s := range d.SkippedSteps {
		if err := checkStep(fmt.Sprintf("skippedSteps[%d]", i), s.Name, s.Tool, s.Kind, seen); err != nil {
			return err
		}
	}
	for i, e := range d.Errors {
		if e.Step == "" {
			return invalidf("errors[%d]: step is empty", i)
		}
		if e.Message == "" {
			return invalidf("errors[%d]: message is empty", i)
		}
	}
	return d.Continuation.validate(d.TaskID)
}

// validate checks remaining step s, at where, recording its name in seen.
func (s *RemainingStep) validate(where string, seen map[string]string) error {
	if err := checkStep(where, s.Name, s.Tool, s.Kind, seen); err != nil {
		return err
	}
	if s.Status != "" && !slices.Contains(stepStatuses, s.Status) {
		return invalidf("%s: status %q is not one of %s", where, s.Status, joined(stepStatuses))
	}
	switch s.Execution {
	case mcptask.ExecServer, mcptask.ExecClient:
	case "":
		return invalidf("%s: execution is empty (want %q or %q)", where, mcptask.ExecServer, mcptask.ExecClient)
	default:
		return invalidf("%s: execution %q is not %q or %q", where, s.Execution, mcptask.ExecServer, mcptask.ExecClient)
	}
	for _, k := range sortedKeys(s.Arguments) {
		v := s.Arguments[k]
		if len(v) == 0 {
			return invalidf("%s: arguments[%q] is empty (use json.RawMessage(\"null\") for null)", where, k)
		}
		if !json.Valid(v) {
			return invalidf("%s: arguments[%q] is not valid JSON", where, k)
		}
	}
	for j, dep := range s.DependsOn {
		if dep == "" {
			return invalidf("%s: dependsOn[%d] is empty", where, j)
		}
		if dep == s.Name {
			return invalidf("%s: dependsOn[%d]: step %q depends on itself", where, j, dep)
		}
	}
	return nil
}

// validate checks the continuation of the document of task taskID.
func (c Continuation) validate(taskID string) error {
	if c.Argument != "" && c.Argument != mcptask.ArgTaskID {
		return invalidf("continuation.argument is %q, want %q", c.Argument, mcptask.ArgTaskID)
	}
	if c.MetaKey != mcptask.MetaTaskID {
		return invalidf("continuation.metaKey is %q, want %q", c.MetaKey, mcptask.MetaTaskID)
	}
	if c.TaskID != taskID {
		return invalidf("continuation.taskId %q does not match taskId %q", c.TaskID, taskID)
	}
	if c.StatusMethod == "" {
		return invalidf("continuation.statusMethod is empty (want %q)", mcptask.MethodTasksGet)
	}
	return nil
}

func checkStep(where, name, tool, kind string, seen map[string]string) error {
	if name == "" {
		return invalidf("%s: name is empty", where)
	}
	switch {
	case kind == "":
		if tool == "" {
			return invalidf("%s: step %q: tool is empty", where, name)
		}
	case !validKind(kind):
		return invalidf("%s: step %q: kind %q is not a kind name (lowercase letters and underscores, like %q)", where, name, truncateRunes(kind, 40), string(mcptask.StepKindSleep))
	}
	if first, dup := seen[name]; dup {
		return invalidf("%s: duplicate step name %q (also %s)", where, name, first)
	}
	seen[name] = where
	return nil
}

func validStatus(s string) bool { return slices.Contains(statuses, s) }

// validKind reports whether kind is a kind's name: a lowercase letter,
// then lowercase letters and underscores, at most 32 bytes.
func validKind(kind string) bool {
	if kind == "" || len(kind) > 32 || kind[0] < 'a' || kind[0] > 'z' {
		return false
	}
	for _, r := range kind {
		if (r < 'a' || r > 'z') && r != '_' {
			return false
		}
	}
	return true
}

// joined lists values for an error message: "a, b, c".
func joined[S ~string](values []S) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}
