package integration

// Hostile families that need real processes killed with SIGKILL: fork
// lineage cut mid-write, and quotas across a restart.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/workflow"
)

// hostileForksOf reads, straight from the store spec names (a bbolt file
// the server must not hold), the original task id and every fork of it
// the store holds.
func hostileForksOf(t *testing.T, spec, id string) (*store.Task, map[string]*store.Task) {
	t.Helper()
	ctx := context.Background()
	st, err := builder.OpenStore(ctx, spec, nil)
	require.NoError(t, err)
	defer st.Close()
	orig, err := st.Get(ctx, id)
	require.NoError(t, err)
	forks := map[string]*store.Task{}
	q := store.Query{Name: "abc", Limit: store.MaxPageSize}
	for {
		page, err := st.Query(ctx, q)
		require.NoError(t, err)
		for _, h := range page.Tasks {
			if h.Labels[workflow.LabelForkedFrom] == id {
				full, err := st.Get(ctx, h.ID)
				require.NoError(t, err)
				forks[h.ID] = full
			}
		}
		if page.NextCursor == "" {
			return orig, forks
		}
		q.Cursor = page.NextCursor
	}
}

// TestHostileForksCutBySIGKILL: a server SIGKILLed while 150 forks of one
// task are being made, on bbolt and PostgreSQL. Every fork the store
// holds ends up listed on its original (rebuilt from the fork's own
// record when its process died between the two writes), and nothing else
// is; a fork whose reply the client never got (nobody holds its id)
// expires as an orphan; one whose reply arrived does not.
func TestHostileForksCutBySIGKILL(t *testing.T) {
	bin := exampleBinary(t, "./integration/testdata/versionserver")
	env := []string{"TASKBRIDGE_ORPHAN_TIMEOUT=2s", "TASKBRIDGE_SWEEP_INTERVAL=100ms", "TASKBRIDGE_MAX_PENDING_PER_SOURCE=4096"}
	for _, be := range hostileStores {
		t.Run(be.name, func(t *testing.T) {
			spec := be.spec(t)
			bbolt := !builder.IsPostgresDSN(spec)
			start := func() *proc { return startProc(t, bin, env, "-http", "ADDR", "-db", spec) }
			p := start()
			ctx := relCtx(t, 3*time.Minute)
			c := newRelClient(p.url, newRelHTTPClient(64), relExt, "")
			orig := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "abc"})).TaskID

			const n, killAfter = 150, 10
			var mu sync.Mutex
			delivered := map[string]bool{}
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rep, err := c.call(ctx, "tools/call", map[string]any{"name": workflow.DefaultForkToolName, "arguments": map[string]any{"task_id": orig, "from": "b"}})
					if err != nil || rep.Result == nil {
						return // cut by the SIGKILL
					}
					id := relHandoffOf(t, rep.Map()).TaskID
					mu.Lock()
					delivered[id] = true
					enough := len(delivered) == killAfter
					mu.Unlock()
					if enough {
						p.kill()
					}
				}()
			}
			wg.Wait()
			p.kill()

			p = start() // recovery (and, on bbolt, the relinking of every active fork) runs before it serves
			if bbolt {
				p.kill()
			}
			_, forks := hostileForksOf(t, spec, orig)
			require.GreaterOrEqual(t, len(forks), killAfter)
			var untouched []string
			for id, f := range forks {
				if f.Labels[workflow.LabelTouched] == "" {
					require.False(t, delivered[id], "a fork whose reply arrived is held by its client")
					untouched = append(untouched, id)
				}
			}
			t.Logf("%d forks stored, %d delivered, %d whose reply was lost", len(forks), len(delivered), len(untouched))
			// Nothing may name the lost forks meanwhile (a request naming a
			// task means a client holds it): read them from the store,
			// with the server stopped on bbolt.
			deadline := time.Now().Add(time.Minute)
			for {
				if bbolt {
					// A restart's recovery counts the orphan timeout (2 s)
					// afresh: let it pass, and the sweeper run, before
					// reading (the loop reads until it has).
					p = start()
					time.Sleep(3 * time.Second)
					p.kill()
				}
				_, forks = hostileForksOf(t, spec, orig)
				orphaned := 0
				for _, id := range untouched {
					if f := forks[id]; f.Status == mcptask.StatusFailed && strings.Contains(f.StatusMessage, "orphaned") {
						orphaned++
					}
				}
				if orphaned == len(untouched) {
					break
				}
				require.True(t, time.Now().Before(deadline), "%d of %d forks whose reply was lost expired as orphans", orphaned, len(untouched))
				time.Sleep(100 * time.Millisecond)
			}
			for id := range delivered {
				require.NotContains(t, forks[id].StatusMessage, "orphaned", "fork %s was delivered", id)
				require.False(t, forks[id].Status.Terminal(), "fork %s was delivered", id)
			}
			p.kill()

			o, forks := hostileForksOf(t, spec, orig)
			listed := map[string]bool{}
			for _, f := range workflow.Forks(o) {
				require.Equal(t, "b", f.From)
				listed[f.TaskID] = true
			}
			stored := map[string]bool{}
			for id := range forks {
				stored[id] = true
			}
			require.Equal(t, stored, listed, "the original lists every fork the store holds, and only them")
			for id := range delivered {
				require.True(t, stored[id], "a delivered fork is stored")
			}
		})
	}
}

