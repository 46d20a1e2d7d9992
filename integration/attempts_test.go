package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/workflow"
)

// The attempt budget across stops and crashes (issue 38, item 2; the
// table in docs/SEMANTICS.md): every attempt that started is counted
// however it ended; an attempt a graceful stop cut is re-run and is not
// a failure, but never resets the count; a step not marked retryable
// fails at its first failure; MaxAttempts bounds failures and timeouts
// exactly, across SIGTERM and SIGKILL. Real processes
// (integration/testdata/meetingserver), stopped by PID, on bbolt and on
// PostgreSQL, counting every run of the tools in an fsync'd ledger.

// ledgerLines reads the ledger's lines that start with prefix.
func ledgerLines(t *testing.T, path, prefix string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return out
}

// waitLedger waits until the ledger holds line.
func waitLedger(t *testing.T, p *proc, path, line string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return len(ledgerLines(t, path, line)) > 0
	}, 30*time.Second, 10*time.Millisecond, "the ledger never got %q: %s", line, p.log.String())
}

// meetingTask reads the task as stored, the server stopped.
func meetingTask(t *testing.T, db, id string) (status mcptask.Status, msg string, p *workflow.Progress) {
	t.Helper()
	st, err := builder.OpenStore(context.Background(), db, nil)
	require.NoError(t, err)
	defer st.Close()
	tk, err := st.Get(context.Background(), id)
	require.NoError(t, err)
	return tk.Status, tk.StatusMessage, crashProgress(t, tk)
}

// relEndedFailed reports whether task m (a tasks/get answer in the
// extension dialect) ended failed: there, a workflow that failed is
// completed with a result whose isError is true (docs/INTEROP.md).
func relEndedFailed(m map[string]any) bool {
	res, _ := m["result"].(map[string]any)
	return m["status"] == "failed" || (m["status"] == "completed" && res != nil && res["isError"] == true)
}

func TestAttemptBudgetAcrossStopsAndCrashes(t *testing.T) {
	bin := exampleBinary(t, "./integration/testdata/meetingserver")
	for _, st := range meetStores {
		t.Run(st.name, func(t *testing.T) {
			t.Run("a step not marked retryable fails at its first failure", func(t *testing.T) {
				db, led := st.db(t), filepath.Join(t.TempDir(), "ledger")
				args := []string{"-http", "ADDR", "-db", db, "-ledger", led}
				p := startProc(t, bin, nil, args...)
				ctx := relCtx(t, 2*time.Minute)
				c := newRelClient(p.url, newRelHTTPClient(2), relExt, "")
				id := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "charge"})).TaskID
				waitLedger(t, p, led, "start charge "+id+" 1")
				p.term(t) // a deploy: attempt 1 handed back
				p = startProc(t, bin, nil, args...)
				waitLedger(t, p, led, "start charge "+id+" 2")
				p.kill() // a crash during attempt 2
				p = startProc(t, bin, nil, append(args, "-hold", "100ms")...)
				c = newRelClient(p.url, newRelHTTPClient(2), relExt, "")
				require.Eventually(t, func() bool {
					return relEndedFailed(c.must(t, ctx, "tasks/get", map[string]any{"taskId": id}))
				}, 60*time.Second, 20*time.Millisecond, p.log.String())
				time.Sleep(300 * time.Millisecond) // a retry, were there one, would start at once
				p.term(t)
				require.Len(t, ledgerLines(t, led, "start charge "+id), 3, "attempts 1 (cut by the stop), 2 (cut by the crash), 3 (failed)")
				require.Equal(t, []string{"fail charge " + id + " 3"}, ledgerLines(t, led, "fail charge "+id), "it failed once, and was not retried")
				status, msg, pr := meetingTask(t, db, id)
				require.Equal(t, mcptask.StatusFailed, status)
				require.Contains(t, msg, "card declined")
				sp := pr.Steps[0]
				require.Equal(t, 3, sp.Attempts, "every attempt that started is counted")
				require.Equal(t, workflow.OutcomeStopped, sp.History[0].Outcome)
				require.Equal(t, workflow.OutcomeError, sp.History[1].Outcome)
				require.Contains(t, sp.History[1].Error, "interrupted")
				require.Equal(t, "card declined", sp.History[2].Error)
			})
			t.Run("MaxAttempts 2 bounds timeouts to two", func(t *testing.T) {
				db, led := st.db(t), filepath.Join(t.TempDir(), "ledger")
				// A timeout long enough for the stop and the kill below to
				// land inside attempts 2 and 3 (1.5 s was tight for a
				// graceful stop's write on a loaded machine).
				args := []string{"-http", "ADDR", "-db", db, "-ledger", led, "-timeout", "3s"}
				p := startProc(t, bin, nil, args...)
				ctx := relCtx(t, 2*time.Minute)
				c := newRelClient(p.url, newRelHTTPClient(2), relExt, "")
				id := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "slow"})).TaskID
				waitLedger(t, p, led, "start slow "+id+" 2") // attempt 1 timed out
				p.term(t)                                    // attempt 2 cut by a deploy
				p = startProc(t, bin, nil, args...)
				waitLedger(t, p, led, "start slow "+id+" 3")
				p.kill() // attempt 3 cut by a crash
				p = startProc(t, bin, nil, args...)
				c = newRelClient(p.url, newRelHTTPClient(2), relExt, "")
				require.Eventually(t, func() bool {
					return relEndedFailed(c.must(t, ctx, "tasks/get", map[string]any{"taskId": id}))
				}, 60*time.Second, 20*time.Millisecond, p.log.String())
				time.Sleep(300 * time.Millisecond)
				p.term(t)
				require.Len(t, ledgerLines(t, led, "start slow "+id), 4, "attempt 4 timed out: the second timeout ends it")
				status, _, pr := meetingTask(t, db, id)
				require.Equal(t, mcptask.StatusFailed, status)
				timeouts := 0
				for _, a := range pr.Steps[0].History {
					if a.Outcome == workflow.OutcomeError && strings.Contains(a.Error, "timed out") {
						timeouts++
					}
				}
				require.Equal(t, 2, timeouts, fmt.Sprintf("history: %+v", pr.Steps[0].History))
			})
		})
	}
}
