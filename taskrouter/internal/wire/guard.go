package wire

// What the shims refuse themselves, where go-sdk's answer is no answer a
// client can use: request ids a JSON number cannot carry exactly (go-sdk
// reads every number id as a float64, then an int64: 2.5 comes back as 2,
// 2^53+1 as 2^53, 1e300 as -2^63), lines of a stdio stream that are no
// JSON-RPC message (go-sdk's stream ends, and with it the server), core
// calls over HTTP that name no session (go-sdk answers code 0). The
// refusals are JSON-RPC errors with the request's id echoed byte for byte
// (null when there is none to read).

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/taskbridge/taskbridge/mcptask"
)

// MaxSafeID is the largest integer id every JSON-RPC peer reads exactly
// (JavaScript's Number.MAX_SAFE_INTEGER; go-sdk reads ids as float64).
const MaxSafeID = 1<<53 - 1

// Field returns the raw value of the top-level member key (exactly, its
// escapes resolved; the last one when repeated, as decoders read it) of
// the JSON object b.
func Field(b []byte, key string) (value json.RawMessage, found bool) {
	v := Fields(b, key)[0]
	return v, v != nil
}

// Fields returns the raw values of the top-level members keys of the JSON
// object b, each read as Field reads one, in the order of keys (nil for a
// key b lacks), in one pass over b.
func Fields(b []byte, keys ...string) []json.RawMessage {
	vals := make([]json.RawMessage, len(keys))
	// The byte scanner, when no key holds an escape (the common case; a
	// body read at every request): no decoder.
	if json.Valid(b) && scanMembers(b, func(m Member) bool {
		k := m.Key[1 : len(m.Key)-1]
		for i, key := range keys {
			if string(k) == key {
				vals[i] = b[m.VStart:m.End]
			}
		}
		return true
	}) {
		for i, v := range vals {
			vals[i] = bytes.Clone(v)
		}
		return vals
	}
	clear(vals)
	eachMember(b, func(k string, v json.RawMessage) {
		for i, key := range keys {
			if k == key {
				vals[i] = v
			}
		}
	})
	return vals
}

// BadID reports an id (the raw JSON of a message's "id") that no peer
// echoes exactly: a number with a fraction or an exponent, or an integer
// beyond ±MaxSafeID. Strings, null and safe integers are fine (other
// kinds are for the JSON-RPC decoder to refuse).
func BadID(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return err != nil || n > MaxSafeID || n < -MaxSafeID
}

// BadIDError is the refusal of an id BadID reports.
func BadIDError(raw json.RawMessage) *jsonrpc.Error {
	return mcptask.InvalidRequest("invalid request: the id %s cannot be echoed exactly: use a string, or an integer within ±%d", bytes.TrimSpace(raw), MaxSafeID)
}

// UnsafeIDs returns the first id of body (one message, or each message of
// a batch) that BadID reports. A single message is read with the byte
// scanner (no decoding): its cost is one pass over the top-level keys.
func UnsafeIDs(body []byte) (json.RawMessage, bool) {
	t := bytes.TrimSpace(body)
	var bad json.RawMessage
	if scanMembers(t, func(m Member) bool {
		if string(m.Key) == `"id"` && BadID(t[m.VStart:m.End]) {
			bad = t[m.VStart:m.End]
		}
		return bad == nil
	}) {
		return bad, bad != nil
	}
	if len(t) > 0 && t[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(t, &batch) != nil {
			return nil, false
		}
		for _, m := range batch {
			if id, ok := Field(m, "id"); ok && BadID(id) {
				return id, true
			}
		}
		return nil, false
	}
	if id, ok := Field(t, "id"); ok && BadID(id) {
		return id, true
	}
	return nil, false
}

