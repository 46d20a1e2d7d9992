package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/internal/rpcconn"
)

// Protocol versions and the extension's identifier (see package mcptask).
const (
	// ExtensionID is the identifier of the 2026-07-28 tasks extension.
	ExtensionID = mcptask.ExtensionID
	// CoreVersion is the protocol version of the core tasks dialect.
	CoreVersion = mcptask.CoreVersion
	// ExtensionVersion is the protocol version of the tasks extension.
	ExtensionVersion = mcptask.ExtensionVersion

	defaultDiscoverWait = 10 * time.Second
)

// Dialect is the MCP tasks wire dialect a Client speaks (mcptask.Dialect).
type Dialect = mcptask.Dialect

// The dialects a Client can be asked to speak.
const (
	// Auto (the zero value) asks the server with server/discover
	// (protocol 2026-07-28) and uses Extension when the server advertises
	// the tasks extension; otherwise it initializes at 2025-11-25 and uses
	// Core.
	Auto Dialect = 0
	// Core is the 2025-11-25 core tasks dialect (SEP-1686): initialize,
	// then task-augmented requests with params.task, tasks/get,
	// tasks/result, tasks/list and tasks/cancel.
	Core = mcptask.Core
	// Extension is the 2026-07-28 tasks extension (SEP-2663): no
	// initialize, per-request _meta declaring the extension, tasks created
	// at the server's discretion, tasks/get, tasks/update and tasks/cancel.
	Extension = mcptask.Extension
)

// InputHandler answers a request for client input (an elicitation,
// sampling or roots request) that a task makes. taskID is the task the
// request belongs to, or "" when it has none (for example a
// tools/call that asks before it becomes a task). It returns the JSON
// result of the request (for an elicitation, an mcp.ElicitResult).
type InputHandler func(ctx context.Context, taskID string, req InputRequest) (json.RawMessage, error)

// Options configure Dial. The zero value is usable.
type Options struct {
	// ClientInfo names the client to the server; nil means
	// {"taskbridge-client", "0.1.0"}.
	ClientInfo *mcp.Implementation
	// Dialect chooses the wire dialect; the zero value is Auto.
	Dialect Dialect
	// Capabilities are the client capabilities to declare (the tasks
	// extension and the core receiver capabilities are added as needed).
	// Nil declares form elicitation and sampling when InputHandler or a
	// Receiver handler can answer them, and nothing otherwise.
	Capabilities *mcp.ClientCapabilities
	// InputHandler answers the input requests tasks make.
	InputHandler InputHandler
	// PollInterval is how often tasks/get is polled when the server
	// suggests no interval; zero means one second.
	PollInterval time.Duration
	// MinPollInterval and MaxPollInterval bound every polling interval,
	// whatever the server suggests and however far the backoff has grown;
	// zero means 10ms and 30s.
	MinPollInterval, MaxPollInterval time.Duration
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// ForgetAfterResult drops a task from Tracked once its result (or
	// final error) has been retrieved.
	ForgetAfterResult bool
	// Receiver, when set, makes the client a receiver of task-augmented
	// sampling and elicitation requests from the server (core dialect
	// only; see Receiver).
	Receiver *Receiver
}

// Support describes the server's task support, as advertised.
type Support struct {
	// Core is true when the server declares the core "tasks" capability.
	Core bool
	// List and Cancel report tasks.list and tasks.cancel (core).
	List, Cancel bool
	// ToolsCall reports tasks.requests.tools.call: the server accepts
	// task-augmented tools/call (core).
	ToolsCall bool
	// Extension is true when the server advertises the
	// io.modelcontextprotocol/tasks extension (2026-07-28).
	Extension bool
}

// TaskSupport is a tool's execution.taskSupport.
type TaskSupport string

// The task support levels. A tool that does not say is TaskForbidden.
const (
	TaskForbidden TaskSupport = "forbidden"
	TaskOptional  TaskSupport = "optional"
	TaskRequired  TaskSupport = "required"
)

// Tool is a tool from tools/list with its task support.
type Tool struct {
	*mcp.Tool
	// TaskSupport is the tool's execution.taskSupport; TaskForbidden when
	// absent.
	TaskSupport TaskSupport
	// declared reports whether the server stated the support level.
	declared bool
}

