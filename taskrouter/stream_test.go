package taskrouter_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// reporterIn is the input of the test tool "reporter".
type reporterIn struct {
	Lines int    `json:"lines"`
	Gate  string `json:"gate,omitempty"` // wait for this gate after the first report
}

// gates lets a test hold the reporter tool between its first report and
// the rest.
type gates struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (g *gates) get(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = map[string]chan struct{}{}
	}
	if g.ch[name] == nil {
		g.ch[name] = make(chan struct{})
	}
	return g.ch[name]
}

// addReporter registers "reporter": it reports progress, log lines (with
// attributes and a group), partial output and a notifications/progress of
// its own, as a task handler would.
func addReporter(h *harness, g *gates) {
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "reporter"}, func(ctx context.Context, req *mcp.CallToolRequest, in reporterIn) (*mcp.CallToolResult, any, error) {
		log := taskrouter.Logger(ctx).With("tool", "reporter")
		if err := taskrouter.Progress(ctx, 0, float64(in.Lines), "starting"); err != nil {
			return nil, nil, err
		}
		if in.Gate != "" {
			select {
			case <-g.get(in.Gate):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		for i := 1; i <= in.Lines; i++ {
			_ = taskrouter.Progress(ctx, float64(i), float64(in.Lines), fmt.Sprintf("line %d", i))
			log.Info(fmt.Sprintf("wrote line %d", i), "n", i, slog.Group("g", "k", "v"))
			log.Debug("left out")
		}
		if err := taskrouter.Output(ctx, map[string]any{"partial": "report"}); err != nil {
			return nil, nil, err
		}
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: "tok", Progress: 99, Total: 100, Message: "via notify"})
		return textResult("reported"), nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
}

// createTask starts tool as a task in the peer's dialect and returns its id.
func (p *peer) createTask(tool string, args map[string]any) string {
	p.t.Helper()
	params := map[string]any{"name": tool, "arguments": args}
	if p.d == core {
		params["task"] = map[string]any{}
		return taskOf(p.t.(*testing.T), p.mustCall("tools/call", params))["taskId"].(string)
	}
	return p.mustCall("tools/call", params)["taskId"].(string)
}

// streamNotes returns the notifications/tasks/event of task id received
// so far.
func (p *peer) streamNotes(id string) []map[string]any {
	var out []map[string]any
	for _, n := range p.notesOf(mcptask.NotificationTaskEvent) {
		if n["taskId"] == id {
			out = append(out, n)
		}
	}
	return out
}

// eventTypes are the types of notes, without the vendor prefix.
func eventTypes(notes []map[string]any) []string {
	var out []string
	for _, n := range notes {
		out = append(out, string(mcptask.EventTypeOf(n["type"].(string))))
	}
	return out
}

// requireDense checks that notes are numbered from first on, one by one.
func requireDense(t *testing.T, notes []map[string]any, first uint64) {
	t.Helper()
	for i, n := range notes {
		require.EqualValues(t, first+uint64(i), n["seq"], "event %d of %v", i, eventTypes(notes))
	}
}

