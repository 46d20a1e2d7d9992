package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Versions. A task runs to its end on the definition it started with: the
// bridge records the version in the task (the LabelVersion label and
// Progress.Version), keeps every version registered under a workflow's
// name, starts new tasks on the newest, and continues each task on its
// own. A stored progress is checked against its definition before anything
// runs; a task whose version is not served, or whose progress does not
// match, gets an error value (ErrVersionNotServed, *MismatchError), never a
// nil dereference.

// VersionOf returns w's version: the declared Version, or one derived from
// the steps' names, kinds, tools, execution and bindings ("h" and twelve
// hex digits of their SHA-256).
func VersionOf(w *Definition) string {
	if w.Version != "" {
		return w.Version
	}
	return fingerprint(w)
}

// fingerprint hashes what makes a task's recorded progress meaningful
// under a definition: every step's name, kind, tool, execution, output
// binding, argument sources, condition, sleep, group membership and
// failure mode. Guidance, descriptions, retry and timeout settings are left
// out: changing them changes no recorded state.
func fingerprint(w *Definition) string {
	type src struct {
		Kind    SourceKind      `json:"k"`
		Name    string          `json:"n,omitempty"`
		Path    []string        `json:"p,omitempty"`
		Value   json.RawMessage `json:"v,omitempty"`
		Default json.RawMessage `json:"d,omitempty"`
	}
	srcOf := func(v *Source) *src {
		if v == nil {
			return nil
		}
		return &src{Kind: v.Kind, Name: v.Name, Path: v.Path, Value: compact(v.Value), Default: compact(v.Default)}
	}
	type step struct {
		Name      string         `json:"name"`
		Kind      StepKind       `json:"kind"`
		Tool      string         `json:"tool,omitempty"`
		Execution StepExecution  `json:"exec"`
		Output    string         `json:"out"`
		Args      map[string]src `json:"args,omitempty"`
		When      any            `json:"when,omitempty"`
		Sleep     time.Duration  `json:"sleep,omitempty"`
		For       *src           `json:"for,omitempty"`
		Until     *src           `json:"until,omitempty"`
		Group     string         `json:"group,omitempty"`
		FailFast  bool           `json:"failFast,omitempty"`
	}
	var steps []step
	add := func(s *Step, group *Step) {
		st := step{Name: s.Name, Kind: s.kind(), Tool: s.Tool, Execution: s.execution(), Output: s.binding(),
			Sleep: s.Duration, For: srcOf(s.For), Until: srcOf(s.Until)}
		if len(s.Args) > 0 {
			st.Args = map[string]src{}
			for k, v := range s.Args {
				st.Args[k] = *srcOf(&v)
			}
		}
		if s.Condition != nil {
			st.When = s.Condition.describe()
		}
		if group != nil {
			st.Group, st.FailFast = group.Name, group.FailFast
		}
		steps = append(steps, st)
	}
	for _, s := range w.Steps {
		switch {
		case s == nil:
		case s.kind() == KindGroup:
			for _, m := range s.Members {
				if m != nil {
					add(m, s)
				}
			}
		default:
			add(s, nil)
		}
	}
	b, _ := json.Marshal(steps) // map keys are sorted by encoding/json
	sum := sha256.Sum256(b)
	return "h" + hex.EncodeToString(sum[:6])
}

func compact(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	return marshal(v)
}

// ErrVersionNotServed is matched by the error of a task whose workflow
// version this server does not serve.
var ErrVersionNotServed = errors.New("workflow: version not served")

// versionError reports a task whose version is not registered.
type versionError struct {
	workflow, version string
	served            []string // the versions this server serves, oldest first
}

func (e *versionError) Error() string {
	v := fmt.Sprintf("version %q", e.version)
	if e.version == "" {
		v = "an unrecorded version whose steps match none of the served versions"
	}
	if len(e.served) == 0 {
		return fmt.Sprintf("workflow %q (%s) is not served by this server at all; the task cannot continue: deploy that workflow again to finish it", e.workflow, v)
	}
	return fmt.Sprintf("workflow %q %s is not served by this server (it serves %s); a task runs to its end on the version it started with: keep that version registered until its tasks finish (see \"Changing a workflow\")",
		e.workflow, v, quoteList(e.served))
}

func (e *versionError) Unwrap() error { return ErrVersionNotServed }

// MismatchError reports a stored progress that does not match the
// definition of the version it records: the same version was registered
// with other steps, or the record was damaged.
type MismatchError struct {
	Workflow, Version string
	Problems          []string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("the recorded progress of workflow %q version %q does not match that version's definition: %s; a changed definition needs a new version", e.Workflow, e.Version, strings.Join(e.Problems, "; "))
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}