// Client is a connection to an MCP server that can run tool calls as
// tasks, in whichever dialect the server speaks. Its methods are safe for
// concurrent use.
type Client struct {
	conn *rpcconn.Conn
	opts Options
	log  *slog.Logger
	caps *mcp.ClientCapabilities

	dialect         Dialect
	protocolVersion string
	support         Support
	serverCaps      *mcp.ServerCapabilities
	serverInfo      *mcp.Implementation
	instructions    string
	transport       mcp.Transport

	mu       sync.Mutex
	tools    map[string]Tool
	tracked  map[string]*TrackedTask
	order    []string
	watchers map[string][]*watcher
	recv     *receiverState
	closed   bool
	// traces remembers the traceparent of the latest prompt result of each
	// workflow task, for Follow to forward (bounded by maxTraces).
	traces map[string]string
}

// Dial connects to the server over t, negotiates the dialect (see
// Options.Dialect) and returns a ready client. ctx bounds the handshake
// only. Close the client when done.
func Dial(ctx context.Context, t mcp.Transport, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ClientInfo == nil {
		o.ClientInfo = &mcp.Implementation{Name: "taskbridge-client", Version: "0.1.0"}
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.MinPollInterval <= 0 {
		o.MinPollInterval = 10 * time.Millisecond
	}
	if o.MaxPollInterval <= 0 {
		o.MaxPollInterval = 30 * time.Second
	}
	if o.MaxPollInterval < o.MinPollInterval {
		o.MaxPollInterval = o.MinPollInterval
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		opts:      o,
		log:       log,
		transport: t,
		tools:     map[string]Tool{},
		tracked:   map[string]*TrackedTask{},
		watchers:  map[string][]*watcher{},
	}
	c.caps = c.defaultCapabilities()
	conn, err := rpcconn.Dial(ctx, t, &rpcconn.Options{Handler: c.handle, OnNotification: c.onNotification, SendCancelled: true})
	if err != nil {
		return nil, fmt.Errorf("client: connecting: %w", err)
	}
	c.conn = conn
	if err := c.handshake(ctx); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if o.Receiver != nil && c.dialect == Core {
		c.recv = newReceiverState(c, o.Receiver)
	}
	return c, nil
}

func (c *Client) defaultCapabilities() *mcp.ClientCapabilities {
	if c.opts.Capabilities != nil {
		caps := *c.opts.Capabilities
		return &caps
	}
	caps := &mcp.ClientCapabilities{}
	r := c.opts.Receiver
	if c.opts.InputHandler != nil || (r != nil && r.Elicitation != nil) {
		caps.Elicitation = &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}
	}
	if c.opts.InputHandler != nil || (r != nil && r.Sampling != nil) {
		caps.Sampling = &mcp.SamplingCapabilities{}
	}
	return caps
}

// capabilitiesMap encodes the client capabilities as a JSON object,
// dropping the always-present empty "roots" of mcp.ClientCapabilities when
// roots were not asked for.
func (c *Client) capabilitiesMap() map[string]any {
	m := map[string]any{}
	b, err := json.Marshal(c.caps)
	if err == nil {
		_ = json.Unmarshal(b, &m)
	}
	if c.caps.RootsV2 == nil && !c.caps.Roots.ListChanged {
		delete(m, "roots")
	} else if c.caps.RootsV2 != nil {
		m["roots"] = c.caps.RootsV2
	}
	return m
}

func (c *Client) handshake(ctx context.Context) error {
	switch c.opts.Dialect {
	case Core:
		return c.initialize(ctx)
	case Extension:
		res, err := c.discover(ctx)
		if err != nil {
			return fmt.Errorf("client: server/discover: %w", err)
		}
		c.useDiscovery(res)
		return nil
	case Auto:
		res, err := c.discover(ctx)
		if err == nil && res.extension {
			c.useDiscovery(res)
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.log.Debug("server/discover failed; falling back to initialize", "error", err)
		}
		ierr := c.initialize(ctx)
		if ierr != nil && err == nil {
			// The server speaks 2026-07-28 without the tasks extension and
			// will not also initialize on this connection (a go-sdk server
			// treats server/discover as the session's start): stay at
			// 2026-07-28, with no task support.
			c.log.Debug("initialize after server/discover failed; staying at "+ExtensionVersion, "error", ierr)
			c.useDiscovery(res)
			return nil
		}
		return ierr
	}
	return fmt.Errorf("client: unknown dialect %d", c.opts.Dialect)
}

type discovery struct {
	caps         json.RawMessage
	serverInfo   *mcp.Implementation
	instructions string
	extension    bool
}