// TestStreamLiveBothDialects: tasks/stream in both dialects, over
// Streamable HTTP and a connection wrapped by Router.Transport: a task's
// events arrive while it runs (the first progress report before the
// handler goes on), numbered densely from 1, with the vendor-prefixed
// types and their payloads (progress, log lines with attributes, output,
// a notifications/progress the handler sent itself, the status events);
// the request's result comes once the task ended, naming the last event.
// A second stream resuming after an event gets exactly the ones after it.
func TestStreamLiveBothDialects(t *testing.T) {
	for _, k := range transports {
		for _, d := range []dialect{core, ext} {
			t.Run(fmt.Sprintf("%s/%s", k, map[dialect]string{core: "core", ext: "ext"}[d]), func(t *testing.T) {
				h := newHarness(t, nil)
				g := &gates{}
				addReporter(h, g)
				p := h.dial(k, d, nil)
				id := p.createTask("reporter", map[string]any{"lines": 3, "gate": "go"})

				type outcome struct {
					res map[string]any
					err error
				}
				done := make(chan outcome, 1)
				go func() {
					res, err := p.call(mcptask.MethodTasksStream, map[string]any{"taskId": id})
					done <- outcome{res, err}
				}()
				// Live: the first report arrives while the handler waits.
				require.Eventually(t, func() bool {
					return len(p.streamNotes(id)) >= 2
				}, 30*time.Second, 5*time.Millisecond)
				require.Equal(t, []string{"status", "progress"}, eventTypes(p.streamNotes(id))[:2])
				close(g.get("go"))

				var o outcome
				select {
				case o = <-done:
				case <-time.After(20 * time.Second):
					t.Fatal("tasks/stream did not end with its task")
				}
				require.NoError(t, o.err)
				notes := p.streamNotes(id)
				requireDense(t, notes, 1)
				end := o.res["_meta"].(map[string]any)[mcptask.MetaStream].(map[string]any)
				require.EqualValues(t, len(notes), end["last"])
				require.Equal(t, "completed", end["status"])
				if d == ext {
					require.Equal(t, "complete", o.res["resultType"])
				}

				types := eventTypes(notes)
				require.Equal(t, "status", types[len(types)-1])
				require.Equal(t, "completed", notes[len(notes)-1]["data"].(map[string]any)["status"])
				var lines []string
				var lastProgress map[string]any
				for _, n := range notes {
					require.True(t, strings.HasPrefix(n["type"].(string), mcptask.EventTypePrefix))
					require.NotEmpty(t, n["_meta"].(map[string]any)[mcptask.MetaEventAt])
					data := n["data"].(map[string]any)
					switch mcptask.EventTypeOf(n["type"].(string)) {
					case mcptask.EventLog:
						lines = append(lines, data["message"].(string))
						require.Equal(t, "info", data["level"])
						require.Equal(t, map[string]any{"tool": "reporter", "n": data["attrs"].(map[string]any)["n"], "g": map[string]any{"k": "v"}}, data["attrs"])
					case mcptask.EventProgress:
						lastProgress = data
					case mcptask.EventOutput:
						require.Equal(t, map[string]any{"partial": "report"}, data["output"])
					}
				}
				require.Equal(t, []string{"wrote line 1", "wrote line 2", "wrote line 3"}, lines, "every log line, in order; debug left out")
				require.Equal(t, map[string]any{"progress": 99.0, "total": 100.0, "message": "via notify"}, lastProgress,
					"the latest report stands, the handler's own notifications/progress too")
				require.Contains(t, types, "output")

				// Resume after the third event: exactly the rest, once each.
				before := len(p.notesOf(mcptask.NotificationTaskEvent))
				res := p.mustCall(mcptask.MethodTasksStream, map[string]any{"taskId": id, "after": 3})
				again := p.notesOf(mcptask.NotificationTaskEvent)[before:]
				requireDense(t, again, 4)
				require.Len(t, again, len(notes)-3)
				require.EqualValues(t, len(notes), res["_meta"].(map[string]any)[mcptask.MetaStream].(map[string]any)["last"])
				// After the last: nothing, and the result at once.
				before = len(p.notesOf(mcptask.NotificationTaskEvent))
				p.mustCall(mcptask.MethodTasksStream, map[string]any{"taskId": id, "after": len(notes)})
				require.Len(t, p.notesOf(mcptask.NotificationTaskEvent), before)
			})
		}
	}
}

// TestStreamOwnerRules: a requestor that may not see a task cannot read
// its stream, with the very error tasks/get gives; an undeclared
// extension request is refused as for the other tasks/* methods.
func TestStreamOwnerRules(t *testing.T) {
	h := newHarness(t, func(o *taskrouter.Options) { o.SessionBound = true })
	g := &gates{}
	addReporter(h, g)
	a := h.dial(overHTTP, core, nil)
	b := h.dial(overHTTP, core, nil)
	id := a.createTask("reporter", map[string]any{"lines": 1, "gate": "never"})

	_, getErr := b.call("tasks/get", map[string]any{"taskId": id})
	_, streamErr := b.call(mcptask.MethodTasksStream, map[string]any{"taskId": id})
	require.Equal(t, rpcCode(t, getErr), rpcCode(t, streamErr))
	require.Equal(t, getErr.Error(), streamErr.Error())
	require.Empty(t, b.streamNotes(id), "nothing of A's task reached B")

	for _, k := range transports {
		u := h.dial(k, extUndeclared, nil)
		_, err := u.call(mcptask.MethodTasksStream, map[string]any{"taskId": id})
		require.EqualValues(t, mcptask.CodeMissingCapability, rpcCode(t, err), k.String())
		_, err = a.call(mcptask.MethodTasksStream, map[string]any{"taskId": id, "after": -1})
		require.EqualValues(t, mcptask.CodeInvalidParams, rpcCode(t, err), "bad params: %v", err)
	}
	close(g.get("never"))
}

