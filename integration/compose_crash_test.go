package integration

// Issue 29's kinds across SIGKILLs, on real processes
// (testdata/composeserver) on bbolt and PostgreSQL: a for-each killed
// mid-fan-out runs again only its unfinished items; a child workflow's
// end reaches its parent exactly once whichever write the kill falls
// between (the server kills itself at each lineage point); cancelling a
// parent cancels its child across a restart; a compensation killed
// mid-undo runs that undo again (same idempotency key) and the rest once,
// and fails saying what it undid. Each tool call is journalled to a file
// the kills cannot lose, so the tests count calls, not guess them.

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/testhooks"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/workflow"
)

// composeLease lets a restarted process on PostgreSQL take the dead one's
// tasks over soon (bbolt needs none: the restart recovers them).
const composeLease = "TASKBRIDGE_LEASE_DURATION=2s"

// composeKey matches a journal line's idempotency key: the task, then the
// record's path.
var composeKey = regexp.MustCompile(` key=([0-9a-f]{32})/(\S+) `)

// journalTask is the task of the first journal line of tool (its
// idempotency key names the task), for a test whose server died before
// it answered with the task id.
func (s *composeServer) journalTask(t *testing.T, tool string) string {
	t.Helper()
	for _, l := range composeJournal(t, s.journal) {
		if strings.HasPrefix(l, tool+" ") {
			if m := composeKey.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		}
	}
	t.Fatalf("no call of %s in the journal: %q", tool, composeJournal(t, s.journal))
	return ""
}

// keysOf are the idempotency keys of the journal's lines that start with
// prefix and end with what.
func (s *composeServer) keysOf(t *testing.T, prefix, what string) []string {
	t.Helper()
	var out []string
	for _, l := range composeJournal(t, s.journal) {
		if strings.HasPrefix(l, prefix+" ") && strings.HasSuffix(l, " "+what) {
			if m := composeKey.FindStringSubmatch(l); m != nil {
				out = append(out, m[1]+"/"+m[2])
			}
		}
	}
	return out
}

// ext is an extension-dialect client of the running server (no session:
// its tasks survive the process, owned by "local").
func (s *composeServer) ext() *relClient {
	return newRelClient(s.p.url, newRelHTTPClient(2), relExt, "")
}

// startPrompt gets workflow name's prompt in the background (the server
// may die before it answers).
func (s *composeServer) startPrompt(t *testing.T, name string, args map[string]any) {
	t.Helper()
	c := s.ext()
	ctx := relCtx(t, time.Minute)
	go func() { _, _ = c.call(ctx, "prompts/get", map[string]any{"name": name, "arguments": args}) }()
}

// composeWait bounds a wait for a task to move after a restart. On
// PostgreSQL a poke the killed process did not make (a child's end, told
// its parent) is made up by the parent's own look at its child, every
// minute (workflow's childCheck): the bound leaves room for one.
const composeWait = 100 * time.Second

// waitStatus polls task id (tasks/get) until its status message contains
// want, or it ends. Each call is bounded on its own, so a call the server
// never answers fails the test with the server's log as it is then.
func (s *composeServer) waitStatus(t *testing.T, id, want string) map[string]any {
	t.Helper()
	c := s.ext()
	var got map[string]any
	var last any // the last refusal, for the failure message
	for deadline := time.Now().Add(composeWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rep, err := c.call(ctx, "tasks/get", map[string]any{"taskId": id})
		cancel()
		if err != nil || rep.Err != nil {
			last = err
			if err == nil {
				last = rep
			}
			continue // a restarted process on PostgreSQL may still wait for the lease
		}
		got = rep.Map()
		msg, _ := got["statusMessage"].(string)
		if strings.Contains(msg, want) || relTerminal(fmt.Sprint(got["status"])) {
			return got
		}
	}
	t.Fatalf("task %s never said %q: %v (last refusal: %v)\n%s", id, want, got, last, s.p.log.String())
	return nil
}

// waitEnd polls task id until it ends and returns it.
func (s *composeServer) waitEnd(t *testing.T, id string) map[string]any {
	t.Helper()
	got := s.waitStatus(t, id, "\x00never")
	require.True(t, relTerminal(fmt.Sprint(got["status"])), "%v", got)
	return got
}

