package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"slices"
	"strings"
	"time"
)

// Versions. A task runs to its end on the definition it started with: the
// bridge records the version in the task (the LabelVersion label and
// Progress.Version) with the fingerprint of that definition
// (LabelFingerprint, and each step's StepProgress.Print), keeps every
// version registered under a workflow's name, starts new tasks on the
// newest, and continues each task on its own. A stored progress is
// checked against its definition before anything runs; a task whose
// version is not served, whose definition changed under its declared
// version, or whose progress does not match, gets an error value
// (ErrVersionNotServed, *MismatchError), never a nil dereference.

// VersionOf returns w's version: the declared Version, or one derived from
// what the fingerprint covers ("h" and twelve hex digits of its SHA-256).
func VersionOf(w *Definition) string {
	if w.Version != "" {
		return w.Version
	}
	return fingerprint(w)
}

// printed is what a kind adds to the fingerprint (kind.print): the tool
// and argument bindings of a tool step, a sleep's length or sources, a
// container's failure mode (copied onto its members), and Extra for what
// later kinds add.
type printed struct {
	Tool     string
	Args     map[string]printedSource
	Length   time.Duration
	For      *printedSource
	Until    *printedSource
	FailFast bool
	Extra    any
}

// printedSource is a source as the fingerprint sees it.
type printedSource struct {
	Kind    SourceKind      `json:"k"`
	Name    string          `json:"n,omitempty"`
	Path    []string        `json:"p,omitempty"`
	Value   json.RawMessage `json:"v,omitempty"`
	Default json.RawMessage `json:"d,omitempty"`
}

func printSource(v Source) printedSource {
	return printedSource{Kind: v.Kind, Name: v.Name, Path: v.Path, Value: compact(v.Value), Default: compact(v.Default)}
}

func printSourcePtr(v *Source) *printedSource {
	if v == nil {
		return nil
	}
	p := printSource(*v)
	return &p
}

// printedStep is one step of the fingerprint. Its fields and their order
// are fixed: the derived version of a definition must not change when
// taskbridge does (TestFingerprintStable pins it).
type printedStep struct {
	Name      string                   `json:"name"`
	Kind      mcptask.StepKind         `json:"kind"`
	Tool      string                   `json:"tool,omitempty"`
	Execution mcptask.Execution        `json:"exec"`
	Output    string                   `json:"out"`
	Args      map[string]printedSource `json:"args,omitempty"`
	When      any                      `json:"when,omitempty"`
	Length    time.Duration            `json:"sleep,omitempty"`
	For       *printedSource           `json:"for,omitempty"`
	Until     *printedSource           `json:"until,omitempty"`
	Group     string                   `json:"group,omitempty"`
	FailFast  bool                     `json:"failFast,omitempty"`
	Extra     any                      `json:"x,omitempty"`
	Undo      *printedStep             `json:"undo,omitempty"`
}

// prints returns the fingerprint's steps of w: every step that has
// progress (a container's members, with the container's name and
// failure mode), with its name, kind, execution, output binding,
// condition and what its kind adds. Guidance, descriptions, retry and
// timeout settings are left out: changing them changes no recorded
// state.
func prints(w *Definition) []printedStep {
	var out []printedStep
	add := func(s *Step, container *Step) { out = append(out, printOf(s, container)) }
	for _, s := range w.Steps {
		switch {
		case s == nil || s.kind == nil:
		case len(s.kind.members()) > 0:
			for _, m := range s.kind.members() {
				if m != nil && m.kind != nil {
					add(m, s)
				}
			}
		default:
			add(s, nil)
		}
	}
	return out
}

// printOf is step s's part of the fingerprint (a member of container
// when set); a container kind prints its body with it.
func printOf(s *Step, container *Step) printedStep {
	st := printedStep{Name: s.Name, Kind: s.Kind(), Execution: s.Execution(), Output: s.binding()}
	if s.kind != nil {
		if pr, ok := s.kind.print().(printed); ok {
			st.Tool, st.Args, st.Length, st.For, st.Until, st.Extra = pr.Tool, pr.Args, pr.Length, pr.For, pr.Until, pr.Extra
		}
	}
	if s.Condition != nil {
		st.When = s.Condition.describe()
	}
	if s.undo != nil {
		u := printOf(s.undo, nil)
		st.Undo = &u
	}
	if container != nil {
		st.Group = container.Name
		if pr, ok := container.kind.print().(printed); ok {
			st.FailFast = pr.FailFast
		}
	}
	return st
}

