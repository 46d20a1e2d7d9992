package taskrouter

// Framing newline-delimited JSON-RPC for the fast path (stdio, and any
// mcp.IOTransport). go-sdk's stream connection decodes every message it
// reads three times, each time filling a fresh 32 KiB buffer (as a batch,
// as a message, its method), before the router's wrapper sees it. When
// Transport wraps an IOTransport or a StdioTransport, the router reads the
// stream itself: it answers a task method (or a task-creating tools/call)
// the fast path takes from the bytes, decoding them once, and passes every
// other byte, in order and unchanged, to the SDK's own connection through
// a pipe. So the SDK sees the same stream, less the messages the router
// answered.
//
// The router takes a message only when it is sure the SDK would read it
// as one message: a JSON object, valid, followed by a newline. Anything
// else (a batch, invalid JSON, a value followed by something other than a
// line end, a message of a megabyte or more) switches the connection to
// passing everything through from there on, so the SDK meets it, and
// answers it, exactly as it would have.

import (
	"context"
	"encoding/json"
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxFastFrame bounds the messages the router frames itself.
const maxFastFrame = 1 << 20

// framedSource is the stream a wrapped IOTransport or StdioTransport
// reads, and how to close it.
type framedSource struct {
	r      io.Reader
	w      io.WriteCloser
	close  func() error // closes the reading side
	maxLen int
}

// framedSourceOf returns the stream of t when the router can frame it.
func framedSourceOf(t mcp.Transport) (framedSource, bool) {
	switch t := t.(type) {
	case *mcp.IOTransport:
		if t.Reader == nil || t.Writer == nil {
			return framedSource{}, false
		}
		return framedSource{r: t.Reader, w: t.Writer, close: t.Reader.Close, maxLen: t.MaxLineLength}, true
	case *mcp.StdioTransport:
		return framedSource{r: os.Stdin, w: nopWriteCloser{os.Stdout}, close: os.Stdin.Close, maxLen: t.MaxLineLength}, true
	}
	return framedSource{}, false
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// connectFramed connects the SDK's stream connection to a pipe the
// router's framer feeds from src.
func (t *taskTransport) connectFramed(ctx context.Context, src framedSource) (*pushConn, error) {
	pr, pw := io.Pipe()
	c, err := (&mcp.IOTransport{Reader: pr, Writer: src.w, MaxLineLength: src.maxLen}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc := &pushConn{Connection: c, id: NewTaskID(), r: t.r, listens: map[jsonrpc.ID]*connListen{}, noFast: t.noFast, framed: true, closeSrc: src.close}
	go pc.frame(src.r, pw)
	return pc, nil
}

// frame reads src, answers the messages the fast path takes, and writes
// everything else to pw, in order.
func (c *pushConn) frame(src io.Reader, pw *io.PipeWriter) {
	defer c.r.recoverFast("framer")
	buf := make([]byte, 0, 64<<10)
	chunk := make([]byte, 32<<10)
	passthrough := func(rest []byte) {
		if len(rest) > 0 {
			if _, err := pw.Write(rest); err != nil {
				return
			}
		}
		_, err := io.Copy(pw, src)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}
	for {
		// Hand over every complete line-ended value at the front of buf.
		for {
			start := skipSpace(buf, 0)
			if start == len(buf) {
				// Only whitespace: pass it on (the SDK skips it too).
				if len(buf) > 0 {
					if _, err := pw.Write(buf); err != nil {
						return
					}
					buf = buf[:0]
				}
				break
			}
			if buf[start] != '{' {
				passthrough(buf)
				return
			}
			end, complete := valueEnd(buf, start)
			if !complete {
				if len(buf)-start >= maxFastFrame {
					passthrough(buf)
					return
				}
				if start > 0 { // keep the leading whitespace for the SDK
					if _, err := pw.Write(buf[:start]); err != nil {
						return
					}
					buf = append(buf[:0], buf[start:]...)
				}
				break
			}
			if end == len(buf) {
				// Complete, but what follows has not arrived: the SDK
				// reads it now (it does not wait for a line end either).
				if _, err := pw.Write(buf); err != nil {
					return
				}
				buf = buf[:0]
				break
			}
			if nl := buf[end]; nl != '\n' && nl != '\r' || end-start >= maxFastFrame || !json.Valid(buf[start:end]) {
				passthrough(buf)
				return
			}
			if c.takeFrame(buf[start:end]) {
				// Answered here: the SDK never sees it (nor its line end).
				if start > 0 {
					if _, err := pw.Write(buf[:start]); err != nil {
						return
					}
				}
			} else if _, err := pw.Write(buf[:end+1]); err != nil {
				return
			}
			buf = append(buf[:0], buf[end+1:]...)
		}
		n, err := src.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if err != nil {
			if len(buf) > 0 {
				if _, werr := pw.Write(buf); werr != nil {
					return
				}
			}
			pw.CloseWithError(err)
			return
		}
	}
}

// valueEnd returns the end of the JSON value starting at b[i] (an object)
// and whether it is complete in b.
func valueEnd(b []byte, i int) (int, bool) {
	depth, inString, escaped := 0, false, false
	for ; i < len(b); i++ {
		c := b[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return len(b), false
}

// takeFrame answers a framed message on the fast path, or records the
// call the SDK is about to get (the SDK refuses an id in flight, and
// knows only its own); it reports whether it answered.
func (c *pushConn) takeFrame(raw []byte) bool {
	var w wireMessage
	if sdkUnmarshal(raw, &w) != nil || w.VersionTag != "2.0" || len(w.Method) == 0 {
		return false // the SDK answers (or refuses) it
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil || !id.IsValid() {
		return false
	}
	var method string
	if sdkUnmarshal(w.Method, &method) != nil {
		return false
	}
	switch c.inFlight(id) {
	case inflightFast:
		return true // the SDK's jsonrpc2 layer drops such a call, without an answer
	case inflightSDK:
		c.beginSDK(id)
		return false
	}
	if c.serveFast(&jsonrpc.Request{ID: id, Method: method, Params: w.Params}) {
		return true
	}
	c.beginSDK(id)
	return false
}
