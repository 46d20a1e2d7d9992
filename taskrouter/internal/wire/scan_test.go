package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

// KeyCount counts a key in every case and spelling a decoder reads as it,
// at the top level only; RewriteBody reports a tasks/* request naming its
// task twice.
func TestKeyCount(t *testing.T) {
	for body, want := range map[string]int{
		`{"taskId":"a"}`:                           1,
		`{"taskId":"a","taskid":"b"}`:              2,
		`{"TASKID":"a","taskId":"b","x":1}`:        2,
		`{"taskId":"a","taskId":"b"}`:              2,
		`{"task\u0049d":"a","taskId":"b"}`:         2,
		`{"x":{"taskId":"a","taskid":"b"}}`:        0,
		`{"taskIds":"a","task_id":"b"}`:            0,
		`["taskId","taskid"]`:                      0,
		`{"taskId":"a","_meta":{"taskid":"x"}}`:    1,
		`{"taskId":[1,{"taskid":2}],"taskID":"b"}`: 2,
	} {
		require.Equal(t, want, KeyCount([]byte(body), "taskId"), body)
	}
	twice := RewriteBody([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"a","taskid":"b"}}`), mcptask.Extension, true)
	require.True(t, twice.TaskIDTwice)
	once := RewriteBody([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"a"}}`), mcptask.Extension, true)
	require.False(t, once.TaskIDTwice)
	require.Equal(t, "a", once.TaskID)
}

// FuzzFrame checks the stream framer: whatever the bytes, it never
// panics; every line it passes to the SDK is one JSON-RPC message go-sdk
// reads (so the SDK never ends the stream on a client's line); every
// other non-blank line is refused once, with a response that is valid
// JSON; and lines keep their order.
func FuzzFrame(f *testing.F) {
	for _, seed := range []string{
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n",
		"not json\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\r\n",
		"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]\n42\n\"x\"\nnull\n",
		"{\"jsonrpc\":\"2.0\",\"id\":2.5,\"method\":\"ping\"}\n{\"jsonrpc\":\"2.0\",\"id\":9007199254740993,\"method\":\"ping\"}\n",
		"{\"a\":1} {\"b\":2}\n\n   \n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
		"{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"x\",\"params\":{\"k\":\"\\n\"}}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		pr, pw := io.Pipe()
		var passed [][]byte
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(pr)
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			for sc.Scan() {
				passed = append(passed, append([]byte(nil), sc.Bytes()...))
			}
		}()
		var refused [][]byte
		Frame(bytes.NewReader(in), pw, 1<<16, CheckLine, func(id json.RawMessage, e *jsonrpc.Error) {
			refused = append(refused, ErrorLine(id, e))
		}, func([]byte) bool { return false })
		<-done
		for _, line := range passed {
			_, err := CheckLine(line)
			require.Nil(t, err, "passed a line go-sdk cannot read: %q", line)
			_, derr := jsonrpc.DecodeMessage(bytes.TrimSpace(line))
			require.NoError(t, derr, "%q", line)
		}
		for _, r := range refused {
			require.True(t, json.Valid(r), "%q", r)
		}
		lines := 0
		for _, l := range bytes.Split(in, []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				lines++
			}
		}
		require.Equal(t, lines, len(passed)+len(refused), "every line is passed or refused once")
	})
}

// fieldByDecoder is Field as a decoder reads it: the reference the byte
// scanner must agree with.
func fieldByDecoder(b []byte, key string) (value json.RawMessage, found bool) {
	eachMember(b, func(k string, v json.RawMessage) {
		if k == key {
			value, found = v, true
		}
	})
	return value, found
}

// Field answers from the byte scanner when it can and from a decoder when
// a key holds an escape or the body is not valid JSON: both readings agree
// on every body.
func TestField(t *testing.T) {
	for _, c := range []struct {
		body, key, want string
		found           bool
	}{
		{`{"id":1,"method":"tasks/get"}`, "method", `"tasks/get"`, true},
		{` {"id" : "a" , "id":7 } `, "id", `7`, true},
		{`{"i\u0064":3}`, "id", `3`, true},
		{`{"x":{"id":1}}`, "id", ``, false},
		{`{"id":1`, "id", `1`, true},
		{`[{"id":1}]`, "id", ``, false},
		{`{"id":[1,{"id":2}],"method":null}`, "method", `null`, true},
	} {
		v, found := Field([]byte(c.body), c.key)
		require.Equal(t, c.found, found, c.body)
		require.Equal(t, c.want, string(v), c.body)
	}
}

func FuzzField(f *testing.F) {
	for _, s := range []string{`{"id":1,"method":"m"}`, `{"i\u0064":"x","id":2}`, `{"id":{"id":1}}`, `{"id":`, `  {"method" : "a" }  `, `{}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		keys := []string{"id", "method", ""}
		all := Fields(b, keys...)
		for i, key := range keys {
			v, found := Field(b, key)
			rv, rfound := fieldByDecoder(b, key)
			require.Equal(t, rfound, found, "%q %s", b, key)
			require.Equal(t, string(rv), string(v), "%q %s", b, key)
			require.Equal(t, rfound, all[i] != nil, "%q %s", b, key)
			require.Equal(t, string(rv), string(all[i]), "%q %s", b, key)
		}
	})
}
