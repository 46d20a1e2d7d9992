package wire

// Framing newline-delimited JSON-RPC (stdio, and any mcp.IOTransport).
// go-sdk's stream connection decodes every message it reads three times,
// each time filling a fresh 32 KiB buffer (as a batch, as a message, its
// method), before the router's wrapper sees it. When the router wraps an
// IOTransport or a StdioTransport, it reads the stream itself (Frame): it
// offers each message to the fast path, and passes every other byte, in
// order and unchanged, to the SDK's own connection through a pipe. So the
// SDK sees the same stream, less the messages the router answered.
//
// A message is offered only when the SDK is sure to read it as one
// message: a JSON object, valid, followed by a newline. Anything else (a
// batch, invalid JSON, a value followed by something other than a line
// end, a message of a megabyte or more) switches the stream to passing
// everything through from there on, so the SDK meets it, and answers it,
// exactly as it would have.

import (
	"encoding/json"
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxFrame bounds the messages the router frames itself.
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

// Frame reads src and offers every framed message to take, which reports
// whether it answered the message; everything take did not answer is
// written to pw, in order. It returns when src ends or pw is closed.
func Frame(src io.Reader, pw *io.PipeWriter, take func(raw []byte) bool) {
	f := framer{src: src, pw: pw, take: take, buf: make([]byte, 0, 64<<10)}
	chunk := make([]byte, 32<<10)
	for f.handOver() {
		n, err := src.Read(chunk)
		f.buf = append(f.buf, chunk[:n]...)
		if err != nil {
			if len(f.buf) > 0 {
				if _, werr := pw.Write(f.buf); werr != nil {
					return
				}
			}
			pw.CloseWithError(err)
			return
		}
	}
}

type framer struct {
	src  io.Reader
	pw   *io.PipeWriter
	take func([]byte) bool
	buf  []byte
}

// handOver hands over every complete line-ended value at the front of
// buf; it reports false when the stream is done with (passed through to
// its end, or the pipe broke).
func (f *framer) handOver() bool {
	for {
		buf := f.buf
		start := SkipSpace(buf, 0)
		if start == len(buf) {
			// Only whitespace: pass it on (the SDK skips it too).
			if len(buf) > 0 {
				if !f.write(buf) {
					return false
				}
				f.buf = buf[:0]
			}
			return true
		}
		if buf[start] != '{' {
			f.passthrough(buf)
			return false
		}
		end, complete := valueEnd(buf, start)
		if !complete {
			if len(buf)-start >= MaxFrame {
				f.passthrough(buf)
				return false
			}
			if start > 0 { // keep the leading whitespace for the SDK
				if !f.write(buf[:start]) {
					return false
				}
				f.buf = append(buf[:0], buf[start:]...)
			}
			return true
		}
		if end == len(buf) {
			// Complete, but what follows has not arrived: the SDK reads
			// it now (it does not wait for a line end either).
			if !f.write(buf) {
				return false
			}
			f.buf = buf[:0]
			return true
		}
		if nl := buf[end]; nl != '\n' && nl != '\r' || end-start >= MaxFrame || !json.Valid(buf[start:end]) {
			f.passthrough(buf)
			return false
		}
		if f.take(buf[start:end]) {
			// Answered: the SDK never sees it (nor its line end).
			if start > 0 && !f.write(buf[:start]) {
				return false
			}
		} else if !f.write(buf[:end+1]) {
			return false
		}
		f.buf = append(buf[:0], buf[end+1:]...)
	}
}

func (f *framer) write(b []byte) bool {
	_, err := f.pw.Write(b)
	return err == nil
}

// passthrough hands rest and the remainder of the stream to the SDK.
func (f *framer) passthrough(rest []byte) {
	if len(rest) > 0 && !f.write(rest) {
		return
	}
	_, err := io.Copy(f.pw, f.src)
	if err == nil {
		err = io.EOF
	}
	f.pw.CloseWithError(err)
}
