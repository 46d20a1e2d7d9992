package wire

// What go-sdk's Streamable HTTP handler and jsonrpc2 layer do around a
// request the fast path serves: the checks the handler makes before it
// reads a POST, and the replies it writes.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// SDKReads reports whether go-sdk's Streamable HTTP handler with options
// o passes a POST of n body bytes on to its message handling: the checks
// common to its stateless and stateful handlers.
func SDKReads(req *http.Request, o *mcp.StreamableHTTPOptions, n int) bool {
	if !o.DisableLocalhostProtection {
		if la, ok := req.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil {
			if addrIsLoopback(la) && !isLoopback(req.Host) {
				return false
			}
		}
	}
	if o.CrossOriginProtection != nil {
		return false
	}
	switch limit := o.MaxRequestBodyBytes; {
	case limit == 0 && int64(n) > mcp.DefaultMaxRequestBodyBytes, limit > 0 && int64(n) > limit:
		return false
	}
	if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	if jsonOK, streamOK := streamableAccepts(req.Header.Values("Accept")); !jsonOK || !streamOK {
		return false
	}
	return len(req.Header.Values("Last-Event-ID")) == 0
}

// streamableAccepts is go-sdk's check of a POST's Accept header.
func streamableAccepts(values []string) (jsonOK, streamOK bool) {
	for _, value := range values {
		for _, raw := range strings.Split(value, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(raw), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

// addrIsLoopback is isLoopback(a.String()), without formatting a TCP
// address.
func addrIsLoopback(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return isLoopback(a.String())
}

// isLoopback is go-sdk's check of a loopback address or host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// SetStreamHeaders sets the headers the SDK sets on a POST's response
// before it answers.
func SetStreamHeaders(w http.ResponseWriter, jsonResponse bool) {
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-cache, no-transform")
	if jsonResponse {
		hdr.Set("Content-Type", "application/json")
	} else {
		hdr.Set("Content-Type", "text/event-stream")
		hdr.Set("Connection", "keep-alive")
	}
}

// WriteReply writes resp as the SDK's Streamable HTTP handler writes a
// POST's last response: a JSON body, or an SSE event; a protocol-level
// error of a request that negotiates per request (d) as a JSON body with
// the HTTP status SEP-2575 assigns it.
//
// Unlike the SDK it does not flush: the reply is the last thing the
// handler writes, so net/http sends the headers, the reply and the end
// of the body together, in one write on the socket (with a
// Content-Length when the body is small, where the SDK's flush makes the
// body chunked and ends it in a second write).
func WriteReply(w http.ResponseWriter, jsonResponse bool, resp *jsonrpc.Response, d mcptask.Dialect) {
	data, err := EncodeResponse(resp)
	if err != nil {
		return
	}
	SetStreamHeaders(w, jsonResponse)
	if status := errorStatus(resp, d); status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(data)
		return
	}
	if jsonResponse {
		_, _ = w.Write(data)
		return
	}
	_ = writeEvent(w, data, false)
}

// EncodeResponse encodes resp as jsonrpc.EncodeMessage does. A result
// (already encoded, compact, by Response) is framed directly, without
// encoding it a second time.
func EncodeResponse(resp *jsonrpc.Response) ([]byte, error) {
	if resp.Error != nil || resp.Result == nil || !resp.ID.IsValid() {
		return jsonrpc.EncodeMessage(resp)
	}
	var id []byte
	switch v := resp.ID.Raw().(type) {
	case int64:
		id = strconv.AppendInt(nil, v, 10)
	case string:
		var err error
		if id, err = encodeNoEscape(v); err != nil {
			return nil, err
		}
	default:
		return jsonrpc.EncodeMessage(resp)
	}
	const head, mid = `{"jsonrpc":"2.0","id":`, `,"result":`
	b := make([]byte, 0, len(head)+len(id)+len(mid)+len(resp.Result)+1)
	b = append(append(append(append(b, head...), id...), mid...), resp.Result...)
	return append(b, '}'), nil
}

// writeEvent writes data as one SSE "message" event, as go-sdk writes
// one (without an event id: the fast path serves no session with an
// event store), and flushes it when flush is set.
func writeEvent(w http.ResponseWriter, data []byte, flush bool) error {
	const pre, post = "event: message\ndata: ", "\n\n"
	b := make([]byte, 0, len(pre)+len(data)+len(post))
	b = append(append(append(b, pre...), data...), post...)
	_, err := w.Write(b)
	if flush {
		_ = http.NewResponseController(w).Flush()
	}
	return err
}

// WriteNotification writes a notification a handler sends while its call
// is answered on the fast path as the SDK writes one on the call's SSE
// stream: an event holding the JSON-RPC notification (params encoded as
// the SDK's jsonrpc2 layer encodes them), flushed at once. The first one
// sets the stream's headers.
func WriteNotification(w http.ResponseWriter, first bool, method string, params any) error {
	var raw json.RawMessage
	if params != nil {
		var err error
		if raw, err = encodeNoEscape(params); err != nil {
			return err
		}
	}
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: method, Params: raw})
	if err != nil {
		return err
	}
	if first {
		SetStreamHeaders(w, false)
	}
	return writeEvent(w, data, true)
}

// ErrStreamClosed is go-sdk's refusal of a message related to a request
// that has been answered: its stream is gone.
var ErrStreamClosed = fmt.Errorf("%w: write to closed stream", errRejected)

// WriteSDKError is go-sdk's writeJSONRPCError.
func WriteSDKError(w http.ResponseWriter, status int, id jsonrpc.ID, je *jsonrpc.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: je}); err == nil {
		_, _ = w.Write(data)
	}
}

