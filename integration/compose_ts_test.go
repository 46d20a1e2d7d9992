package integration

// Issue 29's step kinds end to end with the official TypeScript SDK
// client, on the real binaries, on bbolt and on PostgreSQL, in the three
// ways a client drives a workflow (node/ts-compose.mjs): host mode (no
// task calls: prompts/get or the workflow's tool, then each step's tool
// with _task_id), the core tasks dialect (2025-11-25: the workflow's tool
// as a task-augmented call, tasks/get and tasks/result) and the tasks
// extension (2026-07-28: every call the server makes a task, polled with
// tasks/get). Example 62's release_train runs its three ways (healthy,
// flaky, hang): a for-each of builds, a child workflow whose review the
// train's client performs with the child's id, deploys in sequence with an
// undo each, and per service a loop of smoke tests cut by a timeout; a
// failed train rolls every deploy back, last first. The test server
// (testdata/composeserver) adds what the train does not show: a for-each
// whose body the client performs (one entry per item, "TASK#review[i]")
// and a loop whose body the client performs ("TASK#ask[n]").

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/workflow"
)

// composeServer is testdata/composeserver on one store, journalling its
// tool calls to a file.
type composeServer struct {
	bin     string
	spec    string // a bbolt file or a postgres:// DSN
	journal string
	env     []string
	p       *proc
}

// newComposeServer prepares the server on store spec without starting
// it; env is added to the environment of every start.
func newComposeServer(t *testing.T, spec string, env ...string) *composeServer {
	t.Helper()
	return &composeServer{bin: exampleBinary(t, "./integration/testdata/composeserver"), spec: spec,
		journal: filepath.Join(t.TempDir(), "journal"), env: env}
}

// start (re)starts the server on the same store and journal with the
// extra flags args (-slow, -kill-at, -kill-in).
func (s *composeServer) start(t *testing.T, args ...string) {
	t.Helper()
	s.p = startProc(t, s.bin, s.env, append([]string{"-http", "ADDR", "-db", s.spec, "-journal", s.journal}, args...)...)
}

// died waits (bounded) for the server to end on its own (a -kill-at or
// -kill-in SIGKILL).
func (s *composeServer) died(t *testing.T) {
	t.Helper()
	select {
	case <-s.p.exited:
		require.Contains(t, s.p.log.String(), "KILLING myself", "the server ended another way")
	case <-time.After(30 * time.Second):
		t.Fatalf("the server did not kill itself: %s", s.p.log.String())
	}
}

// calls counts the journal's lines that start with prefix and end with
// what ("start", "end").
func (s *composeServer) calls(t *testing.T, prefix, what string) int {
	t.Helper()
	n := 0
	for _, l := range composeJournal(t, s.journal) {
		if strings.HasPrefix(l, prefix+" ") && strings.HasSuffix(l, " "+what) {
			n++
		}
	}
	return n
}

