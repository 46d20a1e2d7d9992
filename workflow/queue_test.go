package workflow

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The fake engine keeps queues in its memory store, on its clock (as
// *taskrouter.Router does), and wakes a task by its wake-up time (which a
// test runs with wakeDue).

func (e *fakeEngine) Enqueue(ctx context.Context, en store.QueueEntry, lim store.QueueLimits) (store.QueueResult, error) {
	e.called("enqueue", en.TaskID)
	return e.st.Enqueue(ctx, en, lim, e.Now())
}

func (e *fakeEngine) Dequeue(ctx context.Context, queue, id string, lim store.QueueLimits) (store.QueueResult, error) {
	task, _, _ := strings.Cut(id, "#")
	e.called("dequeue", task)
	return e.st.Dequeue(ctx, queue, id, lim, e.Now())
}

func (e *fakeEngine) WakeNow(ctx context.Context, id string) error {
	now := e.Now()
	_, err := e.Update(ctx, id, store.Update{WakeAt: &now})
	if isGone(err) {
		return nil
	}
	return err
}

var _ queueEngine = (*fakeEngine)(nil)

// runs is a tool that blocks until the test releases it, and records
// each run's key (its "repo" argument, or its item) as it starts and ends.
type runs struct {
	mu      sync.Mutex
	log     []string
	running map[string]int
	peak    map[string]int
	total   int
	peakAll int
	release chan struct{}
	started chan string
}

func newRuns() *runs {
	return &runs{running: map[string]int{}, peak: map[string]int{}, release: make(chan struct{}, 64), started: make(chan string, 64)}
}

func (r *runs) tool(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
	key := fmt.Sprint(args["repo"])
	r.mu.Lock()
	r.running[key]++
	r.total++
	r.peak[key] = max(r.peak[key], r.running[key])
	r.peakAll = max(r.peakAll, r.total)
	r.log = append(r.log, "start "+key)
	r.mu.Unlock()
	r.started <- key
	defer func() {
		r.mu.Lock()
		r.running[key]--
		r.total--
		r.log = append(r.log, "end "+key)
		r.mu.Unlock()
	}()
	select {
	case <-r.release:
		return ok(map[string]any{"repo": key}), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// next waits for the next run to start and returns its key.
func (r *runs) next(t *testing.T) string {
	t.Helper()
	select {
	case k := <-r.started:
		return k
	case <-time.After(time.Minute):
		t.Fatal("no run started")
		return ""
	}
}

// woken waits for the next run to start, waking due tasks meanwhile (as
// the engine's scheduler does: a grant sets its task's wake-up to now).
func (r *runs) woken(t *testing.T, e *fakeEngine) string {
	t.Helper()
	for range 12000 { // a minute at least
		select {
		case k := <-r.started:
			return k
		case <-time.After(5 * time.Millisecond):
			e.wakeDue(t)
		}
	}
	t.Fatal("no run started")
	return ""
}

// none checks that no run starts within a moment.
func (r *runs) none(t *testing.T) {
	t.Helper()
	select {
	case k := <-r.started:
		t.Fatalf("run %q started, but it should wait", k)
	case <-time.After(50 * time.Millisecond):
	}
}

// deployQueue is one deploy at a time per repo.
var deployQueue = &Queue{Name: "deploys", PerKey: 1}

// deploys is a workflow whose deploy step is on deployQueue, keyed by the
// repo argument.
func deploys(q *Queue, opts ...QueueOption) *Definition {
	if len(opts) == 0 {
		opts = []QueueOption{QueueKey(PromptArg("repo"))}
	}
	return New("deploy", "deploy a repo").Arg("repo", "the repo", true).Arg("priority", "its priority", false).Step(
		Server("deploy", "deploy").Bind("repo", PromptArg("repo")).OnQueue(q, opts...),
		Server("after", "after"),
	)
}

// TestQueuePerKey: with one deploy at a time per repo, three deploys of
// one repo run one after the other, in the order they came, while a
// deploy of another repo runs at once; the ones waiting say so.
func TestQueuePerKey(t *testing.T) {
	e := newFakeEngine()
	r := newRuns()
	e.tool("deploy", r.tool)
	echoTools(e, "after")
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, deploys(deployQueue))
	a1, _ := f.start(t, "deploy", map[string]string{"repo": "a"})
	require.Equal(t, "a", r.next(t))
	a2, _ := f.start(t, "deploy", map[string]string{"repo": "a"})
	a3, _ := f.start(t, "deploy", map[string]string{"repo": "a"})
	b1, _ := f.start(t, "deploy", map[string]string{"repo": "b"})
	require.Equal(t, "b", r.next(t), "another repo deploys at once")
	r.none(t)

	tk, p := f.settled(t, a2.ID)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	q := p.step("deploy").Queue
	require.NotNil(t, q)
	require.Nil(t, q.GrantedAt)
	require.Equal(t, "deploys", q.Queue)
	require.Equal(t, "a", q.Key)
	require.Contains(t, tk.StatusMessage, `step "deploy" (tool "deploy") is queued on "deploys" (key "a")`)
	require.Contains(t, tk.StatusMessage, `runs 1 at a time per key, and key "a" has them: held by task `+a1.ID)
	_, p3 := f.settled(t, a3.ID)
	require.Equal(t, 1, p3.step("deploy").Queue.Ahead, "a2 goes first")
	require.NotNil(t, p3.step("deploy").Queue.Next, "it looks again later")

	doc := f.b.handoff(tk, p, 0)
	var deploy handoff.RemainingStep
	for _, rs := range doc.RemainingSteps {
		if rs.Name == "deploy" {
			deploy = rs
		}
	}
	require.NotNil(t, deploy.Queue)
	require.Equal(t, mcptask.StepPending, deploy.Status)
	require.Equal(t, `the server runs it once queue "deploys" gives it a place (it is queued); do not call it yourself`, deploy.Do)
	text, err := handoff.Render(doc)
	require.NoError(t, err)
	require.Contains(t, text, `is queued on "deploys"`)

	r.release <- struct{}{} // b's deploy or a's first ends
	r.release <- struct{}{}
	require.Equal(t, "a", r.woken(t, e))
	r.release <- struct{}{}
	require.Equal(t, "a", r.woken(t, e))
	r.release <- struct{}{}
	for _, id := range []string{a1.ID, a2.ID, a3.ID, b1.ID} {
		require.Eventually(t, func() bool { e.wakeDue(t); tk, _ := f.task(t, id); return tk.Status == mcptask.StatusCompleted }, 30*time.Second, 5*time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Equal(t, 1, r.peak["a"], "never two deploys of one repo at once")
	require.Equal(t, 2, r.peakAll, "two repos at once")
	var aOrder []string
	for _, l := range r.log {
		if strings.HasSuffix(l, " a") {
			aOrder = append(aOrder, l)
		}
	}
	require.Equal(t, []string{"start a", "end a", "start a", "end a", "start a", "end a"}, aOrder)
	es, err := e.st.QueueEntries(context.Background(), "deploys")
	require.NoError(t, err)
	require.Empty(t, es, "every place was given back")
}

// TestQueuePriority: of the deploys waiting, the higher priority runs
// first.
func TestQueuePriority(t *testing.T) {
	e := newFakeEngine()
	r := newRuns()
	e.tool("deploy", r.tool)
	echoTools(e, "after")
	q := &Queue{Name: "one", Concurrency: 1}
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, deploys(q, QueuePriority(PromptArg("priority"))))
	first, _ := f.start(t, "deploy", map[string]string{"repo": "first"})
	require.Equal(t, "first", r.next(t))
	low, _ := f.start(t, "deploy", map[string]string{"repo": "low", "priority": "1"})
	high, _ := f.start(t, "deploy", map[string]string{"repo": "high", "priority": "9"})
	_, p := f.settled(t, low.ID)
	require.Equal(t, 1, p.step("deploy").Queue.Priority)
	_, p = f.settled(t, high.ID)
	require.Equal(t, 0, p.step("deploy").Queue.Ahead, "high goes before low, which came earlier")
	r.release <- struct{}{}
	require.Equal(t, "high", r.woken(t, e))
	r.release <- struct{}{}
	require.Equal(t, "low", r.woken(t, e))
	r.release <- struct{}{}
	for _, id := range []string{first.ID, low.ID, high.ID} {
		require.Eventually(t, func() bool { e.wakeDue(t); tk, _ := f.task(t, id); return tk.Status == mcptask.StatusCompleted }, 30*time.Second, 5*time.Millisecond)
	}
}

// TestQueueRate: one start per minute: the second waits for the window,
// says when it opens, and runs once the clock reaches it.
func TestQueueRate(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "deploy", "after")
	q := &Queue{Name: "api", Rate: 1, Per: time.Minute}
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, deploys(q))
	one, _ := f.start(t, "deploy", map[string]string{"repo": "x"})
	tk, _ := f.settled(t, one.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status)
	e.advance(10 * time.Second)
	two, _ := f.start(t, "deploy", map[string]string{"repo": "y"})
	tk, p := f.settled(t, two.ID)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	q2 := p.step("deploy").Queue
	require.Contains(t, q2.Why, `queue "api" starts at most 1 per 1m0s`)
	look := e.Now().Add(queuePoll) // before the window opens: a periodic look
	require.Equal(t, look, *q2.Next)
	require.Equal(t, look, tk.WakeAt, "the time rules wake it then")
	require.Equal(t, 1, e.callsOf("deploy"))

	e.advance(queuePoll)
	require.Equal(t, 1, e.wakeDue(t))
	tk, p = f.settled(t, two.ID)
	open := e.Now().Add(20 * time.Second) // a minute after the first start
	require.Equal(t, open, *p.step("deploy").Queue.Next)
	require.Equal(t, open, tk.WakeAt, "the time rules wake it when the window opens")
	e.advance(20 * time.Second)
	require.Equal(t, 1, e.wakeDue(t))
	tk, _ = f.settled(t, two.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, 2, e.callsOf("deploy"))
}

// TestQueueWorkflowDebounce: a workflow on a debounced queue, keyed by an
// argument: a second start of the key within the window cancels the
// first (naming the second), which starts once the window passed.
func TestQueueWorkflowDebounce(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "notify")
	q := &Queue{Name: "notify", Debounce: 10 * time.Second}
	w := New("notify", "notify a user").Arg("user", "who", true).Step(Server("notify", "notify").Bind("user", PromptArg("user"))).
		OnQueue(q, QueueKey(PromptArg("user")))
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, w)
	first, _ := f.start(t, "notify", map[string]string{"user": "ann"})
	tk, p := f.settled(t, first.ID)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	require.True(t, p.Queue.waiting())
	require.Contains(t, tk.StatusMessage, `the workflow is queued on "notify" (key "ann")`)
	require.Contains(t, tk.StatusMessage, "a newer one replaces this one")

	e.advance(4 * time.Second)
	second, _ := f.start(t, "notify", map[string]string{"user": "ann"})
	require.Eventually(t, func() bool { tk, _ = f.task(t, first.ID); return tk.Status == mcptask.StatusCancelled }, 30*time.Second, 5*time.Millisecond)
	require.Contains(t, tk.StatusMessage, "replaced by task "+second.ID)
	require.Zero(t, e.callsOf("notify"))

	e.advance(10 * time.Second)
	require.Equal(t, 1, e.wakeDue(t))
	tk, _ = f.settled(t, second.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, 1, e.callsOf("notify"), "of the two starts, the last ran")
}