// task reads task id and its progress from the store (stopping the
// server on bbolt, which holds the file).
func (s *composeServer) task(t *testing.T, id string) (*store.Task, *workflow.Progress, map[string]*store.Task) {
	t.Helper()
	if !strings.HasPrefix(s.spec, "postgres") {
		s.p.kill()
	}
	tasks := composeTasks(t, s.spec)
	tk := tasks[id]
	require.NotNil(t, tk, "task %s", id)
	return tk, crashProgress(t, tk), tasks
}

// TestForEachSIGKILLMidFanOut: a for-each of five items, two at once, is
// killed while two slow items run (one item done, two not started): after
// the restart the two slow items run again, the others once, and the
// outputs keep the items' order.
func TestForEachSIGKILLMidFanOut(t *testing.T) {
	for _, backend := range canaryBackends {
		t.Run(backend.name, func(t *testing.T) {
			s := newComposeServer(t, backend.spec(t), composeLease, "TASKBRIDGE_PROMPT_WAIT=50ms")
			s.start(t, "-slow", "1h")
			items := []string{"fast1", "slow1", "slow2", "fast2", "fast3"}
			ctx := relCtx(t, time.Minute)
			doc := relHandoff(t, s.ext().must(t, ctx, "prompts/get", map[string]any{"name": "fanout",
				"arguments": map[string]any{"items": strings.Join(items, ",")}}))
			id := doc.TaskID
			s.waitStatus(t, id, `step "build": 1 of 5 items done, 2 running (tool "build_item" per item)`)
			// The engine records the attempts running before it calls the
			// tools, which journal their start a moment later: the kill
			// waits for both, or it can cut an item before its tool started.
			for deadline := time.Now().Add(composeWait); s.calls(t, "build_item slow1", "start") == 0 || s.calls(t, "build_item slow2", "start") == 0; time.Sleep(20 * time.Millisecond) {
				require.True(t, time.Now().Before(deadline), "the slow items' tools never started:\n%s", s.p.log.String())
			}
			require.Equal(t, 1, s.calls(t, "build_item fast1", "end"))
			require.Equal(t, 1, s.calls(t, "build_item slow1", "start"))
			require.Equal(t, 1, s.calls(t, "build_item slow2", "start"))
			require.Zero(t, s.calls(t, "build_item fast2", "start"), "the limit holds it back")
			s.p.kill()
			killed := time.Now()

			s.start(t, "-slow", "0s")
			end := s.waitEnd(t, id)
			require.Equal(t, "completed", end["status"], "%v", end)
			for _, item := range items {
				want := 1
				if strings.HasPrefix(item, "slow") {
					want = 2 // cut by the kill, run again
				}
				require.Equal(t, want, s.calls(t, "build_item "+item, "start"), "%s: runs", item)
				require.Equal(t, 1, s.calls(t, "build_item "+item, "end"), "%s: finished runs", item)
			}
			require.Equal(t, 1, s.calls(t, "report_items -", "end"))

			_, p, _ := s.task(t, id)
			build := canaryStep(t, p, "build")
			for i, it := range build.Items {
				require.Equal(t, mcptask.StepCompleted, it.Status, it.Name)
				last := it.History[len(it.History)-1]
				if strings.HasPrefix(items[i], "slow") {
					require.Equal(t, 2, it.Attempts, it.Name)
					require.Equal(t, backend.rerun, last.Reason, "%s: %+v", it.Name, it.History)
					require.True(t, last.At.After(killed), it.Name)
				} else {
					require.Equal(t, 1, it.Attempts, it.Name)
				}
			}
			require.JSONEq(t, `[{"built":"fast1"},{"built":"slow1"},{"built":"slow2"},{"built":"fast2"},{"built":"fast3"}]`, string(p.Outputs["build"]))
		})
	}
}