func (c *Client) discover(ctx context.Context) (*discovery, error) {
	dctx, cancel := context.WithTimeout(ctx, defaultDiscoverWait)
	defer cancel()
	var raw json.RawMessage
	params := map[string]any{"_meta": c.extMeta()}
	if err := c.conn.Call(dctx, mcptask.MethodDiscover, params, &raw); err != nil {
		return nil, rpcError(mcptask.MethodDiscover, err)
	}
	var res struct {
		SupportedVersions []string                   `json:"supportedVersions"`
		Capabilities      json.RawMessage            `json:"capabilities"`
		Instructions      string                     `json:"instructions"`
		Meta              map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, malformed("server/discover result: %v", err)
	}
	if len(res.SupportedVersions) > 0 && !slices.Contains(res.SupportedVersions, ExtensionVersion) {
		return nil, fmt.Errorf("server/discover: the server supports %v, not %s", res.SupportedVersions, ExtensionVersion)
	}
	d := &discovery{caps: res.Capabilities, instructions: res.Instructions}
	if si, ok := res.Meta[mcptask.MetaServerInfo]; ok {
		var impl mcp.Implementation
		if json.Unmarshal(si, &impl) == nil {
			d.serverInfo = &impl
		}
	}
	d.extension = parseSupport(res.Capabilities).Extension
	return d, nil
}

func (c *Client) useDiscovery(d *discovery) {
	c.dialect = Extension
	c.protocolVersion = ExtensionVersion
	c.support = parseSupport(d.caps)
	c.serverCaps = decodeServerCaps(d.caps)
	c.serverInfo = d.serverInfo
	c.instructions = d.instructions
}

