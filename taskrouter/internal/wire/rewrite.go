package wire

// The shims' rewriting. go-sdk v1.8 decodes tools/call params into a
// struct without a "task" field, dropping a core-dialect params.task
// before any middleware can see it, so each shim moves that object into
// params._meta[MetaTaskRequest] on the way in; the router's middleware
// takes it out again (with every other key under
// mcptask.PrivateMetaPrefix) before any handler runs. The transport shim
// also tags requests with its connection id (MetaConnID). Keys under the
// private prefix that a client sends itself are dropped, so a client
// cannot forge them.

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/taskbridge/taskbridge/mcptask"
)

var (
	keyTask        = []byte(`"task"`)
	keyTaskRequest = QuotedKey(MetaTaskRequest)
	keyConnID      = QuotedKey(MetaConnID)
	quotedPrivate  = QuotedKey(mcptask.PrivateMetaPrefix)[:len(mcptask.PrivateMetaPrefix)+1] // with the opening quote
)

// RewriteParams drops private _meta keys the client sent, moves
// params.task into _meta when moveTask is set (tools/call), and, when
// connID is set, tags the params with it. It returns the input unchanged
// when there is nothing to do or the params are not a JSON object.
func RewriteParams(params json.RawMessage, connID string, moveTask bool) json.RawMessage {
	if !mayNeedRewrite(params) && connID == "" {
		return params
	}
	if !json.Valid(params) {
		return params // the SDK answers it
	}
	if out, ok := spliceParams(params, connID, moveTask); ok {
		return out
	}
	return decodeRewrite(params, connID, moveTask)
}

// spliceParams is RewriteParams on the bytes: it copies the members it
// keeps and writes the new _meta, without decoding anything. ok is false
// when it cannot tell exactly (an escaped key, a duplicate "task" or
// "_meta"); decodeRewrite decides then.
func spliceParams(params json.RawMessage, connID string, moveTask bool) (json.RawMessage, bool) {
	ms, ok := ObjectMembers(params)
	if !ok {
		if bytes.TrimSpace(params)[0] == '{' {
			return nil, false // an escaped key
		}
		return params, true // not an object: the SDK's to reject
	}
	task, meta := -1, -1
	for i, m := range ms {
		switch {
		case moveTask && bytes.Equal(m.Key, keyTask):
			if task >= 0 {
				return nil, false
			}
			task = i
		case bytes.Equal(m.Key, metaKey):
			if meta >= 0 {
				return nil, false
			}
			meta = i
		}
	}
	var metaRaw []byte
	var metaMembers []Member
	forged := false
	if meta >= 0 {
		metaRaw = params[ms[meta].VStart:ms[meta].End]
		var keep, ok bool
		metaMembers, forged, keep, ok = metaOf(metaRaw)
		if !ok {
			return nil, false
		}
		if keep {
			return params, true
		}
	}
	if task < 0 && connID == "" && !forged {
		return params, true
	}
	var taskRaw []byte
	if task >= 0 {
		taskRaw = params[ms[task].VStart:ms[task].End]
	}
	return appendSpliced(params, ms, task, meta, metaRaw, metaMembers, taskRaw, connID), true
}

// metaOf reads the raw _meta of params: its members and whether one is
// private (forged by the client). keep says the params must pass
// unchanged (a _meta that is not an object is the SDK's to reject); ok is
// false when only decoding can tell (an escaped key).
func metaOf(metaRaw []byte) (members []Member, forged, keep, ok bool) {
	if string(metaRaw) == "null" {
		return nil, false, false, true
	}
	members, isObj := ObjectMembers(metaRaw)
	if !isObj {
		if metaRaw[0] == '{' {
			return nil, false, false, false // an escaped key
		}
		return nil, false, true, true
	}
	for _, m := range members {
		if bytes.HasPrefix(m.Key, quotedPrivate) {
			forged = true
		}
	}
	return members, forged, false, true
}

// appendSpliced writes params without its task (at index task) and _meta
// (at index meta) members, then the new _meta: the old one's public
// members, the moved task, the connection id.
func appendSpliced(params []byte, ms []Member, task, meta int, metaRaw []byte, metaMembers []Member, taskRaw []byte, connID string) []byte {
	out := make([]byte, 0, len(params)+len(keyTaskRequest)+len(keyConnID)+len(connID)+16)
	out = append(out, '{')
	for i, m := range ms {
		if i == task || i == meta {
			continue
		}
		out = append(out, params[m.Start:m.End]...)
		out = append(out, ',')
	}
	out = append(out, metaKey...)
	out = append(out, ":{"...)
	n := 0
	for _, m := range metaMembers {
		if bytes.HasPrefix(m.Key, quotedPrivate) {
			continue
		}
		out = append(out, metaRaw[m.Start:m.End]...)
		out = append(out, ',')
		n++
	}
	if taskRaw != nil {
		out = append(out, keyTaskRequest...)
		out = append(out, ':')
		out = append(out, taskRaw...)
		out = append(out, ',')
		n++
	}
	if connID != "" {
		out = append(out, keyConnID...)
		out = append(out, ':')
		out = append(out, QuotedKey(connID)...)
		out = append(out, ',')
		n++
	}
	if n > 0 {
		out = out[:len(out)-1]
	}
	return append(out, "}}"...)
}

