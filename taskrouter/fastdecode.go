package taskrouter

// The fast path's decoding (fastpath.go): which bodies it takes, and
// decoding them exactly as go-sdk would.

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sjson "github.com/segmentio/encoding/json"
	"github.com/taskbridge/taskbridge/mcptask"
)

// ---- decoding, as the SDK decodes ----

// sdkUnmarshal decodes data into v exactly as go-sdk's internal/json does
// (segmentio/encoding, case-sensitive field names, at most 1000 levels
// deep) but in place, without the streaming decoder's buffer. data is a
// single valid JSON value.
func sdkUnmarshal(data []byte, v any) error {
	if err := checkDepth(data); err != nil {
		return err
	}
	_, err := sjson.Parse(data, v, sjson.DontMatchCaseInsensitiveStructFields)
	return err
}

var errTooDeep = errors.New("json: exceeded maximum nesting depth of 1000")

// checkDepth is go-sdk's checkMaxDepth with its limit of 1000.
func checkDepth(data []byte) error {
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > 1000 {
				return errTooDeep
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}

// remarshal is go-sdk's remarshal (used to read typed values out of
// _meta): encoding/json out, the SDK's decoding in.
func remarshal(from, to any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return sdkUnmarshal(data, to)
}

// wireMessage is go-sdk's jsonrpc2 wire message (wireDecode).
type wireMessage struct {
	VersionTag string          `json:"jsonrpc"`
	ID         any             `json:"id,omitempty"`
	Method     json.RawMessage `json:"method"`
	Params     json.RawMessage `json:"params,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *jsonrpc.Error  `json:"error,omitempty"`
}

// fastCall is a request the fast path may serve: a tasks/* request, or a
// tools/call that may create a task.
type fastCall struct {
	id     jsonrpc.ID
	method string
	// params: *TaskIDParams, *ListTasksParams, *UpdateTaskParams or
	// *mcp.CallToolParamsRaw; a typed nil without params.
	params mcp.Params
	meta   mcp.Meta // params._meta, private keys removed (a moved params.task added)
	taskID string   // params.taskId
}

var (
	tasksPrefix    = []byte(`"tasks/`)
	toolsCallBytes = []byte(`"` + mcptask.MethodToolsCall + `"`)
)

// mayBeFast is a quick filter on a body before parseFastBody: a tasks/*
// request, or a tools/call that may ask for a task (core: params.task) or
// be one the server decides on (2026-07-28: a per-request protocol
// version in the body).
func mayBeFast(body []byte) bool {
	return bytes.Contains(body, tasksPrefix) || bytes.Contains(body, toolsCallBytes) && mayAskTask(body)
}

// mayAskTask is the filter on a tools/call's bytes: a literal "task" member
// (core) or a per-request protocol version (2026-07-28) may be in it; a
// call with neither is a plain call, which the fast path never serves.
func mayAskTask(b []byte) bool {
	return bytes.Contains(b, keyTask) || bytes.Contains(b, protocolKey)
}

// parseFastBody decodes a body that holds one tasks/* request or
// tools/call, as go-sdk's DecodeMessage would; ok is false for anything
// else (a batch, a notification, a response, another method) and for
// whatever the SDK would refuse or read differently than the router's
// HTTP shim (see canonicalParams).
func parseFastBody(body []byte) (fastCall, bool) {
	t := bytes.TrimSpace(body)
	if len(t) == 0 || t[0] != '{' || !mayBeFast(t) {
		return fastCall{}, false
	}
	var w wireMessage
	if sdkUnmarshal(t, &w) != nil || w.VersionTag != "2.0" || len(w.Method) == 0 {
		return fastCall{}, false
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil || !id.IsValid() {
		return fastCall{}, false
	}
	var method string
	if sdkUnmarshal(w.Method, &method) != nil {
		return fastCall{}, false
	}
	return decodeFastCall(id, method, w.Params)
}

// decodeFastCall decodes the params of a tasks/* call or a tools/call as
// the SDK would for the router's middleware (a tools/call's params.task
// moved into _meta first, as the shims move it).
func decodeFastCall(id jsonrpc.ID, method string, raw json.RawMessage) (fastCall, bool) {
	c := fastCall{id: id, method: method}
	if method != mcptask.MethodToolsCall && !mcptask.IsTaskMethod(method) {
		return c, false
	}
	var task any
	moved := false
	if raw != nil && !canonicalParams(raw) {
		return c, false
	}
	switch method {
	case mcptask.MethodToolsCall:
		if raw == nil {
			return c, false // the SDK refuses a tools/call without params
		}
		p := new(mcp.CallToolParamsRaw)
		if sdkUnmarshal(raw, p) != nil {
			return c, false
		}
		if taskRaw := memberValue(raw, "task"); taskRaw != nil {
			if sdkUnmarshal(taskRaw, &task) != nil {
				return c, false
			}
			if p.Meta == nil {
				p.Meta = mcp.Meta{}
			}
			moved = true
		}
		c.params, c.meta = p, p.Meta
	case mcptask.MethodTasksList:
		var p *ListTasksParams
		if raw != nil {
			p = new(ListTasksParams)
			if sdkUnmarshal(raw, p) != nil {
				return c, false
			}
			c.meta = p.Meta
		}
		c.params = p
	case mcptask.MethodTasksUpdate:
		var p *UpdateTaskParams
		if raw != nil {
			p = new(UpdateTaskParams)
			if sdkUnmarshal(raw, p) != nil {
				return c, false
			}
			c.meta, c.taskID = p.Meta, p.TaskID
		}
		c.params = p
	default:
		var p *TaskIDParams
		if raw != nil {
			p = new(TaskIDParams)
			if sdkUnmarshal(raw, p) != nil {
				return c, false
			}
			c.meta, c.taskID = p.Meta, p.TaskID
		}
		c.params = p
	}
	// The HTTP shim routes a request by a per-request protocol version it
	// finds literally in the params; one spelled with escapes is read
	// differently there.
	if _, has := c.meta[mcptask.MetaProtocolVersion]; has && !bytes.Contains(raw, protocolKey) {
		return c, false
	}
	// The HTTP shim and the transport wrapper drop private _meta keys a
	// client sent before the SDK sees the request.
	dropPrivateMeta(c.meta)
	if moved {
		c.meta[metaTaskRequest] = task
	}
	return c, true
}

// memberValue returns the raw value of the top-level member key of the
// object params (canonical, see canonicalParams), or nil.
func memberValue(params []byte, key string) []byte {
	ms, _ := objectMembers(params)
	for _, m := range ms {
		if string(m.key[1:len(m.key)-1]) == key {
			return params[m.vstart:m.end]
		}
	}
	return nil
}

// canonicalParams reports whether params is an object whose top-level keys
// every reader in the path reads alike: the SDK decodes case-sensitively,
// while the HTTP shim's checks (the routing by _meta protocol version, the
// Mcp-Name check) use encoding/json, which matches keys case-insensitively
// and resolves escapes. A key spelled with an escape, a key that differs
// from a known one only in case, or a repeated known key takes the SDK
// path, where the existing code answers it as it always did.
func canonicalParams(params []byte) bool {
	ms, ok := objectMembers(params)
	if !ok {
		return false
	}
	known := [...]string{"_meta", "taskId", "cursor", "inputResponses", "task", "name", "arguments", "requestState"}
	var seen [len(known)]bool
	for _, m := range ms {
		k := m.key[1 : len(m.key)-1] // without quotes; objectMembers refuses escaped keys
		for i, known := range known {
			if !strings.EqualFold(string(k), known) {
				continue
			}
			if string(k) != known || seen[i] {
				return false
			}
			seen[i] = true
		}
	}
	return true
}

// sdkCapabilities is go-sdk's clientCapabilitiesV2, the shape it decodes
// per-request client capabilities into.
type sdkCapabilities struct {
	mcp.ClientCapabilities
	Roots *mcp.RootCapabilities `json:"roots,omitempty"`
}

// metaView is what go-sdk's validateRequestMeta finds in a request's
// _meta.
type metaView struct {
	version     string // the per-request protocol version, if it is a string
	hasVersion  bool
	newProtocol bool
	// caps are the client capabilities in _meta, decoded as the SDK's
	// ServerRequest.ClientCapabilities decodes them; nil if absent or
	// undecodable.
	caps *mcp.ClientCapabilities
	// info is the client's implementation in _meta (2026-07-28).
	info *mcp.Implementation
}

// viewMeta reads meta as go-sdk does; ok is false where the SDK answers
// with an error instead of dispatching (an invalid clientInfo, missing or
// invalid clientCapabilities on a 2026-07-28 request).
func viewMeta(meta mcp.Meta) (metaView, bool) {
	var v metaView
	if meta == nil {
		return v, true
	}
	v.version, v.hasVersion = meta[mcptask.MetaProtocolVersion].(string)
	if raw, present := meta[mcptask.MetaClientCapabilities]; present && raw != nil {
		var c *sdkCapabilities
		if remarshal(raw, &c) == nil && c != nil {
			caps := c.ClientCapabilities
			caps.RootsV2 = c.Roots
			if caps.RootsV2 != nil {
				caps.Roots = *caps.RootsV2
			}
			v.caps = &caps
		}
	}
	if !v.hasVersion || v.version < mcptask.ExtensionVersion {
		return v, true
	}
	v.newProtocol = true
	if raw, present := meta[mcptask.MetaClientInfo]; present {
		if raw == nil || remarshal(raw, &v.info) != nil {
			return v, false
		}
	}
	return v, v.caps != nil
}

// initializeParams are the initialize parameters go-sdk gives the
// throwaway session of a 2026-07-28 request, from its _meta.
func (v metaView) initializeParams() *mcp.InitializeParams {
	return &mcp.InitializeParams{ProtocolVersion: v.version, Capabilities: v.caps, ClientInfo: v.info}
}
