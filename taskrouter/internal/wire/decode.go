package wire

// Decoding as go-sdk decodes: which bodies and messages the fast path
// takes, and reading them exactly as the SDK would.

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

// Unmarshal decodes data into v exactly as go-sdk's internal/json does
// (segmentio/encoding, case-sensitive field names, at most 1000 levels
// deep) but in place, without the streaming decoder's buffer. data is a
// single valid JSON value.
func Unmarshal(data []byte, v any) error {
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
	return Unmarshal(data, to)
}

// message is go-sdk's jsonrpc2 wire message (wireDecode).
type message struct {
	VersionTag string          `json:"jsonrpc"`
	ID         any             `json:"id,omitempty"`
	Method     json.RawMessage `json:"method"`
	Params     json.RawMessage `json:"params,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *jsonrpc.Error  `json:"error,omitempty"`
}

// DecodeCall reads raw (one valid JSON object) as go-sdk reads a message,
// and returns it when it is a call: a request with a valid id. ok is
// false for anything else (a notification, a response, something the SDK
// refuses), which the SDK answers (or refuses) itself.
func DecodeCall(raw []byte) (req *jsonrpc.Request, ok bool) {
	var w message
	if Unmarshal(raw, &w) != nil || w.VersionTag != "2.0" || len(w.Method) == 0 {
		return nil, false
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil || !id.IsValid() {
		return nil, false
	}
	var method string
	if Unmarshal(w.Method, &method) != nil {
		return nil, false
	}
	return &jsonrpc.Request{ID: id, Method: method, Params: w.Params}, true
}

// A Call is a request the fast path may serve: a tasks/* request, or a
// tools/call that may create a task, decoded as the SDK decodes it for
// the router's middleware.
type Call struct {
	// ID and Method are the request's.
	ID     jsonrpc.ID
	Method string
	// Params are *TaskIDParams, *ListTasksParams, *UpdateTaskParams or
	// *mcp.CallToolParamsRaw; a typed nil without params.
	Params mcp.Params
	// Meta is params._meta, private keys removed (a moved params.task
	// added under MetaTaskRequest).
	Meta mcp.Meta
	// TaskID is params.taskId.
	TaskID string
}

var (
	tasksPrefix    = []byte(`"tasks/`)
	toolsCallBytes = []byte(`"` + mcptask.MethodToolsCall + `"`)
	// protocolKey is how a per-request protocol version appears in a body.
	protocolKey = []byte(`"` + mcptask.MetaProtocolVersion + `"`)
)

// MayBeFast is a quick filter on a body before ParseBody: a tasks/*
// request, or a tools/call.
func MayBeFast(body []byte) bool {
	return bytes.Contains(body, tasksPrefix) || bytes.Contains(body, toolsCallBytes)
}

// HasProtocolKey reports whether b holds the per-request protocol version
// key literally.
func HasProtocolKey(b []byte) bool { return bytes.Contains(b, protocolKey) }

// ParseBody decodes a body that holds one tasks/* request or tools/call,
// as go-sdk's DecodeMessage would; ok is false for anything else (a
// batch, a notification, a response, another method) and for whatever
// the SDK would refuse or read differently than the router's HTTP shim
// (see canonicalParams).
func ParseBody(body []byte) (Call, bool) {
	t := bytes.TrimSpace(body)
	if len(t) == 0 || t[0] != '{' || !MayBeFast(t) {
		return Call{}, false
	}
	req, ok := DecodeCall(t)
	if !ok {
		return Call{}, false
	}
	return DecodeParams(req.ID, req.Method, req.Params)
}

