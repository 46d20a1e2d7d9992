package integration

// Example 62's canary_release and release_notes end to end, on the real
// binary, on bbolt and on PostgreSQL: the official TypeScript SDK client
// follows the handoff through a parallel group and a durable sleep to the
// person's decision (the event go_live) and delivers it with the event
// tool workflow_event (or an outside system delivers it through the
// webhook); the decision picks promote or roll back; a SIGKILL during the
// sleep keeps its recorded end, one during the group re-runs only the
// member still running; a rejected review publishes nothing.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/workflow"
)

// canaryBackends are the stores every canary test runs on: a bbolt file
// and a fresh PostgreSQL database.
var canaryBackends = []struct {
	name string
	spec func(t *testing.T) string
	// rerun is the reason a step cut by a SIGKILL records when the next
	// process runs it: a restart on bbolt; on PostgreSQL the next process
	// (a new replica id) takes the task over when the lease runs out.
	rerun string
}{
	{"bbolt", func(t *testing.T) string { return filepath.Join(t.TempDir(), "tasks.db") }, workflow.ReasonRestart},
	{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }, workflow.ReasonTakeover},
}

// canaryServer is example 62 serving over HTTP on one store, with its own
// publication ledger.
type canaryServer struct {
	bin    string
	spec   string // a bbolt file or a postgres:// DSN
	ledger string
	env    []string
	p      *proc
}

// newCanaryServer starts example 62 on store spec; env is added to the
// environment of every start.
func newCanaryServer(t *testing.T, spec string, env ...string) *canaryServer {
	t.Helper()
	s := canaryServerOn(t, spec, env...)
	s.start(t)
	return s
}

// canaryServerOn prepares a server on spec without starting it.
func canaryServerOn(t *testing.T, spec string, env ...string) *canaryServer {
	t.Helper()
	return &canaryServer{bin: exampleBinary(t, "./examples/62_tasks_workflow"), spec: spec,
		ledger: filepath.Join(t.TempDir(), "published.jsonl"), env: env}
}

// start (re)starts the server on the same store and ledger, with env
// added to the environment of this start only. It runs until killed or
// until t ends.
func (s *canaryServer) start(t *testing.T, env ...string) {
	t.Helper()
	s.p = startProc(t, s.bin, append(append([]string{}, s.env...), env...),
		"serve", "-http", "ADDR", "-db", s.spec, "-ledger", s.ledger)
}

// url is the server's MCP endpoint, starting the server again (for t)
// if it is not running (progress stops it on bbolt, a test's end stops
// the one that test started).
func (s *canaryServer) url(t *testing.T) string {
	t.Helper()
	running := s.p != nil
	if running {
		select {
		case <-s.p.exited:
			running = false
		default:
		}
	}
	if !running {
		s.start(t)
	}
	return s.p.url
}

func (s *canaryServer) bbolt() bool { return !builder.IsPostgresDSN(s.spec) }

// progress reads workflow task id straight from the store. A bbolt file
// is held by the server while it runs: the server is killed for the read
// (url starts it again), so read only tasks that rest or ended that way.
func (s *canaryServer) progress(t *testing.T, id string) (*store.Task, *workflow.Progress) {
	t.Helper()
	if s.bbolt() {
		s.p.kill()
	}
	st, err := builder.OpenStore(context.Background(), s.spec, nil)
	require.NoError(t, err)
	defer st.Close()
	tk, err := st.Get(context.Background(), id)
	require.NoError(t, err)
	return tk, crashProgress(t, tk)
}

// canaryTS runs ts-canary.mjs with opts and returns its steps by name,
// failing the test (with the whole output) if any step failed.
func canaryTS(t *testing.T, url string, opts map[string]any) map[string]map[string]any {
	t.Helper()
	modules := nodeModules(t)
	raw, err := json.Marshal(opts)
	require.NoError(t, err)
	steps := runTS(t, filepath.Join(modules, "..", "ts-canary.mjs"), url, string(raw))
	for name, s := range steps {
		require.Equal(t, true, s["ok"], "ts-canary step %s failed: %v\nall steps: %v", name, s["error"], steps)
	}
	return steps
}