// fingerprint hashes what makes a task's recorded progress meaningful
// under a definition (see prints).
func fingerprint(w *Definition) string {
	b, _ := json.Marshal(prints(w)) // map keys are sorted by encoding/json
	sum := sha256.Sum256(b)
	return "h" + hex.EncodeToString(sum[:6])
}

// stepPrint is a step's own fingerprint, kept in its record
// (StepProgress.Print): four short hashes, of what it is (name, kind,
// tool, execution, output), of its argument bindings, of its condition,
// and of the rest (a sleep, its container), so that a definition changed
// under a declared version names what changed.
func stepPrint(st printedStep) string {
	h := func(v any) string {
		b, _ := json.Marshal(v)
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:2])
	}
	return strings.Join([]string{
		h([]any{st.Name, st.Kind, st.Tool, st.Execution, st.Output}),
		h(st.Args),
		h(st.When),
		h([]any{st.Length, st.For, st.Until, st.Group, st.FailFast, st.Extra}),
	}, ".")
}

// printChanges words how a step's recorded print differs from now.
func printChanges(was, now string) string {
	a, b := strings.Split(was, "."), strings.Split(now, ".")
	if len(a) != 4 || len(b) != 4 {
		return "it changed"
	}
	var parts []string
	for i, what := range []string{"its kind, tool or output", "its argument bindings", "its condition", "its kind's settings (a sleep's length, its group)"} {
		if a[i] != b[i] {
			parts = append(parts, what)
		}
	}
	switch len(parts) {
	case 0:
		return "it changed"
	case 1:
		return parts[0] + " changed"
	}
	return strings.Join(parts[:len(parts)-1], "; ") + " and " + parts[len(parts)-1] + " changed"
}

// ErrVersionNotServed is matched by the error of a task whose workflow
// version this server does not serve (nor the definition it started on,
// under a version declared again with other steps).
var ErrVersionNotServed = errors.New("workflow: version not served")

// versionError reports a task whose version is not registered.
type versionError struct {
	workflow, version string
	served            []string // the versions this server serves, oldest first
	changed           []string // for a declared version registered with another definition: what changed
}

func (e *versionError) Error() string {
	v := fmt.Sprintf("version %q", e.version)
	if e.version == "" {
		v = "an unrecorded version whose steps match none of the served versions"
	}
	switch {
	case len(e.changed) > 0:
		return fmt.Sprintf("workflow %q %s is served with a definition other than the one this task started on (%s); a task never switches definitions silently: register the changed definition under a new version (WithVersion) and keep the old one until its tasks finish, or fork the task onto a served version",
			e.workflow, v, strings.Join(e.changed, "; "))
	case len(e.served) == 0:
		return fmt.Sprintf("workflow %q (%s) is not served by this server at all; the task cannot continue: deploy that workflow again to finish it", e.workflow, v)
	}
	return fmt.Sprintf("workflow %q %s is not served by this server (it serves %s); a task runs to its end on the version it started with: keep that version registered until its tasks finish (see \"Changing a workflow\"), or fork the task onto a served version",
		e.workflow, v, quoteList(e.served))
}

func (e *versionError) Unwrap() error { return ErrVersionNotServed }

// MismatchError reports a stored progress that does not match the
// definition of the version it records: the record was damaged, or
// written by a definition nobody recorded the fingerprint of.
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
// steps are the steps that have progress, in order: a container's members
// in place of the container. They run in stages: a step alone is a
// stage, a container's members are one; a stage starts when the stages
// before it have ended (client steps aside: see plan).
type compiled struct {
	def         *Definition
	version     string
	fingerprint string
	steps       []*Step          // flat, in order; index i matches Progress.Steps[i]
	prints      []string         // stepPrint of steps[i]
	stage       []int            // stage of steps[i]
	stages      [][]int          // stage -> the indexes of its steps
	container   []*Step          // stage -> its container (nil for a lone step)
	parent      map[string]*Step // member name -> its container
	byName      map[string]*Step
	index       map[string]int
	schemas     map[string]toolSchema // the input schemas of the tools the steps call, as registered
}