// DecodeParams decodes the params of a tasks/* call or a tools/call as
// the SDK would for the router's middleware (a tools/call's params.task
// moved into _meta first, as the shims move it).
func DecodeParams(id jsonrpc.ID, method string, raw json.RawMessage) (Call, bool) {
	c := Call{ID: id, Method: method}
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
		if Unmarshal(raw, p) != nil {
			return c, false
		}
		if taskRaw := memberValue(raw, "task"); taskRaw != nil {
			if Unmarshal(taskRaw, &task) != nil {
				return c, false
			}
			if p.Meta == nil {
				p.Meta = mcp.Meta{}
			}
			moved = true
		}
		c.Params, c.Meta = p, p.Meta
	case mcptask.MethodTasksList:
		var p *ListTasksParams
		if raw != nil {
			p = new(ListTasksParams)
			if Unmarshal(raw, p) != nil {
				return c, false
			}
			c.Meta = p.Meta
		}
		c.Params = p
	case mcptask.MethodTasksUpdate:
		var p *UpdateTaskParams
		if raw != nil {
			p = new(UpdateTaskParams)
			if Unmarshal(raw, p) != nil {
				return c, false
			}
			c.Meta, c.TaskID = p.Meta, p.TaskID
		}
		c.Params = p
	default:
		var p *TaskIDParams
		if raw != nil {
			p = new(TaskIDParams)
			if Unmarshal(raw, p) != nil {
				return c, false
			}
			c.Meta, c.TaskID = p.Meta, p.TaskID
		}
		c.Params = p
	}
	// The HTTP shim routes a request by a per-request protocol version it
	// finds literally in the params; one spelled with escapes is read
	// differently there.
	if _, has := c.Meta[mcptask.MetaProtocolVersion]; has && !bytes.Contains(raw, protocolKey) {
		return c, false
	}
	// The HTTP shim and the transport wrapper drop private _meta keys a
	// client sent before the SDK sees the request.
	DropPrivateMeta(c.Meta)
	if moved {
		c.Meta[MetaTaskRequest] = task
	}
	return c, true
}

// memberValue returns the raw value of the top-level member key of the
// object params (canonical, see canonicalParams), or nil.
func memberValue(params []byte, key string) []byte {
	ms, _ := ObjectMembers(params)
	for _, m := range ms {
		if string(m.Key[1:len(m.Key)-1]) == key {
			return params[m.VStart:m.End]
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
	ms, ok := ObjectMembers(params)
	if !ok {
		return false
	}
	known := [...]string{"_meta", "taskId", "cursor", "inputResponses", "task", "name", "arguments", "requestState"}
	var seen [len(known)]bool
	for _, m := range ms {
		k := m.Key[1 : len(m.Key)-1] // without quotes; ObjectMembers refuses escaped keys
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

// MetaView is what go-sdk's validateRequestMeta finds in a request's
// _meta.
type MetaView struct {
	// Version is the per-request protocol version, if it is a string;
	// HasVersion says whether it is.
	Version    string
	HasVersion bool
	// Dialect is the dialect of the per-request protocol version; zero
	// without one (the session's negotiation decides then).
	Dialect mcptask.Dialect
	// Caps are the client capabilities in _meta, decoded as the SDK's
	// ServerRequest.ClientCapabilities decodes them; nil if absent or
	// undecodable.
	Caps *mcp.ClientCapabilities
	// Info is the client's implementation in _meta (2026-07-28).
	Info *mcp.Implementation
}

// ViewMeta reads meta as go-sdk does; ok is false where the SDK answers
// with an error instead of dispatching (an invalid clientInfo, missing or
// invalid clientCapabilities on a 2026-07-28 request).
func ViewMeta(meta mcp.Meta) (MetaView, bool) {
	var v MetaView
	if meta == nil {
		return v, true
	}
	v.Version, v.HasVersion = meta[mcptask.MetaProtocolVersion].(string)
	if raw, present := meta[mcptask.MetaClientCapabilities]; present && raw != nil {
		var c *sdkCapabilities
		if remarshal(raw, &c) == nil && c != nil {
			caps := c.ClientCapabilities
			caps.RootsV2 = c.Roots
			if caps.RootsV2 != nil {
				caps.Roots = *caps.RootsV2
			}
			v.Caps = &caps
		}
	}
	if !v.HasVersion {
		return v, true
	}
	v.Dialect = mcptask.DialectFor(v.Version)
	if !v.Dialect.NegotiatesPerRequest() {
		return v, true
	}
	if raw, present := meta[mcptask.MetaClientInfo]; present {
		if raw == nil || remarshal(raw, &v.Info) != nil {
			return v, false
		}
	}
	return v, v.Caps != nil
}

// PerRequest reports whether the request negotiates in its own _meta
// (a 2026-07-28 per-request protocol version).
func (v MetaView) PerRequest() bool { return v.Dialect.NegotiatesPerRequest() }

// InitializeParams are the initialize parameters go-sdk gives the
// throwaway session of a 2026-07-28 request, from its _meta.
func (v MetaView) InitializeParams() *mcp.InitializeParams {
	return &mcp.InitializeParams{ProtocolVersion: v.Version, Capabilities: v.Caps, ClientInfo: v.Info}
}
