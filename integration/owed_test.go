package integration

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// A replica killed between a workflow's cancel's write and the creation
// of the undo task that write promised (the crash point of simulation
// seed 935), on a store that replicas share, the killed one never
// starting again: the takeover of the replicas that stay, once they see
// it gone, creates the undo task (before, it waited for some replica's
// next start; docs/SEMANTICS.md, cancel × undo).

// errKilled is every write of a replica the test killed.
var errKilled = errors.New("test: this replica was killed")

// killable is what a replica's store needs to be killed after a
// cancel's write: the write of cancel of task cancelOf commits, then
// every write of the replica fails, its heartbeats among them (the
// others see it gone a lease later), as nothing of a killed process
// reaches the store.
type killable struct {
	cancelOf atomic.Pointer[string]
	killed   atomic.Bool
}

func (k *killable) write() error {
	if k.killed.Load() {
		return errKilled
	}
	return nil
}

// updated kills the replica when u, which committed, cancelled the task
// the test named.
func (k *killable) updated(id string, u store.Update) {
	if at := k.cancelOf.Load(); at != nil && *at == id && u.Status == mcptask.StatusCancelled {
		k.killed.Store(true)
	}
}

// killableStore is a replica's store, shared by the replicas, that the
// test may kill (killable).
type killableStore struct {
	store.Store
	killable
}

func (*killableStore) Shared() bool { return true }

func (s *killableStore) Create(ctx context.Context, t *store.Task) (*store.Task, error) {
	if err := s.write(); err != nil {
		return nil, err
	}
	return s.Store.Create(ctx, t)
}

func (s *killableStore) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	if err := s.write(); err != nil {
		return nil, err
	}
	t, err := s.Store.Update(ctx, id, u)
	if err == nil {
		s.updated(id, u)
	}
	return t, err
}

func (s *killableStore) Claim(ctx context.Context, id, holder string, now, until time.Time) (*store.Task, error) {
	if err := s.write(); err != nil {
		return nil, err
	}
	return s.Store.Claim(ctx, id, holder, now, until)
}

func (s *killableStore) Renew(ctx context.Context, holder string, until time.Time, ids []string) ([]string, error) {
	if err := s.write(); err != nil {
		return nil, err
	}
	return s.Store.Renew(ctx, holder, until, ids)
}

func (s *killableStore) Heartbeat(ctx context.Context, hb store.Heartbeat) error {
	if err := s.write(); err != nil {
		return err
	}
	return s.Store.Heartbeat(ctx, hb)
}

// killableFeed is a killableStore over a store with a change feed
// (PostgreSQL), which the engine follows through it.
type killableFeed struct {
	*killableStore
	feed store.EventNotifier
}

func (s killableFeed) Subscribe(ctx context.Context, fn func(store.Change)) (func(), error) {
	return s.feed.Subscribe(ctx, fn)
}

func (s killableFeed) SubscribeEvents(ctx context.Context, fn func(store.Change)) (func(), error) {
	return s.feed.SubscribeEvents(ctx, fn)
}

// sharedMem is a memory store that says several processes share it (the
// replicas of one test process).
type sharedMem struct{ *memory.Store }

func (sharedMem) Shared() bool { return true }

// owedLedger counts what the tools of every replica did.
type owedLedger struct {
	mu   sync.Mutex
	runs map[string]int    // "deploy(a)", "rollback(a)", ...
	keys map[string]string // "rollback(a)" -> its idempotency key
	on   map[string]string // "rollback(a)" -> the replica it ran on
	held chan string       // the replica a hold started on
}

func (l *owedLedger) add(what, key, on string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[what]++
	if key != "" {
		l.keys[what] = key
	}
	l.on[what] = on
}

func (l *owedLedger) snapshot() (runs map[string]int, keys, on map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.runs), maps.Clone(l.keys), maps.Clone(l.on)
}

type owedIn struct {
	Service string `json:"service,omitempty"`
}