func compile(w *Definition) *compiled {
	fp := fingerprint(w)
	version := w.Version
	if version == "" {
		version = fp
	}
	c := &compiled{def: w, version: version, fingerprint: fp, byName: map[string]*Step{}, index: map[string]int{}, parent: map[string]*Step{}, schemas: map[string]toolSchema{}}
	for _, st := range prints(w) {
		c.prints = append(c.prints, stepPrint(st))
	}
	for stage, s := range w.Steps {
		members, container := []*Step{s}, (*Step)(nil)
		if len(s.kind.members()) > 0 {
			members, container = s.kind.members(), s
		}
		c.stages = append(c.stages, nil)
		c.container = append(c.container, container)
		for _, m := range members {
			c.stages[stage] = append(c.stages[stage], len(c.steps))
			c.index[m.Name] = len(c.steps)
			c.steps = append(c.steps, m)
			c.stage = append(c.stage, stage)
			c.byName[m.Name] = m
			if container != nil {
				c.parent[m.Name] = container
			}
		}
	}
	return c
}

// check reports how p does not match c's steps: the same steps in the
// same order, with the same tools and execution, and (when p records
// them) the same fingerprints; nil when it matches.
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
		case sp.Tool != toolOf(s):
			probs = append(probs, fmt.Sprintf("step %q calls tool %q, the definition's calls %q", s.Name, sp.Tool, toolOf(s)))
		case sp.Execution != string(s.Execution()):
			probs = append(probs, fmt.Sprintf("step %q is a %s step, the definition's is a %s step", s.Name, sp.Execution, s.Execution()))
		}
	}
	if len(probs) > 0 {
		return &MismatchError{Workflow: c.def.Name, Version: c.version, Problems: probs}
	}
	return nil
}

// changes names what differs between the definition a task started on
// (its recorded fingerprint and step prints) and c; nil when nothing
// does, or the task recorded no fingerprint (it started before
// fingerprints were kept).
func (c *compiled) changes(recorded string, p *Progress) []string {
	if recorded == "" || recorded == c.fingerprint {
		return nil
	}
	var out []string
	now := map[string]string{}
	for i, s := range c.steps {
		now[s.Name] = c.prints[i]
	}
	was := map[string]bool{}
	for i := range p.Steps {
		sp := &p.Steps[i]
		was[sp.Name] = true
		cur, ok := now[sp.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("step %q was removed", sp.Name))
		case sp.Print != "" && sp.Print != cur:
			out = append(out, fmt.Sprintf("step %q: %s", sp.Name, printChanges(sp.Print, cur)))
		}
	}
	for _, s := range c.steps {
		if !was[s.Name] {
			out = append(out, fmt.Sprintf("step %q was added", s.Name))
		}
	}
	if len(out) == 0 {
		out = append(out, "the order of its steps, or what they share, changed")
	}
	return out
}

// versions is every registered version of one workflow.
type versions struct {
	byVersion map[string]*compiled
	order     []string // registration order; the last is the newest
	prompt    *TaskPromptHandler
	tool      bool // also served as a tool
}

func (v *versions) newest() *compiled { return v.byVersion[v.order[len(v.order)-1]] }

// find returns the version a task runs on: the one it recorded (and, when
// it recorded a fingerprint, with that fingerprint), or, for a task
// recorded before versions existed, the one whose steps its progress
// matches.
func (v *versions) find(name, recorded, print string, p *Progress) (*compiled, error) {
	if v == nil {
		return nil, &versionError{workflow: name, version: recorded}
	}
	if recorded != "" {
		c, ok := v.byVersion[recorded]
		if !ok {
			return nil, &versionError{workflow: name, version: recorded, served: slices.Clone(v.order)}
		}
		if changed := c.changes(print, p); len(changed) > 0 {
			return nil, &versionError{workflow: name, version: recorded, served: slices.Clone(v.order), changed: changed}
		}
		return c, nil
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
