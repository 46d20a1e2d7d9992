package taskrouter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// ---- connections wrapped by Transport (stdio, in-memory) ----

// lineConn is a raw client on the other end of a connection served with
// Router.Transport: it writes lines and reads them, keeping notifications
// apart.
type lineConn struct {
	t     *testing.T
	conn  net.Conn
	lines chan string
	mu    sync.Mutex
	notes []string
}

func dialLines(t *testing.T, h *harness, fast bool) *lineConn {
	t.Helper()
	cli, srvEnd := net.Pipe()
	var tr mcp.Transport = &mcp.IOTransport{Reader: srvEnd, Writer: srvEnd}
	if fast {
		tr = h.r.Transport(tr)
	} else {
		tr = taskrouter.SDKTransport(h.r, tr)
	}
	ss, err := h.srv.Connect(context.Background(), tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close(); _ = cli.Close() })
	c := &lineConn{t: t, conn: cli, lines: make(chan string, 64)}
	go func() {
		rd := bufio.NewReaderSize(cli, 1<<20)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				close(c.lines)
				return
			}
			line = strings.TrimSuffix(line, "\n")
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["id"] == nil && m["method"] != nil {
				c.mu.Lock()
				c.notes = append(c.notes, line)
				c.mu.Unlock()
				continue
			}
			c.lines <- line
		}
	}()
	return c
}

func (c *lineConn) notifications() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.notes...)
}

func (c *lineConn) send(line string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.conn.Write([]byte(line + "\n"))
	require.NoError(c.t, err)
}

func (c *lineConn) recv() string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		require.True(c.t, ok, "connection closed")
		return line
	case <-time.After(30 * time.Second):
		c.t.Fatal("no answer")
		return ""
	}
}

// call sends a request and returns the next line (its answer).
func (c *lineConn) call(line string) string {
	c.send(line)
	return c.recv()
}