func (c *Client) initialize(ctx context.Context) error {
	caps := c.capabilitiesMap()
	if r := c.opts.Receiver; r != nil {
		requests := map[string]any{}
		if r.Sampling != nil {
			requests["sampling"] = map[string]any{"createMessage": map[string]any{}}
		}
		if r.Elicitation != nil {
			requests["elicitation"] = map[string]any{"create": map[string]any{}}
		}
		caps["tasks"] = map[string]any{"list": map[string]any{}, "cancel": map[string]any{}, "requests": requests}
	}
	params := map[string]any{"protocolVersion": CoreVersion, "capabilities": caps, "clientInfo": c.opts.ClientInfo}
	var raw json.RawMessage
	if err := c.conn.Call(ctx, mcptask.MethodInitialize, params, &raw); err != nil {
		return fmt.Errorf("client: initialize: %w", rpcError(mcptask.MethodInitialize, err))
	}
	var res struct {
		ProtocolVersion string              `json:"protocolVersion"`
		Capabilities    json.RawMessage     `json:"capabilities"`
		ServerInfo      *mcp.Implementation `json:"serverInfo"`
		Instructions    string              `json:"instructions"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("client: initialize: %w", malformed("%v", err))
	}
	if res.ProtocolVersion == "" {
		return fmt.Errorf("client: initialize: %w", malformed("no protocolVersion"))
	}
	c.dialect = Core
	c.protocolVersion = res.ProtocolVersion
	c.support = parseSupport(res.Capabilities)
	c.serverCaps = decodeServerCaps(res.Capabilities)
	c.serverInfo = res.ServerInfo
	c.instructions = res.Instructions
	if vs, ok := c.transport.(interface{ setProtocolVersion(string) }); ok {
		vs.setProtocolVersion(res.ProtocolVersion)
	}
	if err := c.conn.Notify(ctx, mcptask.MethodInitialized, map[string]any{}); err != nil {
		return fmt.Errorf("client: notifications/initialized: %w", err)
	}
	return nil
}

// parseSupport reads the task capabilities of both dialects from a raw
// ServerCapabilities object.
func parseSupport(raw json.RawMessage) Support {
	var caps struct {
		Tasks *struct {
			List     json.RawMessage `json:"list"`
			Cancel   json.RawMessage `json:"cancel"`
			Requests *struct {
				Tools *struct {
					Call json.RawMessage `json:"call"`
				} `json:"tools"`
			} `json:"requests"`
		} `json:"tasks"`
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	var s Support
	if json.Unmarshal(raw, &caps) != nil {
		return s
	}
	if t := caps.Tasks; t != nil {
		s.Core = true
		s.List = !isAbsent(t.List)
		s.Cancel = !isAbsent(t.Cancel)
		s.ToolsCall = t.Requests != nil && t.Requests.Tools != nil && !isAbsent(t.Requests.Tools.Call)
	}
	if ext, ok := caps.Extensions[ExtensionID]; ok && !isAbsent(ext) {
		s.Extension = true
	}
	return s
}

func decodeServerCaps(raw json.RawMessage) *mcp.ServerCapabilities {
	var sc mcp.ServerCapabilities
	if isAbsent(raw) || json.Unmarshal(raw, &sc) != nil {
		return &mcp.ServerCapabilities{}
	}
	return &sc
}

// extMeta is the per-request _meta of the extension dialect: protocol
// version, client capabilities (declaring the tasks extension) and client
// info.
func (c *Client) extMeta() map[string]any {
	caps := c.capabilitiesMap()
	ext := map[string]any{}
	if old, ok := caps["extensions"].(map[string]any); ok {
		for k, v := range old {
			ext[k] = v
		}
	}
	ext[ExtensionID] = map[string]any{}
	caps["extensions"] = ext
	return map[string]any{
		mcptask.MetaProtocolVersion:    ExtensionVersion,
		mcptask.MetaClientCapabilities: caps,
		mcptask.MetaClientInfo:         c.opts.ClientInfo,
	}
}

// withMeta returns params with the dialect's per-request _meta merged in
// (extension dialect) and extra merged into _meta.
func (c *Client) withMeta(params map[string]any, extra map[string]any) map[string]any {
	out := make(map[string]any, len(params)+1)
	for k, v := range params {
		out[k] = v
	}
	meta := map[string]any{}
	for k, v := range extra {
		meta[k] = v
	}
	if c.dialect == Extension {
		for k, v := range c.extMeta() {
			meta[k] = v
		}
	}
	if len(meta) > 0 {
		out["_meta"] = meta
	}
	return out
}

// call sends a request in the session's dialect and returns the raw
// result.
func (c *Client) call(ctx context.Context, method string, params map[string]any) (json.RawMessage, error) {
	return c.callWith(ctx, method, params, nil, false)
}

func (c *Client) callWith(ctx context.Context, method string, params, meta map[string]any, taskCall bool) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := c.conn.Call(ctx, method, c.withMeta(params, meta), &raw); err != nil {
		return nil, classify(method, taskCall, err)
	}
	if isAbsent(raw) {
		return nil, malformed("%s returned no result", method)
	}
	return raw, nil
}

// Dialect returns the dialect negotiated with the server: Core or
// Extension.
func (c *Client) Dialect() Dialect { return c.dialect }

// ProtocolVersion returns the negotiated protocol version.
func (c *Client) ProtocolVersion() string { return c.protocolVersion }

// ServerTasks returns the server's advertised task support.
func (c *Client) ServerTasks() Support { return c.support }

// ServerCapabilities returns the server's capabilities as the go-sdk
// decodes them (without the core "tasks" member, which it does not model:
// see ServerTasks).
func (c *Client) ServerCapabilities() *mcp.ServerCapabilities { return c.serverCaps }

// ServerInfo returns the server's implementation info, if it sent any.
func (c *Client) ServerInfo() *mcp.Implementation { return c.serverInfo }

// Instructions returns the server's instructions, if any.
func (c *Client) Instructions() string { return c.instructions }

// Done is closed when the connection to the server has ended.
func (c *Client) Done() <-chan struct{} { return c.conn.Done() }

// Close closes the connection. Running receiver-side tasks are cancelled.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	recv := c.recv
	c.mu.Unlock()
	if recv != nil {
		recv.close()
	}
	return c.conn.Close()
}

// Tools lists every tool of the server (all pages) with its task support,
// and refreshes the cache CallTool uses to check task support.
func (c *Client) Tools(ctx context.Context) ([]Tool, error) {
	var out []Tool
	cursor := ""
	for range 1000 {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := c.call(ctx, mcptask.MethodToolsList, params)
		if err != nil {
			return nil, err
		}
		var page struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, malformed("tools/list: %v", err)
		}
		for _, rt := range page.Tools {
			t, err := decodeTool(rt)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		}
		if page.NextCursor == "" || page.NextCursor == cursor {
			break
		}
		cursor = page.NextCursor
	}
	c.mu.Lock()
	c.tools = make(map[string]Tool, len(out))
	for _, t := range out {
		c.tools[t.Name] = t
	}
	c.mu.Unlock()
	return out, nil
}

func decodeTool(raw json.RawMessage) (Tool, error) {
	var t mcp.Tool
	if err := json.Unmarshal(raw, &t); err != nil {
		return Tool{}, malformed("tools/list: tool: %v", err)
	}
	if t.Name == "" {
		return Tool{}, malformed("tools/list: a tool has no name")
	}
	var ex struct {
		Execution *struct {
			TaskSupport string `json:"taskSupport"`
		} `json:"execution"`
	}
	_ = json.Unmarshal(raw, &ex)
	out := Tool{Tool: &t, TaskSupport: TaskForbidden}
	if ex.Execution != nil && ex.Execution.TaskSupport != "" {
		out.declared = true
		switch s := TaskSupport(ex.Execution.TaskSupport); s {
		case TaskForbidden, TaskOptional, TaskRequired:
			out.TaskSupport = s
		default:
			return Tool{}, malformed("tools/list: tool %q: unknown taskSupport %q", t.Name, s)
		}
	}
	return out, nil
}

// tool returns a tool from the cache, listing the tools once if it is
// missing.
func (c *Client) tool(ctx context.Context, name string) (Tool, error) {
	c.mu.Lock()
	t, ok := c.tools[name]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	if _, err := c.Tools(ctx); err != nil {
		return Tool{}, err
	}
	c.mu.Lock()
	t, ok = c.tools[name]
	c.mu.Unlock()
	if !ok {
		return Tool{}, fmt.Errorf("%w: %q is not in the server's tools/list", ErrUnknownTool, name)
	}
	return t, nil
}

// ---- server-to-client traffic ----

// handle answers requests the server sends.
func (c *Client) handle(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case mcptask.MethodPing:
		return map[string]any{}, nil
	case mcptask.MethodElicit, mcptask.MethodSampling, mcptask.MethodRootsList:
		if c.recv != nil && method != mcptask.MethodRootsList && hasTaskParam(params) {
			return c.recv.create(ctx, method, params)
		}
		return c.answerInput(ctx, InputRequest{Method: method, Params: params})
	case mcptask.MethodTasksGet, mcptask.MethodTasksResult, mcptask.MethodTasksList, mcptask.MethodTasksCancel:
		if c.recv != nil {
			return c.recv.serve(ctx, method, params)
		}
	}
	return nil, &jsonrpc.Error{Code: mcptask.CodeMethodNotFound, Message: fmt.Sprintf("client does not handle %s", method)}
}

// answerInput routes an input request to the CallTool watching its task,
// or answers it directly.
func (c *Client) answerInput(ctx context.Context, req InputRequest) (any, error) {
	taskID := relatedTaskID(req.Params)
	if w := c.inputWatcher(taskID); w != nil {
		ask := &inputAsk{taskID: taskID, req: req, reply: make(chan inputAnswer, 1)}
		select {
		case w.inputs <- ask:
			select {
			case a := <-ask.reply:
				return rawOrError(a.result, a.err)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case <-w.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res, err := c.answerDirect(ctx, taskID, req)
	return rawOrError(res, err)
}

func rawOrError(res json.RawMessage, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	if !json.Valid(res) {
		return nil, errors.New("client: the input handler returned invalid JSON")
	}
	return res, nil
}

// answerDirect answers an input request with InputHandler, or with the
// Receiver's handlers for a plain (non-task) sampling or elicitation.
func (c *Client) answerDirect(ctx context.Context, taskID string, req InputRequest) (json.RawMessage, error) {
	if h := c.opts.InputHandler; h != nil {
		return h(ctx, taskID, req)
	}
	if r := c.opts.Receiver; r != nil {
		if res, ok, err := r.answerSync(ctx, req); ok {
			if err != nil {
				return nil, err
			}
			return json.Marshal(res)
		}
	}
	return nil, &noHandlerError{method: req.Method}
}

// noHandlerError is ErrNoInputHandler for the caller and a -32601
// JSON-RPC error for the server.
type noHandlerError struct{ method string }

func (e *noHandlerError) Error() string { return fmt.Sprintf("%v (%s)", ErrNoInputHandler, e.method) }

func (e *noHandlerError) Unwrap() []error {
	return []error{ErrNoInputHandler, &jsonrpc.Error{Code: mcptask.CodeMethodNotFound, Message: e.Error()}}
}

func hasTaskParam(params json.RawMessage) bool {
	var p struct {
		Task json.RawMessage `json:"task"`
	}
	return json.Unmarshal(params, &p) == nil && !isAbsent(p.Task)
}

// relatedTaskID reads _meta["io.modelcontextprotocol/related-task"].taskId.
func relatedTaskID(params json.RawMessage) string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	var rt struct {
		TaskID string `json:"taskId"`
	}
	if raw, ok := p.Meta[mcptask.MetaRelatedTask]; ok && json.Unmarshal(raw, &rt) == nil {
		return rt.TaskID
	}
	return ""
}

// onNotification runs on the read loop: it must not block.
func (c *Client) onNotification(method string, params json.RawMessage) {
	if method != mcptask.NotificationTaskStatus {
		return
	}
	t, err := decodeTask(params)
	if err != nil {
		c.log.Debug("ignoring malformed task status notification", "error", err)
		return
	}
	c.observe(t)
	c.mu.Lock()
	ws := slices.Clone(c.watchers[t.ID])
	c.mu.Unlock()
	for _, w := range ws {
		w.push(t)
	}
}