// canaryNames returns the list of strings in v (a JSON array).
func canaryNames(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// canarySkipped maps each skipped step of a summary to its reason.
func canarySkipped(summary map[string]any) map[string]string {
	out := map[string]string{}
	for _, x := range summary["skipped"].([]any) {
		m := x.(map[string]any)
		reason, _ := m["reason"].(string)
		out[m["name"].(string)] = reason
	}
	return out
}

// canaryStep returns step name of p.
func canaryStep(t *testing.T, p *workflow.Progress, name string) *workflow.StepProgress {
	t.Helper()
	for i := range p.Steps {
		if p.Steps[i].Name == name {
			return &p.Steps[i]
		}
	}
	t.Fatalf("no step %q in %+v", name, p.Steps)
	return nil
}

// canaryAttemptEnd is when an attempt ended (its start plus its duration, to the
// millisecond).
func canaryAttemptEnd(a workflow.Attempt) time.Time {
	return a.At.Add(time.Duration(a.DurationMs) * time.Millisecond)
}

// canaryDone checks a completed canary_release as the TypeScript client
// saw it (its last handoff and tasks/result): every step ran but the
// branch not taken, which is skipped with a reason.
func canaryDone(t *testing.T, steps map[string]map[string]any, taken, notTaken string) {
	t.Helper()
	want := []string{"lint", "unit", "integration", "soak", "go_live", taken}
	for _, s := range []string{"followed", "taskResult"} {
		sum := steps[s]
		require.Equal(t, "completed", sum["status"], "%s: %v", s, sum)
		require.Equal(t, want, canaryNames(sum["completed"]), "%s", s)
		require.Empty(t, sum["remaining"], "%s", s)
		skipped := canarySkipped(sum)
		require.Len(t, skipped, 1, "%s: %v", s, skipped)
		require.Contains(t, skipped[notTaken], "condition did not hold", "%s: %s is skipped with a reason", s, notTaken)
	}
	require.Equal(t, "completed", steps["taskAfter"]["status"])
	require.Equal(t, false, steps["taskResult"]["isError"])
}

// TestCanaryRelease: the TypeScript client gets canary_release, follows
// the handoff through the checks and the soak to the event go_live, and
// delivers an approval with the event tool (promote_release runs,
// rollback_release is skipped) or a rejection (the other way round); or an
// outside system delivers it through the webhook, which refuses a wrong
// token. The three checks ran together.
func TestCanaryRelease(t *testing.T) {
	for _, backend := range canaryBackends {
		t.Run(backend.name, func(t *testing.T) {
			s := newCanaryServer(t, backend.spec(t))

			t.Run("approved", func(t *testing.T) {
				steps := canaryTS(t, s.url(t), map[string]any{
					"prompt": "canary_release",
					"args":   map[string]any{"repo": "taskbridge", "version": "v1.4.0", "soak_seconds": "2"},
					"fill":   map[string]any{"approved": true, "reason": "error rate flat during the soak"},
				})
				id := steps["getPrompt"]["taskId"].(string)
				require.Equal(t, "working", steps["getPrompt"]["status"])
				perform := steps["perform:go_live"]
				require.Equal(t, false, perform["isError"], "%v", perform["text"])
				// The first handoff (the prompt waits 3 s, the checks and the
				// soak take 3.5 s) cannot offer the decision yet: the client
				// re-read it until it did.
				require.GreaterOrEqual(t, perform["rereads"], float64(1), "go_live was offered by the first handoff")
				before := perform["before"].(map[string]any)
				require.Equal(t, []string{"lint", "unit", "integration", "soak"}, canaryNames(before["completed"]),
					"go_live is offered once the checks and the soak are done")
				require.Equal(t, "completed", perform["status"])
				require.Contains(t, perform["text"], `Event "go_live" is recorded`)
				canaryDone(t, steps, "promote_release", "rollback_release")
				require.Equal(t, "client", steps["taskResult"]["completedBy"].(map[string]any)["go_live"])
				require.Equal(t, id, steps["taskResult"]["relatedTask"])
				require.Contains(t, steps["taskResult"]["text"], "100% on v1.4.0")

				// The checks ran together: each ran once, and all three were
				// running at one moment (the latest start is before the
				// earliest end), so the group took about as long as its
				// longest member, not the sum.
				_, p := s.progress(t, id)
				type span struct {
					name       string
					start, end time.Time
				}
				var spans []span
				var sum time.Duration
				for _, name := range []string{"lint", "unit", "integration"} {
					sp := canaryStep(t, p, name)
					require.Equal(t, mcptask.StepCompleted, sp.Status, name)
					require.Equal(t, "checks", sp.Group, name)
					require.Equal(t, 1, sp.Attempts, "%s: %+v", name, sp.History)
					require.Len(t, sp.History, 1, name)
					a := sp.History[0]
					require.Equal(t, workflow.ReasonFirst, a.Reason, name)
					require.Equal(t, workflow.OutcomeOK, a.Outcome, name)
					spans = append(spans, span{name, a.At, canaryAttemptEnd(a)})
					sum += canaryAttemptEnd(a).Sub(a.At)
				}
				sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
				lastStart, firstEnd, lastEnd := spans[2].start, spans[0].end, spans[0].end
				for _, sp := range spans {
					if sp.end.Before(firstEnd) {
						firstEnd = sp.end
					}
					if sp.end.After(lastEnd) {
						lastEnd = sp.end
					}
				}
				var desc []string
				for _, sp := range spans {
					desc = append(desc, fmt.Sprintf("%s %v-%v", sp.name, sp.start.Sub(spans[0].start), sp.end.Sub(spans[0].start)))
				}
				t.Logf("checks: the group took %v, the checks one after another %v (%s)", lastEnd.Sub(spans[0].start), sum, strings.Join(desc, ", "))
				require.True(t, lastStart.Before(firstEnd), "the checks did not all run at once: %s", strings.Join(desc, ", "))
				require.Less(t, lastEnd.Sub(spans[0].start), sum, "the group took as long as its checks one after another: %s", strings.Join(desc, ", "))
				soak := canaryStep(t, p, "soak")
				require.NotNil(t, soak.Until)
				require.False(t, canaryAttemptEnd(soak.History[0]).Before(*soak.Until), "the soak ended before its time: %+v", soak)
				decision := canaryStep(t, p, "go_live")
				require.NotEmpty(t, decision.History)
				require.False(t, decision.History[0].At.Before(*soak.Until), "decided before the soak ended: %+v", decision.History)
			})

			t.Run("rejected", func(t *testing.T) {
				steps := canaryTS(t, s.url(t), map[string]any{
					"prompt": "canary_release",
					"args":   map[string]any{"repo": "taskbridge", "version": "v1.5.0", "soak_seconds": "1"},
					"fill":   map[string]any{"approved": false, "reason": "p99 latency doubled"},
				})
				require.Equal(t, false, steps["perform:go_live"]["isError"])
				canaryDone(t, steps, "rollback_release", "promote_release")
				require.Contains(t, steps["taskResult"]["text"], "0% on v1.5.0 (rolled back)")
			})

			t.Run("webhook", func(t *testing.T) {
				offer := canaryTS(t, s.url(t), map[string]any{
					"prompt": "canary_release",
					"args":   map[string]any{"repo": "taskbridge", "version": "v1.6.0", "soak_seconds": "1"},
					"action": "offer",
				})["offered"]
				require.Equal(t, "go_live", offer["stepName"])
				require.Equal(t, "event", offer["kind"])
				require.Equal(t, "workflow_event", offer["tool"])
				id := offer["taskId"].(string)
				require.Equal(t, id, offer["arguments"].(map[string]any)["_task_id"])
				hook, ok := offer["webhook"].(map[string]any)
				require.True(t, ok, "the offered step gives no webhook: %v", offer)
				hookURL, token := hook["url"].(string), hook["token"].(string)
				require.Equal(t, strings.TrimSuffix(s.url(t), "/mcp")+"/hooks/"+id+"/go_live", hookURL)
				require.NotEmpty(t, token)

				post := func(token, body string) (int, map[string]any) {
					t.Helper()
					req, err := http.NewRequest(http.MethodPost, hookURL, strings.NewReader(body))
					require.NoError(t, err)
					req.Header.Set("Content-Type", "application/json")
					if token != "" {
						req.Header.Set("Authorization", "Bearer "+token)
					}
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					var m map[string]any
					_ = json.Unmarshal(b, &m)
					return resp.StatusCode, m
				}
				approve := `{"approved": true, "reason": "canary dashboards green (CI)"}`
				code, body := post("", approve)
				require.Equal(t, http.StatusUnauthorized, code, "no token: %v", body)
				code, body = post(token+"x", approve)
				require.Equal(t, http.StatusUnauthorized, code, "a wrong token: %v", body)
				code, body = post(strings.Repeat("0", len(token)), approve)
				require.Equal(t, http.StatusUnauthorized, code, "a wrong token: %v", body)
				code, body = post(token, approve)
				require.Equal(t, http.StatusOK, code, "%v", body)
				require.Equal(t, id, body["taskId"])
				require.Equal(t, false, body["isError"], "%v", body)
				require.Equal(t, "completed", body["status"], "%v", body)

				steps := canaryTS(t, s.url(t), map[string]any{"prompt": "canary_release", "taskId": id, "action": "wait"})
				require.Equal(t, "completed", steps["waited"]["status"])
				res := steps["taskResult"]
				require.Equal(t, "completed", res["status"])
				require.Equal(t, []string{"lint", "unit", "integration", "soak", "go_live", "promote_release"}, canaryNames(res["completed"]))
				require.Equal(t, "webhook", res["completedBy"].(map[string]any)["go_live"])
				require.Contains(t, canarySkipped(res)["rollback_release"], "condition did not hold")
				require.Contains(t, res["text"], "canary dashboards green (CI)")

				// The same delivery again is answered as done; a different
				// decision, once the workflow ended, is refused.
				code, body = post(token, approve)
				require.Equal(t, http.StatusOK, code, "a repeated delivery: %v", body)
				code, body = post(token, `{"approved": false, "reason": "changed my mind"}`)
				require.Equal(t, http.StatusConflict, code, "a contradicting delivery after the end: %v", body)
			})
		})
	}
}

// TestCanarySleepSurvivesSIGKILL: the server is SIGKILLed while the soak
// sleeps and restarted on the same store two seconds later: the sleep
// keeps its recorded end and ends then (not a full soak after the
// restart), the decision is asked for, and the workflow completes.
//
// The process is killed half a soak before the sleep's end and restarted
// 2 s later; the sleep must end at its recorded end, not a soak after the
// restart. The slack between the two (about 8 s) is what a busy machine
// may take to restart and wake the task.
func TestCanarySleepSurvivesSIGKILL(t *testing.T) {
	const soak = 12 * time.Second
	for _, backend := range canaryBackends {
		t.Run(backend.name, func(t *testing.T) {
			s := newCanaryServer(t, backend.spec(t))
			ctx := relCtx(t, 2*time.Minute)
			c := newRelClient(s.url(t), nil, relExt, "")
			doc := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "canary_release",
				"arguments": map[string]any{"repo": "taskbridge", "version": "v2.0.0", "soak_seconds": fmt.Sprint(soak.Seconds())}}))
			id := doc.TaskID
			// prompts/get answers once the workflow rests: here, sleeping
			// past its wait. (On a slow machine it may answer earlier: read
			// the handoff again until the soak sleeps.)
			sleeping := func(doc *handoff.Document) *handoff.RemainingStep {
				for i, rs := range doc.RemainingSteps {
					if rs.Name == "soak" && rs.Status == mcptask.StepSleeping && rs.Until != nil {
						return &doc.RemainingSteps[i]
					}
				}
				return nil
			}
			deadline := time.Now().Add(30 * time.Second)
			for sleeping(doc) == nil {
				require.True(t, time.Now().Before(deadline), "the soak never slept: %+v", doc)
				doc = relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "canary_release", "_meta": map[string]any{mcptask.MetaTaskID: id}}))
			}
			until := *sleeping(doc).Until
			got := c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
			require.Contains(t, got["statusMessage"], "sleeping until", "%v", got)
			require.Greater(t, time.Until(until), 3*time.Second, "the soak is nearly over already: the test has no time to kill and restart (until %v)", until)
			time.Sleep(time.Until(until.Add(-soak / 2))) // no-op when less is left

			s.p.kill()
			time.Sleep(2 * time.Second)
			restarted := time.Now()
			s.start(t)

			steps := canaryTS(t, s.url(t), map[string]any{"prompt": "canary_release", "taskId": id,
				"fill": map[string]any{"approved": true, "reason": "soaked across a crash"}})
			before := steps["perform:go_live"]["before"].(map[string]any)
			require.Contains(t, canaryNames(before["completed"]), "soak", "go_live is offered once the soak ended")
			canaryDone(t, steps, "promote_release", "rollback_release")

			_, p := s.progress(t, id)
			sp := canaryStep(t, p, "soak")
			require.Equal(t, mcptask.StepCompleted, sp.Status)
			require.NotNil(t, sp.Until)
			require.True(t, sp.Until.Equal(until), "the recorded end moved: %v, was %v", sp.Until, until)
			require.Equal(t, 1, sp.Attempts, "the sleep started once: %+v", sp.History)
			ended := canaryAttemptEnd(sp.History[0])
			t.Logf("soak: until %v, ended %v after it; restarted %v before it", until.Format(time.RFC3339Nano), ended.Sub(until), until.Sub(restarted))
			require.False(t, ended.Before(until), "the sleep ended at %v, before its end %v", ended, until)
			require.True(t, ended.Before(restarted.Add(soak)), "the sleep started again at the restart (%v): it ended at %v", restarted, ended)
			var out struct {
				SleptUntil time.Time `json:"sleptUntil"`
			}
			require.NoError(t, json.Unmarshal(p.Outputs["soak"], &out))
			require.True(t, out.SleptUntil.Equal(until), "output %s, until %v", p.Outputs["soak"], until)
		})
	}
}