// TestQueueWorkflowPerKey: a workflow on a queue keyed by an argument
// starts its first step only once it holds its place, and gives the
// place back when it ends.
func TestQueueWorkflowPerKey(t *testing.T) {
	e := newFakeEngine()
	r := newRuns()
	e.tool("deploy", r.tool)
	echoTools(e, "after")
	w := New("train", "a release train").Arg("repo", "the repo", true).Step(
		Server("deploy", "deploy").Bind("repo", PromptArg("repo")),
		Server("after", "after"),
	).OnQueue(&Queue{Name: "trains", PerKey: 1}, QueueKey(PromptArg("repo")))
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, w)
	one, _ := f.start(t, "train", map[string]string{"repo": "a"})
	require.Equal(t, "a", r.next(t))
	two, _ := f.start(t, "train", map[string]string{"repo": "a"})
	tk, p := f.settled(t, two.ID)
	require.True(t, p.Queue.waiting())
	require.Equal(t, mcptask.StepPending, p.step("deploy").Status, "nothing starts before the workflow holds its place")
	require.Contains(t, tk.StatusMessage, `the workflow is queued on "trains"`)
	r.none(t)
	r.release <- struct{}{}
	require.Equal(t, "a", r.woken(t, e), "the second train runs once the first ended")
	// The first's end and its place given back are two writes: the second
	// may start before the first's end is read back (once in six runs of
	// the package under load): wait for it.
	require.Eventually(t, func() bool { tk, _ = f.task(t, one.ID); return tk.Status == mcptask.StatusCompleted }, 30*time.Second, 5*time.Millisecond)
	r.release <- struct{}{}
	require.Eventually(t, func() bool { e.wakeDue(t); tk, _ = f.task(t, two.ID); return tk.Status == mcptask.StatusCompleted }, 30*time.Second, 5*time.Millisecond)
}

