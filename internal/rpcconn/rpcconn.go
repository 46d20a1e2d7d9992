// Package rpcconn is a minimal JSON-RPC 2.0 peer over an mcp.Connection. It
// can send any request the go-sdk client cannot express (a core-dialect
// task-augmented tools/call, tasks/*), answer requests from the other side
// with a handler, and collect notifications. It works in either role: the
// client package uses it as an MCP client, and tests use it as a raw server.
package rpcconn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Handler answers a request from the other side. Its context is cancelled
// when the peer sends notifications/cancelled for the request, and when the
// connection ends.
type Handler func(ctx context.Context, method string, params json.RawMessage) (any, error)

// AfterReply may be implemented by a Handler's result: the connection calls
// AfterReply, in a new goroutine, once the response carrying the result has
// been written. A receiver uses it to start work that must not be reported
// (for example by a status notification) before the reply itself.
type AfterReply interface {
	AfterReply()
}

// Conn is a JSON-RPC peer.
type Conn struct {
	conn       mcp.Connection
	handler    Handler
	sendCancel bool

	mu       sync.Mutex
	nextID   int64
	pending  map[int64]chan *jsonrpc.Response
	inbound  map[string]context.CancelFunc // peer request id -> handler cancel
	notify   func(method string, params json.RawMessage)
	err      error
	done     chan struct{}
	baseCtx  context.Context
	stopBase context.CancelFunc
}

// Options configure Dial.
type Options struct {
	// Handler answers requests from the other side; nil answers every
	// request with "method not found".
	Handler Handler
	// OnNotification receives notifications. It runs on the read loop, so
	// it must not block.
	OnNotification func(method string, params json.RawMessage)
	// SendCancelled makes Call send notifications/cancelled for a request
	// whose context ends before the response arrives.
	SendCancelled bool
}

// Dial connects over t and starts reading.
func Dial(ctx context.Context, t mcp.Transport, opts *Options) (*Conn, error) {
	conn, err := t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	base, stop := context.WithCancel(context.Background())
	c := &Conn{
		conn:     conn,
		pending:  map[int64]chan *jsonrpc.Response{},
		inbound:  map[string]context.CancelFunc{},
		done:     make(chan struct{}),
		baseCtx:  base,
		stopBase: stop,
	}
	if opts != nil {
		c.handler = opts.Handler
		c.notify = opts.OnNotification
		c.sendCancel = opts.SendCancelled
	}
	go c.readLoop()
	return c, nil
}

func (c *Conn) readLoop() {
	defer close(c.done)
	for {
		msg, err := c.conn.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.err = err
			for id, ch := range c.pending {
				close(ch)
				delete(c.pending, id)
			}
			c.mu.Unlock()
			c.stopBase()
			return
		}
		switch m := msg.(type) {
		case *jsonrpc.Response:
			id, ok := m.ID.Raw().(int64)
			if !ok {
				continue
			}
			c.mu.Lock()
			ch := c.pending[id]
			delete(c.pending, id)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case *jsonrpc.Request:
			if !m.IsCall() {
				if m.Method == "notifications/cancelled" {
					c.cancelInbound(m.Params)
				}
				if c.notify != nil {
					c.notify(m.Method, m.Params)
				}
				continue
			}
			ctx, cancel := context.WithCancel(c.baseCtx)
			key := idKey(m.ID.Raw())
			c.mu.Lock()
			c.inbound[key] = cancel
			c.mu.Unlock()
			go c.answer(ctx, key, m)
		}
	}
}

// idKey turns a request id into a map key that keeps numbers and strings
// apart.
func idKey(raw any) string {
	switch v := raw.(type) {
	case string:
		return "s:" + v
	case int64:
		return fmt.Sprintf("n:%d", v)
	case float64:
		return fmt.Sprintf("n:%d", int64(v))
	}
	return fmt.Sprintf("?:%v", raw)
}

// cancelInbound cancels the handler of the request named by a
// notifications/cancelled.
func (c *Conn) cancelInbound(params json.RawMessage) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || p.RequestID == nil {
		return
	}
	key := idKey(p.RequestID)
	c.mu.Lock()
	cancel := c.inbound[key]
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *Conn) answer(ctx context.Context, key string, req *jsonrpc.Request) {
	defer func() {
		c.mu.Lock()
		cancel := c.inbound[key]
		delete(c.inbound, key)
		c.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}()
	resp := &jsonrpc.Response{ID: req.ID}
	var after AfterReply
	if c.handler == nil {
		resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "no handler for " + req.Method}
	} else {
		res, err := c.callHandler(ctx, req)
		if err != nil {
			var je *jsonrpc.Error
			if !errors.As(err, &je) {
				je = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
			}
			resp.Error = je
		} else {
			b, merr := json.Marshal(res)
			if merr != nil {
				resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: merr.Error()}
			} else {
				resp.Result = b
				after, _ = res.(AfterReply)
			}
		}
	}
	werr := c.conn.Write(context.Background(), resp)
	if after != nil && werr == nil {
		go after.AfterReply()
	}
}

// callHandler runs the handler, turning a panic into an internal error so
// that a bad message cannot take the process down.
func (c *Conn) callHandler(ctx context.Context, req *jsonrpc.Request) (res any, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("handler for %s panicked: %v", req.Method, p)}
		}
	}()
	return c.handler(ctx, req.Method, req.Params)
}

// Call sends a request and decodes its result into result (which may be
// nil, or a *json.RawMessage). A JSON-RPC error comes back as *jsonrpc.Error.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return fmt.Errorf("rpcconn: encoding params: %w", err)
		}
		raw = b
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.nextID++
	id := c.nextID
	ch := make(chan *jsonrpc.Response, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	jid, _ := jsonrpc.MakeID(float64(id))
	if err := c.conn.Write(ctx, &jsonrpc.Request{ID: jid, Method: method, Params: raw}); err != nil {
		c.forget(id)
		return err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return fmt.Errorf("rpcconn: connection closed: %w", c.closedErr())
		}
		if resp.Error != nil {
			var je *jsonrpc.Error
			if errors.As(resp.Error, &je) {
				return je
			}
			return resp.Error
		}
		if result == nil {
			return nil
		}
		if rm, ok := result.(*json.RawMessage); ok {
			*rm = append((*rm)[:0], resp.Result...)
			return nil
		}
		return json.Unmarshal(resp.Result, result)
	case <-ctx.Done():
		c.forget(id)
		if c.sendCancel {
			c.notifyCancelled(id, ctx)
		}
		return ctx.Err()
	}
}

// notifyCancelled tells the peer, best effort, that request id was
// abandoned.
func (c *Conn) notifyCancelled(id int64, ctx context.Context) {
	select {
	case <-c.done:
		return
	default:
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = c.Notify(wctx, "notifications/cancelled", map[string]any{"requestId": id, "reason": context.Cause(ctx).Error()})
}

// Notify sends a notification.
func (c *Conn) Notify(ctx context.Context, method string, params any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return c.conn.Write(ctx, &jsonrpc.Request{Method: method, Params: b})
}

func (c *Conn) forget(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *Conn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Done is closed when the connection has stopped reading (closed by either
// side).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close closes the connection; running handlers see their context end.
func (c *Conn) Close() error {
	err := c.conn.Close()
	<-c.done
	c.stopBase()
	return err
}