// composeJournal reads a journal's lines.
func composeJournal(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// composeTasks reads every task in the store at spec, by id (every task
// the engine creates has a ttl, so the expiry index asked for everything
// up to the far future holds them all). A bbolt file is held by its
// server: stop the server first.
func composeTasks(t *testing.T, spec string) map[string]*store.Task {
	t.Helper()
	st, err := builder.OpenStore(context.Background(), spec, nil)
	require.NoError(t, err)
	defer st.Close()
	all, err := st.Expired(context.Background(), time.Now().Add(100*365*24*time.Hour), 1<<20)
	require.NoError(t, err)
	out := map[string]*store.Task{}
	for _, tk := range all {
		out[tk.ID] = tk
	}
	return out
}

// childrenOf are the tasks whose parent is id.
func childrenOf(tasks map[string]*store.Task, id string) []*store.Task {
	var out []*store.Task
	for _, tk := range tasks {
		if tk.Labels[workflow.LabelParent] == id {
			out = append(out, tk)
		}
	}
	return out
}

// composeRun is one workflow run of ts-compose.mjs.
type composeRun struct {
	Label    string                    `json:"label"`
	Workflow string                    `json:"workflow"`
	Start    string                    `json:"start"` // "prompt" or "tool"
	Args     map[string]any            `json:"args,omitempty"`
	Fill     map[string]any            `json:"fill,omitempty"`
	FillFor  map[string]map[string]any `json:"fillFor,omitempty"`
}

// composeEntry is a handoff entry the run was offered, or performed.
type composeEntry struct {
	Name        string                     `json:"name"`
	Ref         string                     `json:"ref"` // the _task_id its call sends
	Tool        string                     `json:"tool"`
	Server      map[string]json.RawMessage `json:"server"` // the arguments the server adds
	IsError     bool                       `json:"isError"`
	AsTask      bool                       `json:"asTask"`
	AnsweredFor string                     `json:"answeredFor"` // the task whose handoff the answer carried
	Text        string                     `json:"text"`
}

// composeOut is what ts-compose.mjs saw of a run.
type composeOut struct {
	OK            bool                       `json:"ok"`
	Error         any                        `json:"error"`
	TaskID        string                     `json:"taskId"`
	StartedAsTask bool                       `json:"startedAsTask"`
	Offered       []composeEntry             `json:"offered"`
	Performed     []composeEntry             `json:"performed"`
	Status        string                     `json:"status"`
	StatusMessage string                     `json:"statusMessage"`
	PauseReason   string                     `json:"pauseReason"`
	IsError       bool                       `json:"isError"`
	Text          string                     `json:"text"`
	RelatedTask   string                     `json:"relatedTask"`
	Completed     []string                   `json:"completed"`
	Outputs       map[string]json.RawMessage `json:"outputs"`
	Undo          []handoff.UndoStep         `json:"undo"`
	// FinalHandoff: the client read the handoff of the workflow's end (a
	// model in host mode that waits with task_result reads a failed
	// workflow's status message only).
	FinalHandoff bool `json:"finalHandoff"`
}

// message is the run's end as the client read it: the task's status
// message, or the final handoff's pause reason.
func (o composeOut) message() string {
	if o.StatusMessage != "" {
		return o.StatusMessage
	}
	return o.PauseReason
}

// offered returns the entry the run was offered under name.
func (o composeOut) offered(t *testing.T, name string) composeEntry {
	t.Helper()
	for _, e := range o.Offered {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("entry %q was never offered: %+v", name, o.Offered)
	return composeEntry{}
}

// composeTS runs ts-compose.mjs in mode against url, the runs at once,
// and returns what it saw of each, by label, failing the test if a run
// failed.
func composeTS(t *testing.T, url, mode string, runs ...composeRun) map[string]composeOut {
	t.Helper()
	modules := nodeModules(t)
	raw, err := json.Marshal(map[string]any{"mode": mode, "runs": runs})
	require.NoError(t, err)
	steps := runTS(t, filepath.Join(modules, "..", "ts-compose.mjs"), url, string(raw))
	out := map[string]composeOut{}
	for _, r := range runs {
		s, ok := steps["run:"+r.Label]
		require.True(t, ok, "no line for run %s: %v", r.Label, steps)
		b, err := json.Marshal(s)
		require.NoError(t, err)
		var o composeOut
		require.NoError(t, json.Unmarshal(b, &o))
		require.True(t, o.OK, "%s run %s failed: %v", mode, r.Label, o.Error)
		out[r.Label] = o
	}
	return out
}

// composeModes are the ways ts-compose.mjs drives a workflow.
var composeModes = []string{"host", "core", "ext"}

// trainFill is what the train's client answers the child's review.
var trainFill = map[string]any{"approved": true, "feedback": "ship it"}

// TestComposedKindsTypeScript: see the top of this file.
func TestComposedKindsTypeScript(t *testing.T) {
	for _, backend := range canaryBackends {
		t.Run(backend.name, func(t *testing.T) {
			train := newCanaryServer(t, backend.spec(t))
			kinds := newComposeServer(t, backend.spec(t))
			kinds.start(t)
			var mu sync.Mutex
			trains := map[string]map[string]composeOut{} // mode -> label -> run
			kindRuns := map[string]map[string]composeOut{}
			t.Run("modes", func(t *testing.T) {
				for _, mode := range composeModes {
					t.Run(mode, func(t *testing.T) {
						t.Parallel()
						got := composeTS(t, train.p.url, mode,
							composeRun{Label: "healthy", Workflow: "release_train", Start: "prompt",
								Args: map[string]any{"repo": "acme/shop", "services": "api, web"}, Fill: trainFill},
							composeRun{Label: "flaky", Workflow: "release_train", Start: "tool",
								Args: map[string]any{"repo": "acme/shop", "services": "api,flaky-web"}, Fill: trainFill},
							composeRun{Label: "hang", Workflow: "release_train", Start: "tool",
								Args: map[string]any{"repo": "acme/shop", "services": "hang-db,api"}, Fill: trainFill},
						)
						checkTrainRuns(t, mode, got)
						k := composeTS(t, kinds.p.url, mode,
							composeRun{Label: "reviews", Workflow: "reviews", Start: "tool",
								Args: map[string]any{"files": "a.go, b.go, c.go"}, Fill: map[string]any{"verdict": "ok"},
								FillFor: map[string]map[string]any{"review[1]": {"verdict": "a typo on line 3"}}},
							composeRun{Label: "quiz", Workflow: "quiz", Start: "prompt",
								Fill: map[string]any{"score": 9}, FillFor: map[string]map[string]any{"ask[1]": {"score": 3}}},
						)
						checkKindRuns(t, mode, k)
						mu.Lock()
						defer mu.Unlock()
						trains[mode], kindRuns[mode] = got, k
					})
				}
			})
			if t.Failed() {
				return
			}

			// What the store holds: each train's child is a task of its
			// own, linked to the train; the loops ran as the handoffs said.
			if train.bbolt() {
				train.p.kill()
			}
			tasks := composeTasks(t, train.spec)
			for mode, runs := range trains {
				for label, run := range runs {
					tk := tasks[run.TaskID]
					require.NotNil(t, tk, "%s %s: task %s", mode, label, run.TaskID)
					p := crashProgress(t, tk)
					kids := childrenOf(tasks, run.TaskID)
					require.Len(t, kids, 1, "%s %s: one child", mode, label)
					child := kids[0]
					require.Equal(t, run.offered(t, "notes/review").Ref, child.ID, "%s %s: the review was the child's", mode, label)
					require.Equal(t, "notes", child.Labels[workflow.LabelParentStep])
					require.Equal(t, tk.Owner, child.Owner, "the child is its parent's owner's")
					require.Equal(t, mcptask.StatusCompleted, child.Status, "%s %s: %s", mode, label, child.StatusMessage)
					notes := canaryStep(t, p, "notes")
					require.Equal(t, child.ID, notes.Child)
					require.Equal(t, 1, notes.Attempts)
					smoke := canaryStep(t, p, "smoke")
					switch label {
					case "healthy":
						for _, it := range smoke.Items {
							require.Equal(t, 1, it.Runs, "%s: healthy at the first try", mode)
						}
					case "flaky":
						require.Equal(t, 3, smoke.Items[1].Runs, "%s: three tries", mode)
					case "hang":
						hung := smoke.Items[0]
						require.Equal(t, 3, hung.Runs, "%s: three tries", mode)
						require.Contains(t, hung.Items[len(hung.Items)-1].Error, "timed out after 3s (the step's Timeout)", mode)
						require.NotNil(t, p.Undo, mode)
						require.Len(t, p.Undo.Steps, 2, mode)
					}
				}
			}
			// Each review of a for-each ran once, with its item's key.
			for mode, runs := range kindRuns {
				id := runs["reviews"].TaskID
				for i, file := range []string{"a.go", "b.go", "c.go"} {
					key := fmt.Sprintf("%s/review[%d]", id, i)
					require.Equal(t, 1, kinds.calls(t, "review_file "+file+" key="+key, "end"), "%s: %s", mode, key)
				}
			}
		})
	}
}

// checkTrainRuns checks release_train's three runs as the client saw
// them.
func checkTrainRuns(t *testing.T, mode string, runs map[string]composeOut) {
	t.Helper()
	for label, run := range runs {
		// The child's review: one entry of the train's handoff, called
		// with the child's id, answered with the train's handoff.
		review := run.offered(t, "notes/review")
		require.Equal(t, "review_notes", review.Tool, label)
		require.NotEqual(t, run.TaskID, review.Ref, "%s: the child's own id", label)
		require.Len(t, run.Performed, 1, "%s %s: the client performed the review only: %+v", mode, label, run.Performed)
		require.Equal(t, "notes/review", run.Performed[0].Name)
		require.Equal(t, run.TaskID, run.Performed[0].AnsweredFor, "%s: the answer shows the train", label)
		require.Contains(t, run.Performed[0].Text, "a child workflow of task "+run.TaskID, label)
		if mode != "host" && label != "healthy" { // healthy starts from prompts/get, which is never a task
			require.True(t, run.StartedAsTask, "%s %s: the workflow's tool call became a task", mode, label)
		}
		if mode == "core" && run.Status == "completed" {
			require.Equal(t, run.TaskID, run.RelatedTask, "tasks/result names the task")
		}
	}
	healthy := runs["healthy"]
	require.Equal(t, "completed", healthy.Status, "%s: %s", mode, healthy.message())
	require.Equal(t, []string{"build", "notes", "deploy", "smoke"}, healthy.Completed, mode)
	require.Empty(t, healthy.Undo)
	var deploys []struct {
		Service        string
		Started, Ended time.Time
	}
	require.NoError(t, json.Unmarshal(healthy.Outputs["deploy"], &deploys))
	require.Len(t, deploys, 2)
	require.False(t, deploys[1].Started.Before(deploys[0].Ended), "%s: the deploys ran one at a time: %+v", mode, deploys)
	var smoke []struct {
		Service string
		Healthy bool
	}
	require.NoError(t, json.Unmarshal(healthy.Outputs["smoke"], &smoke))
	require.Equal(t, []string{"api", "web"}, []string{smoke[0].Service, smoke[1].Service}, "one result per item, in order")
	require.True(t, smoke[0].Healthy && smoke[1].Healthy)
	var notes map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(healthy.Outputs["notes"], &notes))
	require.Contains(t, notes, "publish", "%s: the child's outputs are the step's", mode)

	rolledBack := []handoff.UndoStep{
		{Undoes: "deploy[1]", Tool: "rollback_service", Status: mcptask.StepCompleted},
		{Undoes: "deploy[0]", Tool: "rollback_service", Status: mcptask.StepCompleted},
	}
	flaky := runs["flaky"]
	requireFailedEnd(t, mode, flaky)
	require.Contains(t, flaky.message(), `step "smoke[1]" ran 3 time(s) without output "smoke_test" at healthy is true`, mode)
	require.Contains(t, flaky.message(), "undone, last first: deploy[1] (rollback_service), deploy[0] (rollback_service)", mode)
	if flaky.FinalHandoff || mode != "host" {
		require.Equal(t, rolledBack, flaky.Undo, "%s: every deploy rolled back, last first", mode)
	}

	hang := runs["hang"]
	requireFailedEnd(t, mode, hang)
	require.True(t, strings.HasPrefix(hang.message(), `step "smoke[0]"`), "%s: %s", mode, hang.message())
	require.Contains(t, hang.message(), "undone, last first: deploy[1] (rollback_service), deploy[0] (rollback_service)", mode)
	if hang.FinalHandoff || mode != "host" {
		require.Equal(t, rolledBack, hang.Undo, mode)
	}
}

// requireFailedEnd checks that run ended failed as mode reads a workflow
// task: failed (with the isError result from tasks/result, in the core
// dialect), or in the extension completed with an isError result (it
// keeps failed for JSON-RPC errors); a host's task_result is isError.
func requireFailedEnd(t *testing.T, mode string, run composeOut) {
	t.Helper()
	want := "failed"
	if mode == "ext" {
		want = "completed"
	}
	require.Equal(t, want, run.Status, mode)
	require.True(t, run.IsError, "%s: the end is an isError result", mode)
}

// checkKindRuns checks the test server's for-each and loop whose bodies
// the client performs.
func checkKindRuns(t *testing.T, mode string, runs map[string]composeOut) {
	t.Helper()
	reviews := runs["reviews"]
	require.Equal(t, "completed", reviews.Status, "%s: %s", mode, reviews.message())
	var names []string
	for i, e := range reviews.Performed {
		names = append(names, e.Name)
		require.Equal(t, fmt.Sprintf("%s#review[%d]", reviews.TaskID, i), e.Ref, "%s: each item is performed with its path", mode)
		require.Equal(t, reviews.TaskID, e.AnsweredFor)
		require.Contains(t, e.Text, fmt.Sprintf(`Step "review[%d]" is recorded`, i))
		require.JSONEq(t, fmt.Sprintf("%q", []string{"a.go", "b.go", "c.go"}[i]), string(reviews.offered(t, e.Name).Server["file"]),
			"the server adds the item")
	}
	require.Equal(t, []string{"review[0]", "review[1]", "review[2]"}, names, mode)
	require.Equal(t, []string{"review", "merge"}, reviews.Completed, mode)
	require.JSONEq(t, `[{"file":"a.go","verdict":"ok"},{"file":"b.go","verdict":"a typo on line 3"},{"file":"c.go","verdict":"ok"}]`,
		string(reviews.Outputs["review"]), "%s: the items' results, in order", mode)
	require.JSONEq(t, `{"merged":3}`, string(reviews.Outputs["merge"]))

	quiz := runs["quiz"]
	require.Equal(t, "completed", quiz.Status, "%s: %s", mode, quiz.message())
	require.Len(t, quiz.Performed, 2, "%s: a failed answer, then a pass: %+v", mode, quiz.Performed)
	for i, e := range quiz.Performed {
		require.Equal(t, fmt.Sprintf("ask[%d]", i+1), e.Name, mode)
		require.Equal(t, fmt.Sprintf("%s#ask[%d]", quiz.TaskID, i+1), e.Ref, "%s: each run is performed with its path", mode)
	}
	require.JSONEq(t, `{"score":9,"passed":true}`, string(quiz.Outputs["ask"]), "%s: the output of the run that passed", mode)
}