// TestQueueForEachItems: a for-each's body on a queue of one: its items
// take places one at a time.
func TestQueueForEachItems(t *testing.T) {
	e := newFakeEngine()
	r := newRuns()
	e.tool("deploy", r.tool)
	w := New("all", "deploy every repo").Arg("repos", "comma-separated", true).Step(
		ForEach("each", PromptArg("repos"), Server("deploy", "deploy").Bind("repo", Item()).OnQueue(&Queue{Name: "serial", Concurrency: 1})).Limit(3),
	)
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, w)
	tk, _ := f.start(t, "all", map[string]string{"repos": "x,y,z"})
	got := []string{r.next(t)}
	r.none(t)
	for range 2 {
		r.release <- struct{}{}
		got = append(got, r.woken(t, e))
	}
	r.release <- struct{}{}
	require.Equal(t, []string{"x", "y", "z"}, got)
	require.Eventually(t, func() bool { e.wakeDue(t); tk, _ = f.task(t, tk.ID); return tk.Status == mcptask.StatusCompleted }, 30*time.Second, 5*time.Millisecond, tk.StatusMessage)
	r.mu.Lock()
	require.Equal(t, 1, r.peakAll)
	r.mu.Unlock()
}

// TestQueueValidation: registration says what cannot work.
func TestQueueValidation(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "a", "b")
	for name, c := range map[string]struct {
		w    *Definition
		want string
	}{
		"nil queue":             {New("w", "").Step(Server("a", "a").OnQueue(nil)), "OnQueue has no queue"},
		"no name":               {New("w", "").Step(Server("a", "a").OnQueue(&Queue{})), "its queue has no name"},
		"rate, no per":          {New("w", "").Step(Server("a", "a").OnQueue(&Queue{Name: "q", Rate: 2})), "Rate of 2 without Per"},
		"step debounce":         {New("w", "").Step(Server("a", "a").OnQueue(&Queue{Name: "q", Debounce: time.Second})), "place the workflow on it"},
		"client step":           {New("w", "").Step(Client("a", "a").OnQueue(&Queue{Name: "q"})), "a client step is performed by the client"},
		"sleep":                 {New("w", "").Step(Sleep("s", time.Second).OnQueue(&Queue{Name: "q"})), "not a sleep step"},
		"group":                 {New("w", "").Step(Parallel("g", Server("a", "a"), Server("b", "b")).OnQueue(&Queue{Name: "q"})), "place the steps it runs on it"},
		"undeclared key":        {New("w", "").Step(Server("a", "a").OnQueue(&Queue{Name: "q"}, QueueKey(PromptArg("nope")))), `its queue key reads undeclared prompt argument "nope"`},
		"workflow reads a step": {New("w", "").Step(Server("a", "a")).OnQueue(&Queue{Name: "q"}, QueueKey(StepOutput("a"))), "a workflow's place is taken when its task starts"},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorContains(t, c.w.Validate(e.lookup()), c.want)
		})
	}
	f := newFixture(t, e, nil, New("one", "").Step(Server("a", "a").OnQueue(&Queue{Name: "shared", PerKey: 1})))
	_, err := f.b.Register(f.srv, New("two", "").Step(Server("b", "b").OnQueue(&Queue{Name: "shared", PerKey: 2})), e.lookup())
	require.ErrorContains(t, err, `queue "shared" is defined with other limits`)
}