// TestCanaryParallelGroupSurvivesSIGKILL: the server is SIGKILLed while
// only integration, the slowest check, still runs; after the restart only
// integration runs again (recorded as a restart), lint and unit keep
// their single runs, and the workflow goes on to the decision and
// completes.
func TestCanaryParallelGroupSurvivesSIGKILL(t *testing.T) {
	for _, backend := range canaryBackends {
		t.Run(backend.name, func(t *testing.T) {
			// A short lease lets the restarted process on PostgreSQL take
			// the group over soon (bbolt needs none: the restart recovers
			// it).
			s := canaryServerOn(t, backend.spec(t), "TASKBRIDGE_LEASE_DURATION=2s")
			ctx := relCtx(t, 2*time.Minute)
			// The kill must land while integration alone runs: the 900 ms
			// between unit's end and integration's. A starved machine can
			// miss them (the status read, or the kill, comes after
			// integration ended); that run shows nothing, and the test
			// starts another task, at most three times.
			var id string
			var killed time.Time
			for try := 1; ; try++ {
				// The first process answers prompts/get at once, while
				// the checks run.
				s.start(t, "TASKBRIDGE_PROMPT_WAIT=50ms")
				c := newRelClient(s.url(t), nil, relExt, "")
				id = relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "canary_release",
					"arguments": map[string]any{"repo": "taskbridge", "version": "v3.0.0", "soak_seconds": "1"}})).TaskID

				// Wait until lint and unit are done and integration alone
				// runs (or the checks ended first).
				deadline := time.Now().Add(30 * time.Second)
				for {
					got := c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
					msg, _ := got["statusMessage"].(string)
					if strings.HasPrefix(msg, `running step "integration"`) || strings.Contains(msg, "sleeping") {
						break
					}
					require.True(t, time.Now().Before(deadline), "integration never ran alone: %v", got)
					time.Sleep(10 * time.Millisecond)
				}
				s.p.kill()
				killed = time.Now()
				_, p := s.progress(t, id)
				if in := canaryStep(t, p, "integration"); in.Status != mcptask.StepCompleted || try == 3 {
					break
				}
				t.Logf("try %d: integration ended before the kill; again with another task", try)
			}
			s.start(t)

			steps := canaryTS(t, s.url(t), map[string]any{"prompt": "canary_release", "taskId": id,
				"fill": map[string]any{"approved": true, "reason": "checks passed after the crash"}})
			canaryDone(t, steps, "promote_release", "rollback_release")

			_, p := s.progress(t, id)
			for _, name := range []string{"lint", "unit"} {
				sp := canaryStep(t, p, name)
				require.Equal(t, mcptask.StepCompleted, sp.Status, name)
				require.Equal(t, 1, sp.Attempts, "%s ran again after the restart: %+v", name, sp.History)
				require.Equal(t, workflow.ReasonFirst, sp.History[0].Reason, name)
				require.True(t, canaryAttemptEnd(sp.History[0]).Before(killed), "%s ended after the kill: %+v", name, sp.History)
			}
			in := canaryStep(t, p, "integration")
			require.Equal(t, mcptask.StepCompleted, in.Status)
			require.Equal(t, 2, in.Attempts, "integration: %+v", in.History)
			require.Equal(t, workflow.ReasonFirst, in.History[0].Reason)
			require.NotEqual(t, workflow.OutcomeOK, in.History[0].Outcome, "the interrupted run: %+v", in.History[0])
			again := in.History[1]
			require.Equal(t, backend.rerun, again.Reason, "integration: %+v", in.History)
			require.Equal(t, workflow.OutcomeOK, again.Outcome)
			require.True(t, again.At.After(killed), "the re-run started at %v, before the kill at %v", again.At, killed)
			require.Equal(t, mcptask.StepCompleted, canaryStep(t, p, "soak").Status)
		})
	}
}