// owedReplica serves "ship" (deploy a, deploy b, each with its rollback,
// then hold, which runs until cancelled; undone on cancel) on st as
// replica name.
func owedReplica(t *testing.T, st store.Store, name string, l *owedLedger) *builder.Server {
	t.Helper()
	b := builder.New("owed", "1").WithStore(st).WithoutEnv().
		WithRouterOptions(taskrouter.Options{ReplicaID: name, LeaseDuration: replicaLease, ChangePollInterval: 100 * time.Millisecond,
			PollInterval: 20 * time.Millisecond}).
		WithWorkflowOptions(workflow.Options{PromptWait: 100 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "deploy"}, func(ctx context.Context, _ *mcp.CallToolRequest, in owedIn) (*mcp.CallToolResult, any, error) {
		l.add("deploy("+in.Service+")", "", name)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed " + in.Service}}}, nil, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "rollback"}, func(ctx context.Context, req *mcp.CallToolRequest, in owedIn) (*mcp.CallToolResult, any, error) {
		key, _ := req.Params.GetMeta()[mcptask.MetaIdempotencyKey].(string)
		l.add("rollback("+in.Service+")", key, name)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "rolled back " + in.Service}}}, nil, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ owedIn) (*mcp.CallToolResult, any, error) {
		l.held <- name
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}, nil)
	deploy := func(svc string) *workflow.Step {
		return workflow.Server("deploy_"+svc, "deploy").Bind("service", workflow.Const(svc)).
			Undo(workflow.Server("rollback_"+svc, "rollback").Bind("service", workflow.Const(svc)))
	}
	b.TaskWorkflow(workflow.New("ship", "deploy a and b, then hold until cancelled").Step(
		deploy("a"), deploy("b"), workflow.Server("hold", "hold")).WithUndoOnCancel())
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// TestOwedUndoMadeWithoutRestart: three replicas on one store (shared
// memory, PostgreSQL); r1 runs "ship" and is killed right after the
// write of its cancel. r2 and r3, never restarted, see r1 gone a lease
// later (its heartbeats stop), and both takeovers look for what it owed:
// the undo task is created once, and each completed step's undo runs
// once, with the cancelled task's key. The store refuses r2 nothing:
// without the takeover's pass the undo task never comes.
func TestOwedUndoMadeWithoutRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		// open returns the store of the replica the test kills, with its
		// killable, and opens another replica's.
		open func(t *testing.T) (store.Store, *killable, func() store.Store)
	}{
		{"memory", func(t *testing.T) (store.Store, *killable, func() store.Store) {
			m := memory.New(nil)
			a := &killableStore{Store: m}
			return a, &a.killable, func() store.Store { return sharedMem{m} }
		}},
		{"postgres", func(t *testing.T) (store.Store, *killable, func() store.Store) {
			dsn := pgtest.DSN(t)
			open := func() *postgres.Store {
				st, err := postgres.Open(context.Background(), dsn, nil)
				require.NoError(t, err)
				t.Cleanup(func() { _ = st.Close() })
				return st
			}
			pa := open()
			a := &killableStore{Store: pa}
			return killableFeed{a, pa}, &a.killable, func() store.Store { return open() }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sta, kill, other := tc.open(t)
			l := &owedLedger{runs: map[string]int{}, keys: map[string]string{}, on: map[string]string{}, held: make(chan string, 4)}
			a := owedReplica(t, sta, "r1", l)
			st := other()
			owedReplica(t, st, "r2", l)
			owedReplica(t, other(), "r3", l)
			ctx := relCtx(t, 2*time.Minute)

			res, err := versionClient(t, a).GetPrompt(ctx, &mcp.GetPromptParams{Name: "ship"})
			require.NoError(t, err)
			doc, err := handoff.FromPromptResult(res)
			require.NoError(t, err)
			id := doc.TaskID
			select {
			case on := <-l.held:
				require.Equal(t, "r1", on)
			case <-ctx.Done():
				t.Fatal("hold never started")
			}

			// r1 cancels, and is killed right after the cancel's write.
			kill.cancelOf.Store(&id)
			_, _ = a.Router.CancelTask(ctx, id, "cancelled by the test") // its answer may be cut by the kill
			require.True(t, kill.killed.Load(), "the cancel's write committed, then r1 was killed")
			ct, err := st.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, mcptask.StatusCancelled, ct.Status)
			require.NotEmpty(t, ct.Labels["workflow.undo_owed"], "the cancel's write promised the undo task")

			// r2 and r3 see r1 gone: one of them creates the undo task.
			var undo *store.Task
			require.Eventually(t, func() bool {
				undo = nil
				for _, tk := range allTasks(t, st) {
					if tk.Labels[workflow.LabelUndoOf] == id {
						require.Nil(t, undo, "one undo task")
						undo = tk
					}
				}
				return undo != nil
			}, 30*time.Second, 20*time.Millisecond, "the replicas that stay create the owed undo task")
			ut := waitEnded(t, st, undo.ID)
			require.Equal(t, mcptask.StatusCompleted, ut.Status, ut.StatusMessage)
			runs, keys, on := l.snapshot()
			require.Equal(t, map[string]int{"deploy(a)": 1, "deploy(b)": 1, "rollback(b)": 1, "rollback(a)": 1}, runs, "each undo ran once")
			require.Equal(t, map[string]string{"rollback(a)": id + "/undo:deploy_a", "rollback(b)": id + "/undo:deploy_b"}, keys,
				"each undo keeps the cancelled task's key")
			require.NotEqual(t, "r1", on["rollback(a)"])
			require.NotEqual(t, "r1", on["rollback(b)"])
			// The mark is cleared by a write of its own after the undo task's
			// creation (undoKept), which the undo task's run may outpace.
			require.Eventually(t, func() bool {
				ct, err = st.Get(ctx, id)
				require.NoError(t, err)
				return ct.Labels["workflow.undo_owed"] == ""
			}, 30*time.Second, 20*time.Millisecond, "the undo task made, the mark is cleared")
			n := 0
			for _, tk := range allTasks(t, st) {
				if tk.Labels[workflow.LabelUndoOf] == id {
					n++
				}
			}
			require.Equal(t, 1, n, "one undo task")
		})
	}
}

// allTasks lists every task of st (an operator's query, every page).
func allTasks(t *testing.T, st store.Store) []*store.Task {
	t.Helper()
	var out []*store.Task
	q := store.Query{Limit: store.MaxPageSize}
	for range 1000 {
		page, err := st.Query(context.Background(), q)
		require.NoError(t, err)
		out = append(out, page.Tasks...)
		if page.NextCursor == "" {
			return out
		}
		q.Cursor = page.NextCursor
	}
	t.Fatal("too many pages")
	return nil
}