// compiled is a registered definition: validated, versioned, indexed.
// Nothing in it changes after registration.
//
// steps are the steps that have progress, in order: a group's members in
// place of the group. They run in stages: a step alone is a stage, a
// group's members are one; a stage starts when the stages before it have
// ended (client steps aside: see plan).
type compiled struct {
	def         *Definition
	version     string
	fingerprint string
	steps       []*Step          // flat, in order; index i matches Progress.Steps[i]
	stage       []int            // stage of steps[i]
	stages      [][]int          // stage -> the indexes of its steps
	groupOf     map[string]*Step // member name -> its group
	byName      map[string]*Step
	index       map[string]int
}

func compile(w *Definition) *compiled {
	fp := fingerprint(w)
	version := w.Version
	if version == "" {
		version = fp
	}
	c := &compiled{def: w, version: version, fingerprint: fp, byName: map[string]*Step{}, index: map[string]int{}, groupOf: map[string]*Step{}}
	for stage, s := range w.Steps {
		members := []*Step{s}
		if s.kind() == KindGroup {
			members = s.Members
		}
		c.stages = append(c.stages, nil)
		for _, m := range members {
			c.stages[stage] = append(c.stages[stage], len(c.steps))
			c.index[m.Name] = len(c.steps)
			c.steps = append(c.steps, m)
			c.stage = append(c.stage, stage)
			c.byName[m.Name] = m
			if m != s {
				c.groupOf[m.Name] = s
			}
		}
	}
	return c
}

// flat returns w's steps with every group replaced by its members.
func (w *Definition) flat() []*Step {
	var out []*Step
	for _, s := range w.Steps {
		if s != nil && s.kind() == KindGroup {
			out = append(out, s.Members...)
			continue
		}
		out = append(out, s)
	}
	return out
}

// check reports how p does not match c's steps: the same steps in the same
// order, with the same tools and execution; nil when it matches.
func (c *compiled) check(p *Progress) error {
	var probs []string
	if len(p.Steps) != len(c.steps) {
		probs = append(probs, fmt.Sprintf("it records %d steps, the definition has %d", len(p.Steps), len(c.steps)))
	}
	for i := range min(len(p.Steps), len(c.steps)) {
		s, sp := c.steps[i], &p.Steps[i]
		switch {
		case sp.Name != s.Name:
			probs = append(probs, fmt.Sprintf("step %d is %q, the definition's is %q", i+1, sp.Name, s.Name))
		case sp.Tool != s.Tool:
			probs = append(probs, fmt.Sprintf("step %q calls tool %q, the definition's calls %q", s.Name, sp.Tool, s.Tool))
		case sp.Execution != string(s.execution()):
			probs = append(probs, fmt.Sprintf("step %q is a %s step, the definition's is a %s step", s.Name, sp.Execution, s.execution()))
		}
	}
	if len(probs) > 0 {
		return &MismatchError{Workflow: c.def.Name, Version: c.version, Problems: probs}
	}
	return nil
}

// versions is every registered version of one workflow.
type versions struct {
	byVersion map[string]*compiled
	order     []string // registration order; the last is the newest
	prompt    *TaskPromptHandler
	tool      bool // also served as a tool
}

func (v *versions) newest() *compiled { return v.byVersion[v.order[len(v.order)-1]] }

// find returns the version a task runs on: the one it recorded, or, for a
// task recorded before versions existed, the one whose steps its progress
// matches.
func (v *versions) find(name, recorded string, p *Progress) (*compiled, error) {
	if v == nil {
		return nil, &versionError{workflow: name, version: recorded}
	}
	if recorded != "" {
		if c, ok := v.byVersion[recorded]; ok {
			return c, nil
		}
		return nil, &versionError{workflow: name, version: recorded, served: slices.Clone(v.order)}
	}
	for _, ver := range slices.Backward(v.order) {
		if c := v.byVersion[ver]; c.check(p) == nil {
			return c, nil
		}
	}
	return nil, &versionError{workflow: name, served: slices.Clone(v.order)}
}

// add registers c, refusing a second definition under one version.
func (v *versions) add(c *compiled) error {
	if old, dup := v.byVersion[c.version]; dup {
		if old.fingerprint == c.fingerprint {
			return fmt.Errorf("workflow %q version %q is already registered", c.def.Name, c.version)
		}
		return fmt.Errorf("workflow %q version %q is registered twice with different steps: a changed definition needs a new version (WithVersion), or leave the version empty to derive it", c.def.Name, c.version)
	}
	v.byVersion[c.version] = c
	v.order = append(v.order, c.version)
	return nil
}

// servedVersions lists the versions, oldest first.
func (v *versions) servedVersions() []string { return slices.Clone(v.order) }