// TestReleaseNotesRejected: the TypeScript client rejects the review of
// release_notes: the workflow completes with publish skipped,
// publish_notes never runs (the ledger stays empty), and the reviewer's
// feedback is in the task's result.
func TestReleaseNotesRejected(t *testing.T) {
	const feedback = "reject: wrong version"
	for _, backend := range canaryBackends {
		t.Run(backend.name, func(t *testing.T) {
			s := newCanaryServer(t, backend.spec(t))
			steps := canaryTS(t, s.url(t), map[string]any{
				"prompt": "release_notes",
				"args":   map[string]any{"repo": "taskbridge"},
				"fill":   map[string]any{"feedback": feedback, "approved": false},
			})
			id := steps["getPrompt"]["taskId"].(string)
			require.Equal(t, false, steps["perform:review"]["isError"], "%v", steps["perform:review"]["text"])
			for _, name := range []string{"followed", "taskResult"} {
				sum := steps[name]
				require.Equal(t, "completed", sum["status"], "%s: %v", name, sum)
				require.Equal(t, []string{"fetch", "draft", "review"}, canaryNames(sum["completed"]), name)
				require.Contains(t, canarySkipped(sum)["publish"], "condition did not hold", "%s: publish is skipped with a reason", name)
			}
			require.Equal(t, "completed", steps["taskAfter"]["status"])
			require.Equal(t, id, steps["taskResult"]["relatedTask"])
			require.Contains(t, steps["taskResult"]["text"], feedback, "the feedback is in the result")

			ledger, err := os.ReadFile(s.ledger)
			require.NoError(t, err)
			require.Empty(t, bytes.TrimSpace(ledger), "publish_notes ran")
			_, p := s.progress(t, id)
			publish := canaryStep(t, p, "publish")
			require.Equal(t, mcptask.StepSkipped, publish.Status)
			require.Zero(t, publish.Attempts)
			var review struct {
				Approved bool   `json:"approved"`
				Feedback string `json:"feedback"`
			}
			require.NoError(t, json.Unmarshal(p.Outputs["review"], &review))
			require.Equal(t, feedback, review.Feedback)
			require.False(t, review.Approved)
		})
	}
}