// TestChildSIGKILLAtEachLineagePoint: the server kills itself at each
// point where a train and its child workflow are out of step (the child
// exists but its parent has not recorded it; the child ended but its
// parent has not heard; the parent recorded the end) and restarts; the
// child's end reaches the parent exactly once: one child task, the
// parent's step recorded once, the steps after it run once, and the
// train completes.
func TestChildSIGKILLAtEachLineagePoint(t *testing.T) {
	points := []testhooks.LineagePoint{testhooks.LineageChildCreated, testhooks.LineageChildEnded, testhooks.LineageEndRecorded}
	for _, backend := range canaryBackends {
		t.Run(backend.name, func(t *testing.T) {
			for _, point := range points {
				t.Run(string(point), func(t *testing.T) {
					s := newComposeServer(t, backend.spec(t), composeLease)
					s.start(t, "-kill-at", string(point))
					var id string
					if point == testhooks.LineageChildCreated {
						s.startPrompt(t, "train", map[string]any{"repo": "acme"})
						s.died(t)
						id = s.journalTask(t, "build")
					} else {
						ctx := relCtx(t, time.Minute)
						doc := relHandoff(t, s.ext().must(t, ctx, "prompts/get", map[string]any{"name": "train", "arguments": map[string]any{"repo": "acme"}}))
						id = doc.TaskID
						review := composeReview(t, doc)
						// The review ends the child: the kill comes before
						// the call answers.
						rep, err := s.ext().call(ctx, "tools/call", map[string]any{"name": "review_notes",
							"arguments": map[string]any{"_task_id": review, "approved": true}})
						require.True(t, err != nil || rep.Err != nil || !rep.IsRPC(), "the call answered: %v", rep)
						s.died(t)
					}

					s.start(t)
					ctx := relCtx(t, time.Minute)
					if point == testhooks.LineageChildCreated {
						// The child waits for its review, which the
						// train's handoff offers.
						s.waitStatus(t, id, "waits for the client")
						doc := relHandoff(t, s.ext().must(t, ctx, "prompts/get", map[string]any{"name": "train", "_meta": map[string]any{mcptask.MetaTaskID: id}}))
						rep := s.ext().must(t, ctx, "tools/call", map[string]any{"name": "review_notes",
							"arguments": map[string]any{"_task_id": composeReview(t, doc), "approved": true}})
						require.NotEqual(t, true, rep["isError"], "%v", rep)
					}
					end := s.waitEnd(t, id)
					require.Equal(t, "completed", end["status"], "%v\n%s", end, s.p.log.String())

					_, p, tasks := s.task(t, id)
					kids := childrenOf(tasks, id)
					require.Len(t, kids, 1, "one child task")
					require.Equal(t, mcptask.StatusCompleted, kids[0].Status, kids[0].StatusMessage)
					notes := canaryStep(t, p, "notes")
					require.Equal(t, kids[0].ID, notes.Child)
					require.Equal(t, mcptask.StepCompleted, notes.Status)
					require.Equal(t, 1, notes.Attempts, "the step was recorded once: %+v", notes.History)
					require.Len(t, notes.History, 1)
					require.Equal(t, 1, s.calls(t, "ship -", "start"), "the step after the child ran once")
					require.Equal(t, 1, s.calls(t, "ship -", "end"))
					// build's outcome is written in the pass that starts the
					// child: a kill between the child's creation and that
					// write runs build again, with its key (at least once).
					builds := s.keysOf(t, "build -", "end")
					require.NotEmpty(t, builds)
					for _, k := range builds {
						require.Equal(t, id+"/build", k)
					}
					if point != testhooks.LineageChildCreated {
						require.Len(t, builds, 1, "build ran once")
					}
					require.Equal(t, 1, s.calls(t, "review_notes true", "end"), "the child's review was performed once")
					require.Equal(t, 1, s.calls(t, "publish -", "end"), "the child published once")
				})
			}
		})
	}
}

// composeReview is the child's task id the train's handoff gives its
// review with (the entry "notes/review").
func composeReview(t *testing.T, doc *handoff.Document) string {
	t.Helper()
	for _, rs := range doc.RemainingSteps {
		if rs.Name == "notes/review" && rs.Call != nil {
			var id string
			require.NoError(t, json.Unmarshal(rs.Call.Arguments[mcptask.ArgTaskID], &id))
			require.NotEqual(t, doc.TaskID, id, "the child's id")
			return id
		}
	}
	t.Fatalf("the handoff offers no notes/review: %+v", doc.RemainingSteps)
	return ""
}

