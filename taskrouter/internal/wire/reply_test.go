package wire

import (
	"encoding/json"
	"net"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

// EncodeResponse frames a result exactly as go-sdk's jsonrpc.EncodeMessage
// encodes the response.
func TestEncodeResponseMatchesSDK(t *testing.T) {
	ids := []jsonrpc.ID{mustID(0.0), mustID(-7.0), mustID(float64(1 << 53)), mustID(""), mustID("a<b>&\"c\"\u2028"), {}}
	results := []any{
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "<html> & \u2028 é"}}},
		map[string]any{"k": []any{1.5, nil, "x"}},
		nil,
	}
	for _, id := range ids {
		for _, res := range results {
			resp, ok := Response(id, "tools/call", res, nil)
			require.True(t, ok)
			want, err := jsonrpc.EncodeMessage(resp)
			require.NoError(t, err)
			got, err := EncodeResponse(resp)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		}
		resp, _ := Response(id, "tools/call", nil, &jsonrpc.Error{Code: -32602, Message: "bad"})
		want, _ := jsonrpc.EncodeMessage(resp)
		got, err := EncodeResponse(resp)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}

func TestAddrIsLoopback(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 80},
		&net.TCPAddr{IP: net.ParseIP("::1"), Port: 80},
		&net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.2"), Port: 80},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "eth0"},
		&net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 80},
		&net.TCPAddr{Port: 80},
		&net.UnixAddr{Name: "/tmp/x", Net: "unix"},
	} {
		require.Equal(t, isLoopback(a.String()), addrIsLoopback(a), a.String())
	}
}

func mustID(v any) jsonrpc.ID {
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		panic(err)
	}
	return id
}

// TestMarshalMetaIsJSONMarshal: a _meta naming the related task is
// written as json.Marshal writes it, whatever its id holds; any other
// _meta is json.Marshal's.
func TestMarshalMetaIsJSONMarshal(t *testing.T) {
	ids := []string{"019ac4f1d2e37a4b8c9d0e1f2a3b4c5d", "", "a b", "<x>&", `q"uote`, `back\slash`, "tab\t", "é", "\u2028", "\xff", "~!/"}
	for _, id := range ids {
		for _, add := range []map[string]any{
			mcptask.RelatedTaskMeta(id),
			{mcptask.MetaRelatedTask: mcptask.RelatedTask{TaskID: id}, "other": 1},
			{mcptask.MetaRelatedTask: map[string]string{"taskId": id}},
			{"x": mcptask.RelatedTask{TaskID: id}},
		} {
			want, err := json.Marshal(add)
			require.NoError(t, err)
			got, err := marshalMeta(add)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "%q", id)
		}
	}
}
