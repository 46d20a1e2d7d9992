package taskrouter

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/require"
)

// takeResponse takes a client's response to a Peer's request, whatever
// the order of its members, and nothing else: not a request that
// merely mentions the prefix (a client named "taskbridge-…" in its
// _meta), not a response to anyone else, not a batch.
func TestTakeResponse(t *testing.T) {
	ps := &peers{pending: map[string]chan *jsonrpc.Response{}}
	wait := func(id string) chan *jsonrpc.Response {
		ch := make(chan *jsonrpc.Response, 1)
		ps.pending[id] = ch
		return ch
	}
	a := wait("taskbridge-a")
	require.True(t, ps.takeResponse([]byte(`{"jsonrpc":"2.0","id":"taskbridge-a","result":{"ok":true}}`)))
	require.Equal(t, `{"ok":true}`, string((<-a).Result))
	b := wait("taskbridge-b")
	require.True(t, ps.takeResponse([]byte(`{"jsonrpc":"2.0","result":{}, "id" : "taskbridge-b"}`)))
	require.NotNil(t, <-b)
	for _, raw := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"taskbridge-client","version":"1"}}}}`,
		`{"jsonrpc":"2.0","id":"taskbridge-c","method":"ping"}`,
		`{"jsonrpc":"2.0","id":3,"result":{"text":"\"taskbridge-c"}}`,
		`[{"jsonrpc":"2.0","id":"taskbridge-c","result":{}}]`,
	} {
		require.False(t, ps.takeResponse([]byte(raw)), raw)
	}
}
