package taskrouter

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// tasks/stream on the wire (mcptask.MethodTasksStream, SEP-2694's draft).
// go-sdk can neither send a custom notification nor keep a request open
// while it writes them, so the router serves tasks/stream below the SDK,
// as it serves subscriptions/listen for tasks (listen.go): the HTTP
// handler on the POST's response stream (always SSE), a connection
// wrapped by Router.Transport (stdio, in-memory) on the connection,
// concurrently with the session's other requests. The request is
// resolved like any other (its dialect, its owner: the session's, the
// token's), passes the tasks/* gates, and may read the task when
// tasks/get may (same errors); then every event after params.after goes
// out as notifications/tasks/event, live, and the request's result comes
// once the task has ended and its last event was sent.
//
// Over HTTP each event's SSE id names the stream and the event's
// sequence number (streamEventID), and the stream opens with an event that
// carries only an id: a client whose connection broke resumes it with a
// GET carrying Last-Event-ID (Streamable HTTP's resumption, which go-sdk's
// client transport does by itself), on any replica, after a restart too,
// and gets the events after that one, then the result. A POST of
// tasks/stream with a Last-Event-ID header of its stream resumes after it
// too (whichever of it and params.after is later).

// streamEventPrefix starts the SSE event ids of tasks/stream.
const streamEventPrefix = "tbs1."

// streamEventID is the SSE id of the event numbered seq of a tasks/stream
// of task id in dialect d, answering request reqID (its JSON):
// "tbs1.<seq>.<dialect label>.<base64url task id>.<base64url request id>".
func streamEventID(seq uint64, d mcptask.Dialect, id string, reqID json.RawMessage) string {
	enc := base64.RawURLEncoding
	return streamEventPrefix + strconv.FormatUint(seq, 10) + "." + d.Label() + "." + enc.EncodeToString([]byte(id)) + "." + enc.EncodeToString(reqID)
}

// parseStreamEventID reads a streamEventID.
func parseStreamEventID(s string) (seq uint64, d mcptask.Dialect, id string, reqID json.RawMessage, ok bool) {
	rest, ok := strings.CutPrefix(s, streamEventPrefix)
	if !ok {
		return 0, 0, "", nil, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 4 {
		return 0, 0, "", nil, false
	}
	seq, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return 0, 0, "", nil, false
	}
	switch parts[1] {
	case mcptask.Core.Label():
		d = mcptask.Core
	case mcptask.Extension.Label():
		d = mcptask.Extension
	default:
		return 0, 0, "", nil, false
	}
	enc := base64.RawURLEncoding
	rawID, err1 := enc.DecodeString(parts[2])
	rawReq, err2 := enc.DecodeString(parts[3])
	if err1 != nil || err2 != nil || len(rawID) == 0 || !resumableID(rawReq) {
		return 0, 0, "", nil, false
	}
	return seq, d, string(rawID), rawReq, true
}

// resumableID reports whether a request id read back from a
// Last-Event-ID may be echoed: only what a POST's id may be (a string,
// or an integer within ±wire.MaxSafeID; wire.BadID), never null, an
// object, an array, a boolean, a fraction or an exponent. The header is
// the client's: an id the server wrote passes, a forged one must pass
// the rules a request's id does.
func resumableID(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		return json.Unmarshal(raw, &s) == nil
	case c == '-' || c >= '0' && c <= '9':
		return json.Valid(raw) && !wire.BadID(raw)
	}
	return false
}

// streamRequest is a lone tasks/stream request.
type streamRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params *streamParams   `json:"params"`
}

var streamMethod = []byte(`"` + mcptask.MethodTasksStream + `"`)

// streamRequestIn decodes body when it is one tasks/stream request (a
// call); ok is false for anything else, and err set for a tasks/stream
// whose params do not decode.
func streamRequestIn(body []byte) (sr *streamRequest, ok bool, err error) {
	if !bytes.Contains(body, streamMethod) {
		return nil, false, nil
	}
	var probe struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(body, &probe) != nil || probe.Method != mcptask.MethodTasksStream || len(probe.ID) == 0 || string(probe.ID) == "null" {
		return nil, false, nil
	}
	sr = &streamRequest{ID: probe.ID, Method: probe.Method, Params: &streamParams{}}
	if len(probe.Params) > 0 && string(probe.Params) != "null" {
		if err := json.Unmarshal(probe.Params, sr.Params); err != nil {
			return sr, true, mcptask.InvalidParams("tasks/stream params: %v", err)
		}
	}
	return sr, true, nil
}

// streamOut is where a tasks/stream goes: its events, then its result or
// error. event and reply report whether the client is still there.
type streamOut struct {
	event func(seq uint64, p *mcptask.TaskEventParams) bool
	reply func(result any) bool
	fail  func(err error)
}