// TestFastPathConnectionSameAsSDK sends the task methods over connections
// wrapped by Transport with and without the fast path.
func TestFastPathConnectionSameAsSDK(t *testing.T) {
	h := newHarness(t, foldInstantTools)
	go func() {
		for range h.started {
		}
	}()
	type side struct {
		c     *lineConn
		tasks map[string]string
		fast  bool
	}
	sides := []*side{{c: dialLines(t, h, true), fast: true}, {c: dialLines(t, h, false)}}
	norm := func(s *side, line string) string {
		for name, id := range s.tasks {
			line = strings.ReplaceAll(line, id, "<task "+name+">")
		}
		return sortLists(isoTime.ReplaceAllString(line, "<time>"))
	}
	fillS := func(s *side, in string) string {
		for name, id := range s.tasks {
			in = strings.ReplaceAll(in, "{"+name+"}", id)
		}
		return in
	}
	kinds := map[string]string{"done": `{"name":"sleepy","arguments":{"ms":0},"task":{}}`, "failed": `{"name":"boom","arguments":{},"task":{}}`,
		"rpcerr": `{"name":"rpcerr","arguments":{},"task":{}}`, "working": `{"name":"sleepy","arguments":{"ms":60000},"task":{}}`}
	for _, s := range sides {
		s.c.call(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"diff","version":"1"}}}`)
		s.c.send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
		s.tasks = map[string]string{}
		for name, params := range kinds {
			line := s.c.call(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":` + params + `}`)
			var m struct {
				Result struct {
					Task struct {
						TaskID string `json:"taskId"`
					} `json:"task"`
				} `json:"result"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &m), line)
			require.NotEmpty(t, m.Result.Task.TaskID, line)
			s.tasks[name] = m.Result.Task.TaskID
		}
		for name, id := range s.tasks {
			if name == "working" {
				continue
			}
			require.Eventually(t, func() bool {
				t, err := h.r.Task(context.Background(), id)
				return err == nil && t.Status.Terminal()
			}, 30*time.Second, 5*time.Millisecond)
		}
	}
	requests := []string{
		`{"jsonrpc":"2.0","id":10,"method":"tasks/get","params":{"taskId":"{done}"}}`,
		`{"jsonrpc":"2.0","id":11,"method":"tasks/get","params":{"taskId":"{working}"}}`,
		`{"jsonrpc":"2.0","id":12,"method":"tasks/get","params":{"taskId":"nope"}}`,
		`{"jsonrpc":"2.0","id":13,"method":"tasks/get"}`,
		`{"jsonrpc":"2.0","id":14,"method":"tasks/get","params":{"taskId":5}}`,
		`{"jsonrpc":"2.0","id":15,"method":"tasks/result","params":{"taskId":"{done}"}}`,
		`{"jsonrpc":"2.0","id":16,"method":"tasks/result","params":{"taskId":"{failed}"}}`,
		`{"jsonrpc":"2.0","id":17,"method":"tasks/result","params":{"taskId":"{rpcerr}"}}`,
		`{"jsonrpc":"2.0","id":18,"method":"tasks/list","params":{"cursor":"bad"}}`,
		`{"jsonrpc":"2.0","id":19,"method":"tasks/cancel","params":{"taskId":"{done}"}}`,
		`{"jsonrpc":"2.0","id":20,"method":"tasks/update","params":{"taskId":"{done}"}}`,
		`{"jsonrpc":"2.0","id":"s","method":"tasks/get","params":{"taskId":"{done}","_meta":{"taskbridge/private/conn":"x"}}}`,
		`{"jsonrpc":"2.0","id":21,"method":"tasks/get","params":{"taskId":"{done}",` + extMeta + `}}`,
		`{"jsonrpc":"2.0","id":22,"method":"tasks/update","params":{"taskId":"{done}","inputResponses":{},` + extMeta + `}}`,
		`{"jsonrpc":"2.0","id":23,"method":"tasks/result","params":{"taskId":"{done}",` + extMeta + `}}`,
		`{"jsonrpc":"2.0","id":24,"method":"tasks/get","params":{"taskId":"{done}","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"sleepy","arguments":{"ms":0},"task":{"ttl":5000}}}`,
		`{"jsonrpc":"2.0","id":26,"method":"tasks/cancel","params":{"taskId":"{working}"}}`,
		`{"jsonrpc":"2.0","id":27,"method":"tasks/get","params":{"taskId":"{working}"}}`,
		`{"jsonrpc":"2.0","id":28,"method":"tools/call","params":{"name":"echo","arguments":{"text":"<plain>"}}}`,
		`{"jsonrpc":"2.0","id":29,"method":"tools/call","params":{"name":"echo","arguments":{"text":3}}}`,
		`{"jsonrpc":"2.0","id":"p","method":"tools/call","params":{"name":"sleepy","arguments":{"ms":0,"label":"plain"}}}`,
		`{"jsonrpc":"2.0","id":33,"method":"tools/call","params":{"name":"boom","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":34,"method":"tools/call","params":{"name":"rpcerr","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":35,"method":"tools/call","params":{"name":"nope","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":39,"method":"logging/setLevel","params":{"level":"info"}}`,
		`{"jsonrpc":"2.0","id":36,"method":"tools/call","params":{"name":"chatty","arguments":{"n":2},"_meta":{"progressToken":"c"}}}`,
		`{"jsonrpc":"2.0","id":37,"method":"tools/call","params":{"name":"chatty","arguments":{"n":1},` + extMeta + `}}`,
		`{"jsonrpc":"2.0","id":38,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"io.modelcontextprotocol/logLevel":"debug","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
	}
	// Plain calls the fast path must serve (the other plain calls are the
	// SDK's: an unknown tool, a per-request log level).
	plainFast := map[string]bool{`"id":28`: true, `"id":29`: true, `"id":"p"`: true, `"id":33`: true, `"id":34`: true, `"id":36`: true, `"id":37`: true}
	for _, req := range requests {
		var got [2]string
		for i, s := range sides {
			before := taskrouter.FastServed(h.r)
			line := s.c.call(fillS(s, req))
			if !s.fast {
				require.Zero(t, taskrouter.FastServed(h.r)-before, req)
			} else if id := strings.SplitN(req, ",", 3)[1]; plainFast[id] {
				require.NotZero(t, taskrouter.FastServed(h.r)-before, req)
			}
			got[i] = norm(s, line)
			if strings.Contains(req, `"tools/call"`) {
				// A new task: name it.
				var m struct {
					Result struct {
						Task struct {
							TaskID string `json:"taskId"`
						} `json:"task"`
					} `json:"result"`
				}
				_ = json.Unmarshal([]byte(line), &m)
				if m.Result.Task.TaskID != "" {
					s.tasks["new"] = m.Result.Task.TaskID
				}
				got[i] = norm(s, line)
			}
		}
		require.Equal(t, got[1], got[0], req)
	}

	// A blocking tasks/result, a duplicate id while it waits (dropped
	// without an answer), then notifications/cancelled for it.
	var got [2][]string
	for i, s := range sides {
		line := s.c.call(`{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":"sleepy","arguments":{"ms":60000},"task":{}}}`)
		var m struct {
			Result struct {
				Task struct {
					TaskID string `json:"taskId"`
				} `json:"task"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		s.tasks["slow"] = m.Result.Task.TaskID
		s.c.send(fillS(s, `{"jsonrpc":"2.0","id":31,"method":"tasks/result","params":{"taskId":"{slow}"}}`))
		waitWaiters(t, h, 1)
		s.c.send(fillS(s, `{"jsonrpc":"2.0","id":31,"method":"tasks/get","params":{"taskId":"{slow}"}}`))
		s.c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":31}}`)
		got[i] = append(got[i], norm(s, s.c.recv()))
		waitWaiters(t, h, 0)
		got[i] = append(got[i], norm(s, s.c.call(fillS(s, `{"jsonrpc":"2.0","id":32,"method":"tasks/cancel","params":{"taskId":"{slow}"}}`))))
	}
	require.Equal(t, got[1], got[0])

	// The status pushes of the tasks each connection created.
	var notes [2][]string
	for i, s := range sides {
		require.Eventually(t, func() bool { return len(s.c.notifications()) >= 2 }, 30*time.Second, 5*time.Millisecond)
		for _, n := range s.c.notifications() {
			notes[i] = append(notes[i], norm(s, n))
		}
		sort.Strings(notes[i])
	}
	require.Equal(t, notes[1], notes[0])
}

var _ = bytes.Contains

// TestFastPathFramingSameAsSDK: over a stream, the router frames the
// messages itself, one line at a time, with the fast path on and off;
// odd framing (line ends, split and joined writes, batches, invalid JSON,
// values sharing a line) gets the same answers either way: what the SDK
// answers, and for a line the SDK could not read (which used to end the
// connection) the router's own error, the connection going on.
func TestFastPathFramingSameAsSDK(t *testing.T) {
	h := newHarness(t, foldInstantTools)
	go func() {
		for range h.started {
		}
	}()
	done := func(c *lineConn) string {
		out := c.call(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleepy","arguments":{"ms":0},"task":{}}}`)
		var m struct {
			Result struct {
				Task struct {
					TaskID string `json:"taskId"`
				} `json:"task"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &m), out)
		id := m.Result.Task.TaskID
		require.Eventually(t, func() bool {
			t, err := h.r.Task(context.Background(), id)
			return err == nil && t.Status.Terminal()
		}, 30*time.Second, time.Millisecond)
		return id
	}
	get := func(id, reqID string) string {
		return `{"jsonrpc":"2.0","id":` + reqID + `,"method":"tasks/get","params":{"taskId":"` + id + `"}}`
	}
	scenarios := map[string]func(id string) []string{
		"CRLF":                   func(id string) []string { return []string{get(id, "10") + "\r\n"} },
		"two in one write":       func(id string) []string { return []string{get(id, "10") + "\n" + get(id, "11") + "\n"} },
		"split across writes":    func(id string) []string { g := get(id, "10"); return []string{g[:20], g[20:] + "\n"} },
		"blank lines and spaces": func(id string) []string { return []string{"\n\n   " + get(id, "10") + "\n"} },
		"no line end, then one":  func(id string) []string { return []string{get(id, "10"), "\n"} },
		"batch":                  func(id string) []string { return []string{"[" + get(id, "10") + "," + get(id, "11") + "]\n"} },
		"two on one line":        func(id string) []string { return []string{get(id, "10") + " " + get(id, "11") + "\n"} },
		"invalid JSON":           func(id string) []string { return []string{`{"jsonrpc":"2.0","id":10,"method":"tasks/get",}` + "\n"} },
		"not an object":          func(id string) []string { return []string{"42\n"} },
		"no jsonrpc": func(id string) []string {
			return []string{`{"id":10,"method":"tasks/get","params":{"taskId":"` + id + `"}}` + "\n"}
		},
	}
	for name, sc := range scenarios {
		t.Run(name, func(t *testing.T) {
			var got [2][]string
			for i, fast := range []bool{true, false} {
				c := dialLines(t, h, fast)
				c.call(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"diff","version":"1"}}}`)
				c.send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
				id := done(c)
				for _, w := range sc(id) {
					c.mu.Lock()
					_, err := c.conn.Write([]byte(w))
					c.mu.Unlock()
					if err != nil {
						break
					}
				}
				// A ping closes the transcript, unless the connection ended.
				go func() {
					c.mu.Lock()
					defer c.mu.Unlock()
					_ = c.conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
					_, _ = c.conn.Write([]byte(`{"jsonrpc":"2.0","id":99,"method":"ping"}` + "\n"))
				}()
				// Answers may come in any order (on either path): read until
				// the connection ends, or for a while after the ping's.
				var lines []string
				wait := 3 * time.Second
				for {
					select {
					case line, ok := <-c.lines:
						if !ok {
							lines = append(lines, "<closed>")
							goto out
						}
						lines = append(lines, strings.ReplaceAll(isoTime.ReplaceAllString(line, "<time>"), id, "<task>"))
						if strings.Contains(line, `"id":99`) {
							wait = 300 * time.Millisecond
						}
					case <-time.After(wait):
						if wait > time.Second {
							lines = append(lines, "<silence>")
						}
						goto out
					}
				}
			out:
				sort.Strings(lines)
				got[i] = lines
			}
			require.Equal(t, got[1], got[0])
		})
	}
}

// TestNoCodeZero: an error reaching a client always has a JSON-RPC code
// (go-sdk sends code 0 for errors without one): a call before initialize
// is a -32600, a tasks/result the client cancelled while it waited a
// -32603 saying so, with the fast path on and off.
func TestNoCodeZero(t *testing.T) {
	h := newHarness(t, nil)
	go func() {
		for range h.started {
		}
	}()
	for _, fast := range []bool{true, false} {
		c := dialLines(t, h, fast)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(c.call(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)), &m))
		require.EqualValues(t, -32600, m["error"].(map[string]any)["code"], "fast=%v: %v", fast, m)
		c.call(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"z","version":"1"}}}`)
		c.send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
		require.NoError(t, json.Unmarshal([]byte(c.call(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleepy","arguments":{"ms":600000},"task":{}}}`)), &m))
		id := m["result"].(map[string]any)["task"].(map[string]any)["taskId"].(string)
		c.send(`{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"` + id + `"}}`)
		require.Eventually(t, func() bool { return h.r.Stats().Waiters == 1 }, 30*time.Second, time.Millisecond)
		c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`)
		select {
		case line := <-c.lines:
			require.NoError(t, json.Unmarshal([]byte(line), &m))
			require.EqualValues(t, 3, m["id"])
			e := m["error"].(map[string]any)
			require.EqualValues(t, -32603, e["code"], "fast=%v: %v", fast, m)
			require.Contains(t, e["message"], "cancelled")
		case <-time.After(10 * time.Second):
			// No answer to a cancelled request is allowed too; then no code 0 either.
		}
	}
}
