package client

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/internal/rpcconn"
)

const defaultDiscoverWait = 10 * time.Second

// Auto (the zero mcptask.Dialect) asks the server with server/discover
// (protocol 2026-07-28) and uses mcptask.Extension when the server
// advertises the tasks extension; otherwise it initializes at 2025-11-25
// and uses mcptask.Core.
const Auto mcptask.Dialect = 0

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
	Dialect mcptask.Dialect
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
	// Receiver, when set, makes the client a receiver of sampling and
	// elicitation requests from the server: task-augmented ones (core
	// dialect), plain ones, and a task's input requests (extension
	// dialect); see Receiver.
	Receiver *Receiver
	// StreamBuffer bounds the events a StreamEvents holds for a consumer
	// that has not taken them yet; past it the stream starts over from the
	// last event taken (the server keeps the log). Zero means 1024.
	StreamBuffer int
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

// Client is a connection to an MCP server that can run tool calls as
// tasks, in whichever dialect the server speaks. Its methods are safe for
// concurrent use.
type Client struct {
	conn *rpcconn.Conn
	opts Options
	log  *slog.Logger
	caps *mcp.ClientCapabilities

	dialect         mcptask.Dialect
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
	// eventSubs are the StreamEvents in progress, by task (stream.go).
	eventSubs map[string][]*eventSub
	recv      *receiverState
	closed    bool
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
	if o.StreamBuffer <= 0 {
		o.StreamBuffer = defaultStreamBuffer
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
	if o.Receiver != nil && c.dialect.ClientRunsTasks() {
		c.recv = newReceiverState(c, o.Receiver)
	}
	c.pruneAnswers()
	return c, nil
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
	ext[mcptask.ExtensionID] = map[string]any{}
	caps["extensions"] = ext
	return map[string]any{
		mcptask.MetaProtocolVersion:    mcptask.ExtensionVersion,
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
	if c.dialect.NegotiatesPerRequest() {
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

// Dialect returns the dialect negotiated with the server: mcptask.Core or
// mcptask.Extension.
func (c *Client) Dialect() mcptask.Dialect { return c.dialect }

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
