package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// eventServer serves a tool that reports as it works and a workflow
// whose server step's tool does the same.
type eventServer struct {
	builtServer
	gate chan struct{} // work with wait set waits for it after its first report
}

type workIn struct {
	Parts int    `json:"parts"`
	Label string `json:"label,omitempty"`
	Wait  bool   `json:"wait,omitempty"`
}

type workOut struct {
	Done int `json:"done"`
}

// work reports a progress line and a log line per part.
func (s *eventServer) work(ctx context.Context, _ *mcp.CallToolRequest, in workIn) (*mcp.CallToolResult, workOut, error) {
	log := taskrouter.Logger(ctx)
	if in.Wait {
		_ = taskrouter.Progress(ctx, 0, float64(in.Parts), "waiting")
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, workOut{}, ctx.Err()
		}
	}
	for i := 1; i <= in.Parts; i++ {
		_ = taskrouter.Progress(ctx, float64(i), float64(in.Parts), fmt.Sprintf("%s part %d", in.Label, i))
		log.Info(fmt.Sprintf("%s finished part %d", in.Label, i))
	}
	return nil, workOut{Done: in.Parts}, nil
}

func newEventServer(t *testing.T, limits store.Limits) *eventServer {
	t.Helper()
	s := &eventServer{builtServer: builtServer{t: t}, gate: make(chan struct{})}
	b := builder.New("events-test", "1").WithStore(memory.New(&store.Options{Limits: limits})).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "work"}, s.work, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "ack"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
		Who string `json:"who"`
	}) (*mcp.CallToolResult, any, error) {
		taskrouter.Logger(ctx).Info("acknowledged by " + in.Who)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	}, nil)
	b.TaskWorkflow(workflow.New("build", "build, ack").
		Step(
			workflow.Server("compile", "work").Bind("parts", workflow.Const(3)).Bind("label", workflow.Const("compile")),
			workflow.Client("ack", "ack").Bind("who", workflow.FromClient("your name")),
		))
	s.build(b)
	return s
}

// eventLog collects the events OnEvent receives.
type eventLog struct {
	mu     sync.Mutex
	events []client.TaskEvent
}

func (l *eventLog) add(ev client.TaskEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
}

func (l *eventLog) all() []client.TaskEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]client.TaskEvent(nil), l.events...)
}

// lines are the Line of the events of the given types.
func lines(evs []client.TaskEvent, types ...mcptask.EventType) []string {
	var out []string
	for _, ev := range evs {
		for _, t := range types {
			if ev.Type == t {
				out = append(out, ev.Line())
			}
		}
	}
	return out
}

// requireWhole checks a task's events: numbered from 1, one by one, and
// ending with its terminal status.
func requireWhole(t *testing.T, evs []client.TaskEvent, status mcptask.Status) {
	t.Helper()
	require.NotEmpty(t, evs)
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.Seq, "event %d: %s", i, ev.Line())
		require.False(t, ev.At.IsZero())
	}
	last := evs[len(evs)-1]
	require.Equal(t, mcptask.EventStatus, last.Type)
	require.True(t, strings.HasPrefix(last.Line(), "status "+string(status)), last.Line())
}

// TestCallToolOnEvent: a tool's progress and log lines reach the caller
// while it runs, in order, all of them before the result, in every
// transport and dialect.
func TestCallToolOnEvent(t *testing.T) {
	s := newEventServer(t, store.Limits{})
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			c := s.dial(t, m, nil)
			var log eventLog
			r := collect(testCtx(t), c, "work", map[string]any{"parts": 3, "label": "job"}, &client.CallOptions{OnEvent: log.add})
			require.NoError(t, r.err)
			require.Equal(t, client.EventResult, r.kinds()[len(r.kinds())-1])
			evs := log.all()
			requireWhole(t, evs, mcptask.StatusCompleted)
			require.Equal(t, []string{"info: job finished part 1", "info: job finished part 2", "info: job finished part 3"}, lines(evs, mcptask.EventLog))
			progress := lines(evs, mcptask.EventProgress)
			require.Equal(t, "3/3 (100%) job part 3", progress[len(progress)-1], "the latest report is never coalesced away")
			require.Equal(t, evs[0].TaskID, r.events[0].Task.ID)
		})
	}
}

