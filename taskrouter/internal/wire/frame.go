package wire

// Framing newline-delimited JSON-RPC (stdio, and any mcp.IOTransport).
// go-sdk's stream connection decodes every message it reads three times,
// each time filling a fresh 32 KiB buffer (as a batch, as a message, its
// method), before the router's wrapper sees it; and it ends the stream,
// and with it the session (on stdio: the server process), at the first
// thing it cannot read as a message. When the router wraps an
// IOTransport or a StdioTransport, it reads the stream itself (Frame),
// one line at a time, as the MCP stdio transport delimits messages: it
// offers each message to the fast path, passes every other message, line
// and line end unchanged, to the SDK's own connection through a pipe, and
// answers a line go-sdk could not read (not one JSON value, not a
// JSON-RPC message, a batch the session's protocol has no place for, an
// id go-sdk would echo altered, a line longer than the transport's
// MaxLineLength) with a JSON-RPC error of its own, dropping it: the
// stream goes on.

import (
	"bytes"
	"encoding/json"
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// MaxFrame bounds the messages the router offers the fast path.
const MaxFrame = 1 << 20

// Source is the stream a wrapped IOTransport or StdioTransport reads, and
// how to close it.
type Source struct {
	R      io.Reader
	W      io.WriteCloser
	Close  func() error // closes the reading side
	MaxLen int          // the transport's MaxLineLength
}

// SourceOf returns the stream of t when the router can frame it.
func SourceOf(t mcp.Transport) (Source, bool) {
	switch t := t.(type) {
	case *mcp.IOTransport:
		if t.Reader == nil || t.Writer == nil {
			return Source{}, false
		}
		return Source{R: t.Reader, W: t.Writer, Close: t.Reader.Close, MaxLen: t.MaxLineLength}, true
	case *mcp.StdioTransport:
		return Source{R: os.Stdin, W: nopWriteCloser{os.Stdout}, Close: os.Stdin.Close, MaxLen: t.MaxLineLength}, true
	}
	return Source{}, false
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// Frame reads src one line at a time. check says whether go-sdk can
// read a line (nil), or which error answers it instead (refuse then
// writes it, with the id to echo, and the line is dropped); a line go-sdk
// can read is offered to take when it is one message (take reports
// whether it answered it), and otherwise written to pw with its line
// end. maxLen bounds a line (0: go-sdk's default, negative: no bound).
// Frame returns when src ends or pw is closed.
func Frame(src io.Reader, pw *io.PipeWriter, maxLen int, check func(line []byte) (json.RawMessage, *jsonrpc.Error),
	refuse func(id json.RawMessage, err *jsonrpc.Error), take func(raw []byte) bool) {
	if maxLen == 0 {
		maxLen = mcp.DefaultMaxLineLength
	}
	f := framer{pw: pw, check: check, refuse: refuse, take: take, max: maxLen, buf: make([]byte, 0, 64<<10)}
	chunk := make([]byte, 32<<10)
	for {
		n, err := src.Read(chunk)
		if !f.lines(chunk[:n]) {
			return
		}
		if err != nil {
			if len(bytes.TrimSpace(f.buf)) > 0 && !f.discard && !f.line(f.buf) {
				return
			}
			pw.CloseWithError(err)
			return
		}
	}
}

type framer struct {
	pw      *io.PipeWriter
	check   func([]byte) (json.RawMessage, *jsonrpc.Error)
	refuse  func(json.RawMessage, *jsonrpc.Error)
	take    func([]byte) bool
	max     int
	buf     []byte // the line read so far
	discard bool   // dropping the rest of a line too long to read
}

// lines frames b: every line it completes is handled. It reports false
// once the pipe to the SDK broke.
func (f *framer) lines(b []byte) bool {
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			if !f.discard {
				f.buf = append(f.buf, b...)
				if f.max > 0 && len(f.buf) > f.max {
					f.tooLong()
				}
			}
			return true
		}
		if f.discard {
			f.discard = false
		} else {
			f.buf = append(f.buf, b[:nl]...)
			if f.max > 0 && len(f.buf) > f.max {
				f.tooLong()
				f.discard = false
			} else if !f.line(f.buf) {
				return false
			}
		}
		f.buf = f.buf[:0]
		b = b[nl+1:]
	}
	return true
}

// tooLong refuses the line being read and drops the rest of it.
func (f *framer) tooLong() {
	f.refuse(nil, mcptask.Errorf(mcptask.CodeParseError, "parse error: a line of the stream is longer than %d bytes; it was dropped", f.max))
	f.buf, f.discard = f.buf[:0], true
}

// line handles one line (without its line end).
func (f *framer) line(line []byte) bool {
	t := bytes.TrimSpace(line)
	if len(t) == 0 {
		return true
	}
	if id, err := f.check(t); err != nil {
		f.refuse(id, err)
		return true
	}
	if t[0] == '{' && len(t) < MaxFrame && f.take(t) {
		return true // answered: the SDK never sees it
	}
	_, err := f.pw.Write(append(line, '\n'))
	return err == nil
}