// ErrorLine is a JSON-RPC error response to a message whose raw id is id
// (echoed byte for byte; null when empty), as one line.
func ErrorLine(id json.RawMessage, e *jsonrpc.Error) []byte {
	if len(bytes.TrimSpace(id)) == 0 {
		id = json.RawMessage("null")
	}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *jsonrpc.Error  `json:"error"`
	}{"2.0", id, e})
	if err != nil { // an id that is not JSON: answer without it
		b, _ = json.Marshal(struct {
			JSONRPC string         `json:"jsonrpc"`
			ID      any            `json:"id"`
			Error   *jsonrpc.Error `json:"error"`
		}{"2.0", nil, e})
	}
	return b
}

// WriteErrorLine answers an HTTP request with status and the JSON-RPC
// error e, echoing id byte for byte (see ErrorLine).
func WriteErrorLine(w http.ResponseWriter, status int, id json.RawMessage, e *jsonrpc.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(ErrorLine(id, e))
}

// CheckLine is what a stdio stream's line (its line end stripped) needs
// before go-sdk reads it: nil when go-sdk reads it as a message, or the
// error to answer instead (the line is then dropped) with the id to
// echo. go-sdk v1.8 ends the stream on anything else: a line that is not
// one JSON value, a value that is no JSON-RPC message, and a batch (the
// stdio transport of 2025-06-18 and later has none, and go-sdk drops the
// connection on one of earlier versions too).
func CheckLine(line []byte) (json.RawMessage, *jsonrpc.Error) {
	t := bytes.TrimSpace(line)
	switch {
	case !json.Valid(t):
		return nil, mcptask.Errorf(mcptask.CodeParseError, "parse error: a line of the stream is not one JSON value; it was dropped")
	case t[0] == '[':
		return nil, mcptask.InvalidRequest("invalid request: batches are not supported on this transport; send one message per line")
	}
	if id, ok := plainRequest(t); ok {
		if BadID(id) {
			return id, BadIDError(id)
		}
		return nil, nil
	}
	id, _ := Field(t, "id")
	if BadID(id) {
		return id, BadIDError(id)
	}
	if _, err := jsonrpc.DecodeMessage(t); err != nil {
		return id, mcptask.InvalidRequest("invalid request: %s", oneLine(err.Error()))
	}
	return nil, nil
}

// plainRequest reads, without decoding, a valid JSON object that is
// plainly a request or notification go-sdk decodes: only the members
// jsonrpc ("2.0"), method (a string), id (a string, a number or null) and
// params, each once, spelled exactly. It returns the raw id; ok is false
// for anything else (which the caller then decodes as go-sdk does).
func plainRequest(t []byte) (id json.RawMessage, ok bool) {
	var version, method, plain bool
	plain = true
	scanned := scanMembers(t, func(m Member) bool {
		v := t[m.VStart:m.End]
		switch string(m.Key) {
		case `"jsonrpc"`:
			plain = !version && string(v) == `"2.0"`
			version = true
		case `"method"`:
			plain = !method && v[0] == '"'
			method = true
		case `"id"`:
			plain = id == nil && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9') || string(v) == "null")
			id = v
		case `"params"`:
		default:
			plain = false
		}
		return plain
	})
	return id, scanned && plain && version && method
}

// NoSessionError is the refusal of a core-dialect call over HTTP that
// names no session (no Mcp-Session-Id) and is no initialize: go-sdk would
// make a session of it and answer code 0.
func NoSessionError(method string) *jsonrpc.Error {
	return mcptask.InvalidRequest("invalid request: %s needs a session: send initialize first, then the Mcp-Session-Id header it answers with", method)
}

// CallOf reads the id and method of a single message body (not a batch);
// ok is false for anything else (a notification: no id).
func CallOf(body []byte) (id json.RawMessage, method string, ok bool) {
	t := bytes.TrimSpace(body)
	if len(t) == 0 || t[0] != '{' {
		return nil, "", false
	}
	f := Fields(t, "id", "method")
	if json.Unmarshal(f[1], &method) != nil {
		return nil, "", false
	}
	return f[0], method, f[0] != nil
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