// streamResult is the result of tasks/stream.
type streamResult struct {
	ResultType string         `json:"resultType,omitempty"`
	Meta       map[string]any `json:"_meta"`
}

// resolveStream resolves a tasks/stream that the router serves below the
// SDK, as the middleware resolves the requests that pass through it: on
// session ss (nil when none), with what the transport knows in extra.
// header is the dialect the transport's headers name: it counts when the
// params do not name one.
func (s *streaming) resolveStream(ctx context.Context, ss *mcp.ServerSession, extra *mcp.RequestExtra, p *streamParams, header mcptask.Dialect) *Request {
	q := s.e.Resolve(ctx, &mcp.ServerRequest[*streamParams]{Session: ss, Params: p, Extra: extra})
	if header.NegotiatesPerRequest() && q.Dialect != mcptask.Extension {
		q.Dialect = mcptask.Extension
	}
	return q
}

// runStream serves tasks/stream p for q on out, until the task has ended
// and its events were sent, the client goes away or ctx ends.
func (s *streaming) runStream(ctx context.Context, q *Request, p *streamParams, out streamOut) {
	if err := gate(q, mcptask.MethodTasksStream, p.TaskID); err != nil {
		out.fail(err)
		return
	}
	if _, err := s.e.load(ctx, q, p.TaskID); err != nil {
		out.fail(err)
		return
	}
	end := mcptask.StreamEnd{Last: p.After}
	status, err := s.events(ctx, p.TaskID, p.After, func(e store.Event) error {
		if !out.event(e.Seq, wireEvent(p.TaskID, e)) {
			return errStreamGone
		}
		end.Last = e.Seq
		return nil
	})
	switch {
	case err == nil:
		end.Status = status
		res := streamResult{Meta: map[string]any{mcptask.MetaStream: end}}
		if q.Dialect == mcptask.Extension {
			res.ResultType = mcptask.ResultTypeComplete
		}
		out.reply(res)
	case errors.Is(err, errStreamGone), ctx.Err() != nil:
	default:
		out.fail(storeError(err))
	}
}

// wireEvent is event e of task id as notifications/tasks/event carries it.
func wireEvent(id string, e store.Event) *mcptask.TaskEventParams {
	return &mcptask.TaskEventParams{TaskID: id, Seq: e.Seq, Type: e.Type.Wire(), Data: e.Data,
		Meta: map[string]any{mcptask.MetaEventAt: e.At.UTC().Format(time.RFC3339Nano)}}
}

// ---- Streamable HTTP ----

// serveStreamHTTP answers a POST of one tasks/stream request (sr; perr
// when its params do not decode) on an SSE response stream. d is the
// dialect of the request's headers.
func (h *httpShim) serveStreamHTTP(w http.ResponseWriter, req *http.Request, sr *streamRequest, perr error, d mcptask.Dialect) {
	id := rpcID(sr.ID)
	if perr != nil {
		wire.WriteRPCError(w, http.StatusOK, id, perr)
		return
	}
	if last, ok := lastEventAfter(req, sr.Params.TaskID); ok && last > sr.Params.After {
		sr.Params.After = last
	}
	q := h.r.streaming.resolveStream(req.Context(), h.session(req), h.extra(req), sr.Params, d)
	h.streamSSE(w, req, q, sr.Params, sr.ID)
}

// resumeStreamHTTP answers a GET whose Last-Event-ID names an event of a
// tasks/stream (streamEventID): the stream goes on after that event, on
// this replica, for the same requestor (checked again). It reports false
// for any other GET.
func (h *httpShim) resumeStreamHTTP(w http.ResponseWriter, req *http.Request) bool {
	if req.Method != http.MethodGet {
		return false
	}
	last := req.Header.Get("Last-Event-ID")
	seq, d, taskID, reqID, ok := parseStreamEventID(last)
	if !ok {
		if !strings.HasPrefix(last, streamEventPrefix) {
			return false // another stream's: the SDK's
		}
		// One of this server's stream ids, altered: nothing to resume,
		// and no id to echo.
		wire.WriteRPCError(w, http.StatusBadRequest, jsonrpc.ID{}, mcptask.InvalidRequest(
			"invalid request: Last-Event-ID %.200q names no event of a tasks/stream this server wrote (a stream's request id must be a string or an integer within ±%d)",
			last, wire.MaxSafeID))
		return true
	}
	p := &streamParams{TaskID: taskID, After: seq}
	q := h.r.streaming.resolveStream(req.Context(), h.session(req), h.extra(req), p, d)
	q.Dialect = d
	q.Declared = true // declared by the request that opened the stream
	h.streamSSE(w, req, q, p, reqID)
	return true
}

