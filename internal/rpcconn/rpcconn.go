// Package rpcconn is a minimal JSON-RPC 2.0 peer over an mcp.Connection. It
// can send any request the go-sdk client cannot express (a core-dialect
// task-augmented tools/call, tasks/*), answer server-to-client requests with
// a handler, and collect notifications.
package rpcconn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Handler answers a server-to-client request.
type Handler func(ctx context.Context, method string, params json.RawMessage) (any, error)

// Conn is a JSON-RPC peer.
type Conn struct {
	conn    mcp.Connection
	handler Handler

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan *jsonrpc.Response
	notify  func(method string, params json.RawMessage)
	err     error
	done    chan struct{}
}

// Options configure Dial.
type Options struct {
	// Handler answers server-to-client requests; nil answers every request
	// with "method not found".
	Handler Handler
	// OnNotification receives server notifications.
	OnNotification func(method string, params json.RawMessage)
}

// Dial connects over t and starts reading.
func Dial(ctx context.Context, t mcp.Transport, opts *Options) (*Conn, error) {
	conn, err := t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	c := &Conn{conn: conn, pending: map[int64]chan *jsonrpc.Response{}, done: make(chan struct{})}
	if opts != nil {
		c.handler = opts.Handler
		c.notify = opts.OnNotification
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
				if c.notify != nil {
					c.notify(m.Method, m.Params)
				}
				continue
			}
			go c.answer(m)
		}
	}
}

func (c *Conn) answer(req *jsonrpc.Request) {
	resp := &jsonrpc.Response{ID: req.ID}
	if c.handler == nil {
		resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "no handler for " + req.Method}
	} else {
		res, err := c.handler(context.Background(), req.Method, req.Params)
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
			}
		}
	}
	_ = c.conn.Write(context.Background(), resp)
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
		return ctx.Err()
	}
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

// Close closes the connection.
func (c *Conn) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}