// decodeRewrite is RewriteParams through a decoded map: for params whose
// keys hold escapes or repeat.
func decodeRewrite(params json.RawMessage, connID string, moveTask bool) json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil || m == nil {
		return params
	}
	task, hasTask := m["task"]
	hasTask = hasTask && moveTask
	meta := map[string]json.RawMessage{}
	if old, ok := m["_meta"]; ok {
		if err := json.Unmarshal(old, &meta); err != nil {
			return params // a malformed _meta is the SDK's to reject
		}
		if meta == nil { // "_meta": null
			meta = map[string]json.RawMessage{}
		}
	}
	forged := false
	for k := range meta {
		if strings.HasPrefix(k, mcptask.PrivateMetaPrefix) {
			delete(meta, k)
			forged = true
		}
	}
	if !hasTask && connID == "" && !forged {
		return params
	}
	if hasTask {
		delete(m, "task")
		meta[MetaTaskRequest] = task
	}
	if connID != "" {
		meta[MetaConnID], _ = json.Marshal(connID)
	}
	m["_meta"], _ = json.Marshal(meta)
	out, err := json.Marshal(m)
	if err != nil {
		return params
	}
	return out
}

// mayNeedRewrite is a fast filter: params can only carry a "task" key or a
// private _meta key if the bytes contain them literally or contain a \u
// escape (which could spell them).
func mayNeedRewrite(params []byte) bool {
	return bytes.Contains(params, keyTask) || bytes.Contains(params, []byte(mcptask.PrivateMetaPrefix)) || bytes.IndexByte(params, '\\') >= 0
}

// RewrittenBody is a POST body after RewriteBody.
type RewrittenBody struct {
	// Body is the body to hand to the SDK.
	Body []byte
	// Dialect is the body's dialect: the headers' (see RewriteBody), or
	// mcptask.Extension when a message carries a per-request protocol
	// version of 2026-07-28 or later.
	Dialect mcptask.Dialect
	// For a body holding a single tasks/* request: its method, id and
	// params.taskId.
	TaskMethod string
	TaskID     string
	ID         jsonrpc.ID
	// TaskIDTwice reports params naming the task under more than one key
	// equal to "taskId" but for case (or the same key repeated): readers
	// that match keys case-insensitively and those that do not read
	// different tasks, so no Mcp-Name header can be checked against it.
	TaskIDTwice bool
}

// RewriteBody applies RewriteParams to the messages of a body (one message
// or a batch), tells the body's dialect, and names the task of a lone
// tasks/* request. body is valid JSON. header is the dialect the
// Mcp-Protocol-Version header names (mcptask.Core without one), and named
// says an Mcp-Name header is present; a body that needs none of this is
// passed through without being decoded (the common case).
func RewriteBody(body []byte, header mcptask.Dialect, named bool) RewrittenBody {
	trimmed := bytes.TrimSpace(body)
	out := RewrittenBody{Body: body, Dialect: header}
	if len(trimmed) == 0 {
		return out
	}
	if !mayNeedRewrite(trimmed) && (header.NegotiatesPerRequest() || !bytes.Contains(trimmed, protocolKey)) && !named {
		return out
	}
	if trimmed[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(trimmed, &batch); err != nil {
			return out
		}
		changed := false
		for i, m := range batch {
			rm := rewriteMessage(m)
			batch[i] = rm.raw
			changed = changed || rm.changed
			if rm.dialect.NegotiatesPerRequest() {
				out.Dialect = rm.dialect
			}
		}
		if changed {
			if b, err := json.Marshal(batch); err == nil {
				out.Body = b
			}
		}
		return out
	}
	rm := rewriteMessage(trimmed)
	out.Body = rm.raw
	if rm.dialect.NegotiatesPerRequest() {
		out.Dialect = rm.dialect
	}
	out.TaskMethod, out.TaskID, out.ID, out.TaskIDTwice = rm.taskMethod, rm.taskID, rm.id, rm.taskIDTwice
	return out
}

type rewrittenMessage struct {
	raw     json.RawMessage
	changed bool
	// dialect is the one of the message's per-request protocol version;
	// zero without one.
	dialect     mcptask.Dialect
	taskMethod  string
	taskID      string
	taskIDTwice bool
	id          jsonrpc.ID
}

// rewriteMessage decodes one message once: it reads the message's
// per-request protocol version, names the task of a tasks/* request, and
// moves a tools/call's params.task into _meta and drops forged private
// _meta keys (re-encoding only when it changed something).
func rewriteMessage(raw json.RawMessage) rewrittenMessage {
	out := rewrittenMessage{raw: raw}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return out
	}
	params := m["params"]
	if bytes.Contains(params, protocolKey) {
		var p struct {
			Meta map[string]any `json:"_meta"`
		}
		if json.Unmarshal(params, &p) == nil {
			if v, _ := p.Meta[mcptask.MetaProtocolVersion].(string); v != "" {
				out.dialect = mcptask.DialectFor(v)
			}
		}
	}
	var method string
	_ = json.Unmarshal(m["method"], &method)
	if mcptask.IsTaskMethod(method) {
		var p struct {
			TaskID string `json:"taskId"`
		}
		_ = json.Unmarshal(params, &p)
		out.taskMethod, out.taskID = method, p.TaskID
		out.taskIDTwice = KeyCount(params, "taskId") > 1
		if idRaw, ok := m["id"]; ok {
			var id any
			if json.Unmarshal(idRaw, &id) == nil {
				out.id, _ = jsonrpc.MakeID(id)
			}
		}
	}
	if !mayNeedRewrite(params) {
		return out
	}
	np := RewriteParams(params, "", method == mcptask.MethodToolsCall)
	if bytes.Equal(np, params) {
		return out
	}
	m["params"] = np
	b, err := json.Marshal(m)
	if err != nil {
		return out
	}
	out.raw, out.changed = b, true
	return out
}