// TestStreamRateBound: a handler that reports progress thousands of times
// as fast as it can costs the store at most one write per EventInterval,
// and the latest report is the one kept.
func TestStreamRateBound(t *testing.T) {
	h := newHarness(t, nil)
	var elapsed time.Duration
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "chatty"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		start := time.Now()
		for i := 1; i <= 5000; i++ {
			_ = taskrouter.Progress(ctx, float64(i), 5000, "")
		}
		elapsed = time.Since(start)
		return textResult("ok"), nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	p := h.dial(inMemory, ext, nil)
	id := p.createTask("chatty", nil)
	p.mustCall(mcptask.MethodTasksStream, map[string]any{"taskId": id})
	var progress []map[string]any
	for _, n := range p.streamNotes(id) {
		if mcptask.EventTypeOf(n["type"].(string)) == mcptask.EventProgress {
			progress = append(progress, n["data"].(map[string]any))
		}
	}
	require.NotEmpty(t, progress)
	require.LessOrEqual(t, len(progress), int(elapsed/taskrouter.EventInterval)+2, "at most one write per interval (the first at once, one with the outcome)")
	require.EqualValues(t, 5000, progress[len(progress)-1]["progress"], "the latest report is kept")
}

// TestStreamSlowReader: a reader that stops reading holds nobody up: the
// task runs to its end while the reader's callback blocks; the reader,
// once it goes on, is told how many events the log dropped meanwhile
// (an EventDropped numbered like the last one it stands for) and resumes
// at the first event kept, each number once.
func TestStreamSlowReader(t *testing.T) {
	st := memory.New(&store.Options{Limits: store.Limits{MaxEvents: 20}})
	h := newHarnessOn(t, st, nil)
	g := &gates{}
	addReporter(h, g)
	p := h.dial(inMemory, ext, nil)
	id := p.createTask("reporter", map[string]any{"lines": 60, "gate": "go"})

	got := make(chan store.Event, 1)
	hold := make(chan struct{})
	var seen []store.Event
	done := make(chan error, 1)
	go func() {
		done <- h.r.Streams().Events(context.Background(), id, 0, func(e store.Event) error {
			if len(seen) == 0 {
				got <- e
				<-hold // a reader that does not read
			}
			seen = append(seen, e)
			return nil
		})
	}()
	<-got
	close(g.get("go"))
	// The task ends while its reader is stuck.
	require.Equal(t, "completed", p.waitStatus(id, "completed")["status"])
	close(hold)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the reader did not finish")
	}
	var markers []int
	for i, e := range seen {
		if e.Type == mcptask.EventDropped {
			markers = append(markers, i)
		}
	}
	require.Len(t, markers, 1, "the reader fell behind the log's cap once")
	m := seen[markers[0]]
	var d mcptask.DroppedEvent
	require.NoError(t, json.Unmarshal(m.Data, &d))
	require.EqualValues(t, d.Next-1, m.Seq, "numbered like the last event it stands for")
	require.EqualValues(t, d.Next-1-seen[markers[0]-1].Seq, d.Count)
	require.Len(t, seen[markers[0]+1:], 20, "then every event the log keeps")
	for i := 1; i < len(seen); i++ {
		step := uint64(1)
		if i == markers[0] {
			step = d.Count // the marker stands for the dropped ones
		}
		require.Equal(t, seen[i-1].Seq+step, seen[i].Seq, "each number once, in order")
	}
	_, ok := terminal(seen[len(seen)-1])
	require.True(t, ok, "the stream ends with the terminal status")
}

// terminal reports the status of a terminal status event.
func terminal(e store.Event) (mcptask.Status, bool) {
	var s mcptask.StatusEvent
	if e.Type != mcptask.EventStatus || json.Unmarshal(e.Data, &s) != nil {
		return "", false
	}
	return s.Status, s.Status.Terminal()
}