// session returns the stateful session a request names, when this
// handler serves it (and, for an authenticated one, its user matches).
func (h *httpShim) session(req *http.Request) *mcp.ServerSession {
	s := h.r.fast.sessions.Get(req.Header.Get("Mcp-Session-Id"))
	if s == nil || s.Handler != h.id {
		return nil
	}
	if s.UserID != "" {
		if ti := auth.TokenInfoFromContext(req.Context()); ti == nil || ti.UserID != s.UserID {
			return nil
		}
	}
	return s.SS
}

// extra is what the transport knows of an HTTP request.
func (h *httpShim) extra(req *http.Request) *mcp.RequestExtra {
	return &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(req.Context()), Header: req.Header}
}

// lastEventAfter reads a Last-Event-ID header naming an event of a stream
// of task id.
func lastEventAfter(req *http.Request, id string) (uint64, bool) {
	seq, _, taskID, _, ok := parseStreamEventID(req.Header.Get("Last-Event-ID"))
	return seq, ok && taskID == id
}

// streamSSE serves a resolved tasks/stream as an SSE response: a first
// event with only an id (so a client can resume before any event came),
// one event per task event, then the result; errors before anything was
// written are a JSON error reply.
func (h *httpShim) streamSSE(w http.ResponseWriter, req *http.Request, q *Request, p *streamParams, reqID json.RawMessage) {
	id := rpcID(reqID)
	flusher, _ := w.(http.Flusher)
	started := false
	start := func() {
		if started {
			return
		}
		started = true
		wire.SetStreamHeaders(w, false)
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "id: %s\ndata:\n\n", streamEventID(p.After, q.Dialect, p.TaskID, reqID))
	}
	send := func(eventID string, msg any) bool {
		b, err := json.Marshal(msg)
		if err != nil {
			return false
		}
		start()
		if eventID != "" {
			_, err = fmt.Fprintf(w, "id: %s\nevent: message\ndata: %s\n\n", eventID, b)
		} else {
			_, err = fmt.Fprintf(w, "event: message\ndata: %s\n\n", b)
		}
		if err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	ctx := req.Context()
	h.r.streaming.runStream(ctx, q, p, streamOut{
		event: func(seq uint64, ev *mcptask.TaskEventParams) bool {
			return send(streamEventID(seq, q.Dialect, p.TaskID, reqID), notification(mcptask.NotificationTaskEvent, ev))
		},
		reply: func(result any) bool {
			return send("", map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(reqID), "result": result})
		},
		fail: func(err error) {
			if !started {
				started = true
				wire.WriteRPCError(w, http.StatusOK, id, rpcError(err))
				return
			}
			send("", map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(reqID), "error": rpcError(err)})
		},
	})
	if !started && ctx.Err() == nil {
		start() // a stream that ended without a word (the router closing)
	}
}

// rpcID is a request's JSON id as a jsonrpc.ID (the zero ID when it is
// not one).
func rpcID(raw json.RawMessage) jsonrpc.ID {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return jsonrpc.ID{}
	}
	id, _ := jsonrpc.MakeID(v)
	return id
}

// rpcError is err as a JSON-RPC error.
func rpcError(err error) *jsonrpc.Error {
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return je
	}
	return mcptask.InternalError("%v", err)
}

// ---- stdio and in-memory ----

// stream serves a tasks/stream request on the connection, in its own
// goroutine, until the task ended and its events were sent, the client
// cancels it (notifications/cancelled) or the connection closes.
func (c *pushConn) stream(req *jsonrpc.Request) {
	write := func(ctx context.Context, msg jsonrpc.Message) bool {
		return c.writeStream(ctx, msg, "tasks/stream")
	}
	fail := func(err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		write(ctx, &jsonrpc.Response{ID: req.ID, Error: rpcError(err)})
	}
	p := &streamParams{}
	if len(req.Params) > 0 && string(req.Params) != "null" {
		if err := json.Unmarshal(req.Params, p); err != nil {
			fail(mcptask.InvalidParams("tasks/stream params: %v", err))
			return
		}
	}
	c.serveStream(req.ID, func(ctx context.Context) {
		q := c.r.streaming.resolveStream(ctx, c.ss.Load(), &mcp.RequestExtra{}, p, 0)
		c.r.streaming.runStream(ctx, q, p, streamOut{
			event: func(_ uint64, ev *mcptask.TaskEventParams) bool {
				raw, err := json.Marshal(ev)
				return err == nil && write(ctx, &jsonrpc.Request{Method: mcptask.NotificationTaskEvent, Params: raw})
			},
			reply: func(result any) bool {
				raw, err := json.Marshal(result)
				return err == nil && write(ctx, &jsonrpc.Response{ID: req.ID, Result: raw})
			},
			fail: fail,
		})
	})
}
