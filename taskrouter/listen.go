package taskrouter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// Task status notifications of the extension dialect: a client sends
// subscriptions/listen with notifications.taskIds; the server acknowledges
// the task ids it agrees to follow (those the requestor may see) and then
// sends notifications/tasks with the full task, as tasks/get would return
// it, every time one of them changes, on the listen request's own stream.
//
// go-sdk serves subscriptions/listen itself but knows no taskIds (it drops
// the field while decoding, as it drops params.task) and offers no way to
// send a custom notification, so the router answers a listen request that
// asks for task ids itself: the Streamable HTTP handler on the request's
// response stream, and a connection wrapped by Router.Transport (stdio,
// in-memory) on the connection, concurrently with the session's other
// requests (notifications/cancelled for the listen request ends it). The
// changes come from this process's writes and, on a shared store, from the
// store's change feed: any replica serves any task's notifications. The
// stream ends (with the listen result) once every followed task has ended,
// or when the client goes away.

const (
	methodSubscriptionsAcknowledged = "notifications/subscriptions/acknowledged"
	metaSubscriptionID              = "io.modelcontextprotocol/subscriptionId"
)

// listenSink is where a listen stream goes: notifications, then the
// listen result. Each reports whether the client is still there.
type listenSink struct {
	notify func(method string, params any) bool
	reply  func(result any) bool
}

// listenOwner resolves the requestor of a listen request the router
// answers itself (below the SDK): extra carries what the transport knows.
func (s *streaming) listenOwner(ctx context.Context, extra *mcp.RequestExtra) *Request {
	q := s.e.Resolve(ctx, &mcp.ServerRequest[*mcp.SubscriptionsListenParams]{Params: &mcp.SubscriptionsListenParams{}, Extra: extra})
	q.Dialect = mcptask.Extension
	return q
}

// serveListen answers a subscriptions/listen request for task
// notifications on its HTTP response stream.
func (s *streaming) serveListen(w http.ResponseWriter, hreq *http.Request, lr *wire.ListenRequest) {
	var id jsonrpc.ID
	var rawID any
	if json.Unmarshal(lr.ID, &rawID) == nil {
		id, _ = jsonrpc.MakeID(rawID)
	}
	if !lr.Params.DeclaresExtension() {
		wire.WriteRPCError(w, http.StatusOK, id, mcptask.MissingExtension("task notifications on subscriptions/listen"))
		return
	}
	q := s.listenOwner(hreq.Context(), &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(hreq.Context()), Header: hreq.Header})
	if q.OwnerErr != nil {
		wire.WriteRPCError(w, http.StatusOK, id, q.OwnerErr)
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(msg any) bool {
		b, err := json.Marshal(msg)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	s.runListen(hreq.Context(), q, rawID, lr.Params.TaskIDs(), listenSink{
		notify: func(method string, params any) bool { return send(notification(method, params)) },
		reply: func(result any) bool {
			return send(map[string]any{"jsonrpc": "2.0", "id": rawID, "result": result})
		},
	})
}

// runListen acknowledges the task ids q may see, then notifies the state
// of each followed task now and at every change, until every one of them
// ended (then it sends the listen result), the sink fails or ctx ends.
func (s *streaming) runListen(ctx context.Context, q *Request, rawID any, taskIDs []string, sink listenSink) {
	var agreed []string
	last := map[string]uint64{}
	for _, tid := range taskIDs {
		if _, dup := last[tid]; dup {
			continue
		}
		if _, err := s.e.TaskFor(ctx, q, tid); err == nil {
			agreed = append(agreed, tid)
			last[tid] = 0
		}
	}
	subMeta := map[string]any{metaSubscriptionID: rawID}
	if !sink.notify(methodSubscriptionsAcknowledged, map[string]any{
		"_meta":         subMeta,
		"notifications": map[string]any{"taskIds": nonNil(agreed)},
	}) {
		return
	}
	ln := &listener{tasks: agreed, changed: make(chan string, 1), done: make(chan struct{})}
	s.listeners.add(ln)
	defer s.listeners.remove(ln)
	// Report every followed task once now (a change between the client's
	// last poll and this subscription is not lost), then on every change.
	for {
		if ctx.Err() != nil {
			return // cancelled while a change was also ready: select picked the change
		}
		open := 0
		for _, tid := range agreed {
			t, err := s.e.TaskFor(ctx, q, tid)
			if err != nil {
				delete(last, tid) // gone: expired and swept
				continue
			}
			if t.Version != last[tid] {
				last[tid] = t.Version
				res, err := getReply(mcptask.Extension, t, s.inputs)
				if err != nil {
					// A damaged record: the client's tasks/get says why.
					s.e.Logger().Error("not notifying a task whose record is damaged", "task", tid, "error", err)
					if t.Status.Terminal() {
						continue
					}
					open++
					continue
				}
				if !sink.notify(mcptask.NotificationTasks, taskNotification(res.(*extGetTaskResult), subMeta)) {
					return
				}
			}
			if !t.Status.Terminal() {
				open++
			}
		}
		if open == 0 {
			sink.reply(map[string]any{"resultType": mcptask.ResultTypeComplete, "_meta": subMeta})
			return
		}
		select {
		case <-ln.changed:
		case <-pollTick(s.poll):
		case <-ln.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

func notification(method string, params any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
}

// taskNotification is the params of notifications/tasks: the task as
// tasks/get returns it, without the resultType, with _meta.
func taskNotification(reply *extGetTaskResult, meta map[string]any) *extGetTaskResult {
	reply.ResultType = ""
	reply.Meta = meta
	return reply
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// listeners are the subscriptions/listen streams of this process, by the
// task ids they follow.
type listeners struct {
	mu     sync.Mutex
	byTask map[string]map[*listener]struct{}
}

// listener is one subscriptions/listen stream: changed is signalled (never
// blocking) when a task it follows may have changed.
type listener struct {
	tasks   []string
	changed chan string
	done    chan struct{}
}

func (l *listeners) add(ln *listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byTask == nil {
		l.byTask = map[string]map[*listener]struct{}{}
	}
	for _, id := range ln.tasks {
		set := l.byTask[id]
		if set == nil {
			set = map[*listener]struct{}{}
			l.byTask[id] = set
		}
		set[ln] = struct{}{}
	}
}

func (l *listeners) remove(ln *listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ln.tasks {
		delete(l.byTask[id], ln)
		if len(l.byTask[id]) == 0 {
			delete(l.byTask, id)
		}
	}
}

// changed signals the listeners of task id.
func (l *listeners) changed(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ln := range l.byTask[id] {
		select {
		case ln.changed <- id:
		default: // a signal is pending; the listener re-reads everything it follows
		}
	}
}

// changedAll signals every listener.
func (l *listeners) changedAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, set := range l.byTask {
		for ln := range set {
			select {
			case ln.changed <- "":
			default:
			}
		}
	}
}

// closeAll ends every listener (the router is closing).
func (l *listeners) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[*listener]bool{}
	for _, set := range l.byTask {
		for ln := range set {
			if !seen[ln] {
				seen[ln] = true
				close(ln.done)
			}
		}
	}
	l.byTask = nil
}