// TestStreamSSEResume: over Streamable HTTP each event has an SSE id; a
// client whose stream broke resumes it with a GET carrying Last-Event-ID
// (as go-sdk's client transport does) and gets the events after that one,
// then the original request's result.
func TestStreamSSEResume(t *testing.T) {
	h := newHarness(t, nil)
	g := &gates{}
	addReporter(h, g)
	p := h.dial(overHTTP, ext, nil)
	id := p.createTask("reporter", map[string]any{"lines": 2, "gate": "go"})

	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "s-1", "method": mcptask.MethodTasksStream,
		"params": p.params(map[string]any{"taskId": id})})
	req, _ := http.NewRequest(http.MethodPost, h.serveHTTP()+"/", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", mcptask.ExtensionVersion)
	req.Header.Set("Mcp-Method", mcptask.MethodTasksStream)
	req.Header.Set("Mcp-Name", id)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	sse := bufio.NewReader(resp.Body)
	primer := readSSE(t, sse)
	require.NotEmpty(t, primer.id, "the stream opens with an id to resume from")
	require.Empty(t, primer.data)
	first := readSSE(t, sse)  // the working status
	second := readSSE(t, sse) // the first report
	require.EqualValues(t, 2, second.note(t)["seq"])
	require.NoError(t, resp.Body.Close()) // the connection breaks

	close(g.get("go"))
	get, _ := http.NewRequest(http.MethodGet, h.serveHTTP()+"/", nil)
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Mcp-Protocol-Version", mcptask.ExtensionVersion)
	get.Header.Set("Last-Event-ID", second.id)
	resp, err = http.DefaultClient.Do(get)
	require.NoError(t, err)
	defer resp.Body.Close()
	sse = bufio.NewReader(resp.Body)
	require.Empty(t, readSSE(t, sse).data) // the primer
	want := uint64(3)
	for {
		ev := readSSE(t, sse)
		var msg map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev.data), &msg))
		if msg["id"] != nil {
			require.Equal(t, "s-1", msg["id"], "the result answers the request that opened the stream")
			end := msg["result"].(map[string]any)["_meta"].(map[string]any)[mcptask.MetaStream].(map[string]any)
			require.EqualValues(t, want-1, end["last"])
			break
		}
		require.EqualValues(t, want, msg["params"].(map[string]any)["seq"])
		want++
	}
	require.NotEqual(t, first.id, second.id)
}

// sseEvent is one server-sent event.
type sseEvent struct{ id, data string }

func (e sseEvent) note(t *testing.T) map[string]any {
	var msg map[string]any
	require.NoError(t, json.Unmarshal([]byte(e.data), &msg))
	return msg["params"].(map[string]any)
}

// readSSE reads the next event.
func readSSE(t *testing.T, r *bufio.Reader) sseEvent {
	t.Helper()
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			return ev
		case strings.HasPrefix(line, "id:"):
			ev.id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			ev.data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		}
	}
}

// TestStreamInputRequestAndLatestProgress: a task's request for client
// input is an event of its log, and task_result's "still running" answer
// carries the latest progress line.
func TestStreamInputRequestAndLatestProgress(t *testing.T) {
	h := newHarness(t, nil)
	h.r.AddTaskTools(nil)
	g := &gates{}
	addReporter(h, g)
	p := h.dial(inMemory, ext, nil)
	id := p.createTask("ask", nil)
	p.waitStatus(id, "input_required")
	page, err := h.st.Events(context.Background(), id, 0, 10)
	require.NoError(t, err)
	var types []mcptask.EventType
	for _, e := range page.Events {
		types = append(types, e.Type)
	}
	require.Equal(t, []mcptask.EventType{mcptask.EventStatus, mcptask.EventInputRequest, mcptask.EventStatus}, types)
	require.Contains(t, string(page.Events[1].Data), "elicitation/create")
	p.mustCall("tasks/cancel", map[string]any{"taskId": id})

	rid := p.createTask("reporter", map[string]any{"lines": 1, "gate": "later"})
	require.Eventually(t, func() bool {
		res := p.mustCall("tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": rid, "wait_seconds": 0}})
		text := res["content"].([]any)[0].(map[string]any)["text"].(string)
		return strings.Contains(text, "still running") && strings.Contains(text, "Latest progress: 0/1 (0%) starting")
	}, 30*time.Second, 10*time.Millisecond)
	close(g.get("later"))
}