// TestFollowOnEvent: following a workflow shows its steps' attempts and
// what the server step's tool reported (which reaches no one otherwise:
// the workflow runs it apart from any request), on the workflow task.
func TestFollowOnEvent(t *testing.T) {
	s := newEventServer(t, store.Limits{})
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			c := s.dial(t, m, nil)
			ctx := testCtx(t)
			_, doc, err := c.GetPrompt(ctx, "build", nil)
			require.NoError(t, err)
			var log eventLog
			_, err = c.Follow(ctx, doc, &client.FollowOptions{OnEvent: log.add,
				Fill: func(context.Context, handoff.RemainingStep, []string) (map[string]any, error) {
					return map[string]any{"who": "ada"}, nil
				}})
			require.NoError(t, err)
			evs := log.all()
			requireWhole(t, evs, mcptask.StatusCompleted)
			steps := lines(evs, mcptask.EventStepStarted, mcptask.EventStepEnded)
			require.Equal(t, []string{"step compile started", "step compile completed", "step ack started", "step ack completed"}, steps)
			require.Equal(t, []string{"compile: info: compile finished part 1", "compile: info: compile finished part 2", "compile: info: compile finished part 3",
				"ack: info: acknowledged by ada"}, lines(evs, mcptask.EventLog), "each line names the step whose tool said it")
			require.Contains(t, lines(evs, mcptask.EventProgress), "compile: 3/3 (100%) compile part 3")
			// A step's reports come between its start and its end.
			at := func(line string) int {
				for i, ev := range evs {
					if ev.Line() == line {
						return i
					}
				}
				return -1
			}
			require.Less(t, at("step compile started"), at("compile: info: compile finished part 1"))
			require.Less(t, at("compile: info: compile finished part 3"), at("step compile completed"))
		})
	}
}

// TestStreamEventsResume: a reader that stopped resumes, on a new
// connection, after the last event it had and gets each later one once;
// a task the caller may not know is not found.
func TestStreamEventsResume(t *testing.T) {
	s := newEventServer(t, store.Limits{})
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			ctx := testCtx(t)
			c := s.dial(t, m, nil)
			res, err := c.CallToolAndWait(ctx, "work", map[string]any{"parts": 4}, nil)
			require.NoError(t, err)
			require.False(t, res.IsError)
			id := c.Tracked()[0].ID

			var first []client.TaskEvent
			for ev, err := range c.StreamEvents(ctx, id, nil) {
				require.NoError(t, err)
				first = append(first, ev)
				if len(first) == 3 {
					break // the reader stops
				}
			}
			require.NoError(t, c.Close())

			c2 := s.dial(t, m, nil)
			var rest []client.TaskEvent
			for ev, err := range c2.StreamEvents(ctx, id, &client.StreamOptions{After: first[len(first)-1].Seq}) {
				require.NoError(t, err)
				rest = append(rest, ev)
			}
			requireWhole(t, append(first, rest...), mcptask.StatusCompleted)

			for _, err := range c2.StreamEvents(ctx, "no-such-task", nil) {
				require.ErrorIs(t, err, client.ErrNotFound)
			}
		})
	}
}

// TestStreamEventsSlowConsumer: a consumer that stops reading while the
// task writes more events than the client buffers (Options.StreamBuffer)
// and than the server's log keeps holds nobody up; once it reads again
// the client has started the stream over from its last event, and the
// consumer gets one dropped marker for what the log no longer has, then
// the rest, each number once.
func TestStreamEventsSlowConsumer(t *testing.T) {
	s := newEventServer(t, store.Limits{MaxEvents: 30})
	c := s.dial(t, mode{dialect: mcptask.Extension}, &client.Options{StreamBuffer: 8})
	ctx := testCtx(t)
	res, err := c.CallToolAndWait(ctx, "work", map[string]any{"parts": 3}, nil)
	require.NoError(t, err)
	require.False(t, res.IsError)

	ended := make(chan error, 1)
	started := make(chan string, 1)
	go func() {
		for ev, err := range c.CallTool(ctx, "work", map[string]any{"parts": 40, "wait": true}, nil) {
			if err != nil {
				ended <- err
				return
			}
			if ev.Kind == client.EventCreated {
				started <- ev.Task.ID
			}
		}
		ended <- nil
	}()
	id := <-started
	var seen []client.TaskEvent
	for ev, err := range c.StreamEvents(ctx, id, nil) {
		require.NoError(t, err)
		if len(seen) == 0 {
			close(s.gate)
			require.NoError(t, <-ended, "the task ran to its end while its reader was stuck")
		}
		seen = append(seen, ev)
	}
	dropped := 0
	for i := 1; i < len(seen); i++ {
		step := uint64(1)
		if seen[i].Type == mcptask.EventDropped {
			dropped++
			require.Contains(t, seen[i].Line(), "earlier events dropped")
			step = seen[i].Seq - seen[i-1].Seq
		}
		require.Equal(t, seen[i-1].Seq+step, seen[i].Seq, "%s", seen[i].Line())
	}
	require.Equal(t, 1, dropped, "40 log lines: more than the log's 30 events")
	require.Equal(t, mcptask.EventStatus, seen[len(seen)-1].Type)
}