// TestCancelParentCancelsChildAcrossRestart: a train whose child waits
// for its review is killed and restarted; cancelling the train then
// cancels the child, which says why. And when the process dies between
// the two writes (the train's cancel is written, its child's is not), the
// restarted process cancels the child.
func TestCancelParentCancelsChildAcrossRestart(t *testing.T) {
	for _, backend := range canaryBackends {
		t.Run(backend.name, func(t *testing.T) {
			s := newComposeServer(t, backend.spec(t), composeLease)
			s.start(t)
			ctx := relCtx(t, 2*time.Minute)
			start := func() (string, string) {
				doc := relHandoff(t, s.ext().must(t, ctx, "prompts/get", map[string]any{"name": "train", "arguments": map[string]any{"repo": "acme"}}))
				return doc.TaskID, composeReview(t, doc)
			}
			id, child := start()
			s.p.kill()
			s.start(t)
			s.waitStatus(t, id, "waits for the client")
			s.ext().must(t, ctx, "tasks/cancel", map[string]any{"taskId": id})
			got := s.waitEnd(t, child)
			require.Equal(t, "cancelled", got["status"])
			require.Equal(t, "cancelled: its parent workflow task "+id+" cancelled", got["statusMessage"])

			// The cancel's two writes split by a crash.
			id, child = start()
			s.p.kill()
			st, err := builder.OpenStore(context.Background(), s.spec, nil)
			require.NoError(t, err)
			msg := "cancelled by request"
			_, err = st.Update(context.Background(), id, store.Update{Status: mcptask.StatusCancelled, StatusMessage: &msg})
			require.NoError(t, err)
			require.NoError(t, st.Close())
			s.start(t)
			got = s.waitEnd(t, child)
			require.Equal(t, "cancelled", got["status"])
			require.Contains(t, got["statusMessage"], "its parent workflow task "+id)
			require.Zero(t, s.calls(t, "ship -", "start"))
		})
	}
}

// TestUndoSIGKILLMidUndo: a release fails after two deploys; the server
// dies inside the first undo (the rollback of the last deploy). After the
// restart that rollback runs again with the same idempotency key, the
// other runs once, and the release fails saying what was undone.
func TestUndoSIGKILLMidUndo(t *testing.T) {
	for _, backend := range canaryBackends {
		t.Run(backend.name, func(t *testing.T) {
			s := newComposeServer(t, backend.spec(t), composeLease)
			s.start(t, "-kill-in", "rollback_service:web")
			s.startPrompt(t, "release", map[string]any{"services": "api,web"})
			s.died(t)
			id := s.journalTask(t, "deploy_service")
			require.Equal(t, 1, s.calls(t, "rollback_service web", "start"))
			require.Zero(t, s.calls(t, "rollback_service web", "end"))

			s.start(t)
			end := s.waitEnd(t, id)
			// Failed, as the extension reads it: completed, with the
			// workflow's isError result.
			require.Equal(t, "completed", end["status"])
			require.Equal(t, true, end["result"].(map[string]any)["isError"], "%v", end)
			require.Equal(t, `step "check" (tool "check") failed: smoke test failed; undone, last first: deploy[1] (rollback_service), deploy[0] (rollback_service); the workflow failed`,
				end["statusMessage"])
			web := s.keysOf(t, "rollback_service web", "start")
			require.Equal(t, []string{id + "/undo:deploy[1]", id + "/undo:deploy[1]"}, web, "the undo cut short ran again, with the same key")
			require.Equal(t, 1, s.calls(t, "rollback_service web", "end"))
			require.Equal(t, []string{id + "/undo:deploy[0]"}, s.keysOf(t, "rollback_service api", "end"), "the next undo ran once")
			require.Equal(t, 1, s.calls(t, "rollback_service api", "start"))
			for _, svc := range []string{"api", "web"} {
				require.Equal(t, 1, s.calls(t, "deploy_service "+svc, "start"), "deploy %s ran once", svc)
			}
			require.Equal(t, 1, s.calls(t, "check -", "start"), "the failure is not run again")
			// web's rollback ends before api's: last first.
			lines := composeJournal(t, s.journal)
			require.Less(t, slices.IndexFunc(lines, func(l string) bool {
				return strings.HasPrefix(l, "rollback_service web") && strings.HasSuffix(l, " end")
			}),
				slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "rollback_service api") }))

			_, p, _ := s.task(t, id)
			require.NotNil(t, p.Undo)
			require.Len(t, p.Undo.Steps, 2)
			require.Equal(t, 2, p.Undo.Steps[0].Attempts, "%+v", p.Undo.Steps[0].History)
			require.Equal(t, 1, p.Undo.Steps[1].Attempts)
			for _, u := range p.Undo.Steps {
				require.Equal(t, mcptask.StepCompleted, u.Status)
			}
		})
	}
}