// TestHostileWorkflowFloodAcrossSIGKILL: example 62 with every pending
// limit at 5 and MaxConcurrent at 2, on bbolt and PostgreSQL. 40 parallel
// canary_release prompts, then 40 parallel calls of its tool: exactly 5
// workflows start, every other request is refused naming the limit (a
// -32000 for the prompt, an isError result for the tool, which a model
// reads). After a SIGKILL and a restart the cap still holds: on bbolt the
// five count again (Start recounts what the dead process left active),
// so nothing more starts; on PostgreSQL a replica counts what it created
// or took over since it started, so at most 5 start.
func TestHostileWorkflowFloodAcrossSIGKILL(t *testing.T) {
	for _, be := range hostileStores {
		t.Run(be.name, func(t *testing.T) {
			spec := be.spec(t)
			s := newCanaryServer(t, spec, "TASKBRIDGE_MAX_PENDING=5", "TASKBRIDGE_MAX_PENDING_PER_OWNER=5",
				"TASKBRIDGE_MAX_PENDING_PER_SOURCE=5", "TASKBRIDGE_MAX_CONCURRENT=2")
			ctx := relCtx(t, 3*time.Minute)
			flood := func(tool bool) (started int) {
				c := newRelClient(s.url(t), newRelHTTPClient(64), relExt, "")
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := range 40 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						args := map[string]any{"repo": "r", "version": fmt.Sprintf("v1.0.%d", i), "soak_seconds": "1h"}
						var rep *relReply
						var err error
						if tool {
							rep, err = c.call(ctx, "tools/call", map[string]any{"name": "canary_release", "arguments": args})
						} else {
							rep, err = c.call(ctx, "prompts/get", map[string]any{"name": "canary_release", "arguments": args})
						}
						require.NoError(t, err)
						switch {
						case rep.Err != nil:
							require.EqualValues(t, mcptask.CodeTooManyTasks, rep.Err.Code, "%s", rep)
							require.Contains(t, rep.Err.Message, "(limit MaxPending", "the refusal names the limit")
						case rep.Map()["isError"] == true:
							require.True(t, tool, "%s", rep)
							require.Contains(t, textOfResult(rep.Map()), "(limit MaxPending", "the refusal names the limit")
						default:
							mu.Lock()
							started++
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				return started
			}
			require.Equal(t, 5, flood(false), "5 workflows start; 35 prompts are refused")
			require.Equal(t, 0, flood(true), "the 5 still run: every tool call is refused")

			s.p.kill()
			s.start(t)
			if s.bbolt() {
				require.Equal(t, 0, flood(false), "after the restart the 5 count again")
			} else {
				require.LessOrEqual(t, flood(false), 5, "after the restart the cap still holds")
			}
		})
	}
}