// WriteRPCError answers with a JSON-RPC error response, the way the SDK's
// handler answers its own header and protocol errors (an error that is
// not a *jsonrpc.Error becomes -32603).
func WriteRPCError(w http.ResponseWriter, status int, id jsonrpc.ID, err error) {
	je, ok := err.(*jsonrpc.Error)
	if !ok {
		je = mcptask.InternalError("%v", err)
	}
	body, merr := json.Marshal(struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", id.Raw(), je})
	if merr != nil {
		http.Error(w, je.Message, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// errorStatus is go-sdk's extractErrorStatus: the HTTP status of a
// protocol-level error of a request that negotiates per request
// (2026-07-28 and later).
func errorStatus(resp *jsonrpc.Response, d mcptask.Dialect) int {
	if !d.NegotiatesPerRequest() || resp.Error == nil {
		return 0
	}
	var je *jsonrpc.Error
	if !errors.As(resp.Error, &je) {
		return 0
	}
	switch je.Code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeInvalidParams, mcp.CodeUnsupportedProtocolVersion, mcp.CodeMissingRequiredClientCapabilities:
		return http.StatusBadRequest
	}
	return 0
}

// ErrMethodNotFound is go-sdk's jsonrpc2.ErrMethodNotFound.
var ErrMethodNotFound = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}

// Response builds the response go-sdk's jsonrpc2 layer sends for a
// handler's outcome (processResult, NewResponse): a -32601 error's message
// becomes `method not found: "<method>"`, and the result is encoded
// without HTML escaping. ok is false for a result that cannot be encoded,
// which the SDK answers with nothing at all.
func Response(id jsonrpc.ID, method string, result any, err error) (*jsonrpc.Response, bool) {
	if err != nil && errors.Is(err, ErrMethodNotFound) {
		err = fmt.Errorf("%w: %q", ErrMethodNotFound, method)
	}
	resp := &jsonrpc.Response{ID: id, Error: err}
	if err == nil && result != nil {
		var raw json.RawMessage
		var merr error
		if e, ok := result.(Encoded); ok {
			raw, merr = e.EncodeJSON()
		} else {
			raw, merr = encodeNoEscape(result)
		}
		if merr != nil {
			return nil, false
		}
		resp.Result = raw
	}
	return resp, true
}

// Encoded is a result that gives Response the bytes encodeNoEscape would
// give for it (as a tasks/result's stored result, checked valid when
// read, gives them through CompactValid), for fewer passes over them.
type Encoded interface {
	EncodeJSON() (json.RawMessage, error)
}

// encodeNoEscape is go-sdk's jsonMarshal: encoding/json without HTML
// escaping, no trailing newline.
func encodeNoEscape(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// AnnotateServerInfo is go-sdk's annotateServerInfo, which names the
// server in the _meta of every result of a request that negotiates per
// request (there is no initialize to name it): _meta[serverInfo] = impl,
// unless set.
func AnnotateServerInfo(res mcp.Result, impl *mcp.Implementation) {
	if res == nil || impl == nil {
		return
	}
	m := res.GetMeta()
	if m == nil {
		m = map[string]any{}
	}
	if _, ok := m[mcptask.MetaServerInfo]; ok {
		return
	}
	m[mcptask.MetaServerInfo] = impl
	res.SetMeta(m)
}

// SDKCall is what the fast path learns of a POST body the SDK serves on a
// stateful session (see ReadSDKCall).
type SDKCall struct {
	// Batch: the body is a batch (its calls are not looked into).
	Batch bool
	// ID is the call's id; invalid for anything but a call.
	ID jsonrpc.ID
	// Cancels is the request a notifications/cancelled names; invalid
	// otherwise.
	Cancels jsonrpc.ID
}

// ReadSDKCall reads the id of the call a POST body holds, or the request
// a notifications/cancelled in it names (only when cancels is set: the
// caller has requests a cancel could name); the zero SDKCall for
// anything else.
func ReadSDKCall(body []byte, cancels bool) SDKCall {
	t := bytes.TrimSpace(body)
	if len(t) > 0 && t[0] == '[' {
		return SDKCall{Batch: true}
	}
	ms, ok := ObjectMembers(t)
	if !ok {
		return SDKCall{}
	}
	var idRaw, methodRaw, paramsRaw []byte
	for _, m := range ms {
		switch string(m.Key) {
		case `"id"`:
			idRaw = t[m.VStart:m.End]
		case `"method"`:
			methodRaw = t[m.VStart:m.End]
		case `"params"`:
			paramsRaw = t[m.VStart:m.End]
		}
	}
	var id jsonrpc.ID
	if idRaw != nil {
		var raw any
		if Unmarshal(idRaw, &raw) != nil {
			return SDKCall{}
		}
		var err error
		if id, err = jsonrpc.MakeID(raw); err != nil {
			return SDKCall{}
		}
	}
	if id.IsValid() {
		return SDKCall{ID: id}
	}
	if cancels && string(methodRaw) == `"`+mcptask.MethodCancelled+`"` && paramsRaw != nil {
		if cid, ok := CancelledID(paramsRaw); ok {
			return SDKCall{Cancels: cid}
		}
	}
	return SDKCall{}
}

// CancelledID reads the request id of notifications/cancelled params as
// go-sdk does.
func CancelledID(params json.RawMessage) (jsonrpc.ID, bool) {
	var p mcp.CancelledParams
	if len(params) == 0 || Unmarshal(params, &p) != nil {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil || !id.IsValid() {
		return jsonrpc.ID{}, false
	}
	return id, true
}
