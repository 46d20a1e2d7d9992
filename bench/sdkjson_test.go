package main

// The minimal benchmark behind docs/PERFORMANCE.md's go-sdk analysis.
// go-sdk v1.8 decodes every JSON message, and params, and _meta, with
// internal/json.Unmarshal, which wraps the byte slice in a streaming
// segmentio/encoding decoder (NewDecoder(bytes.NewReader(data)) with
// DontMatchCaseInsensitiveStructFields): the decoder allocates its read
// buffer (32 KiB at least) on every call, and copies the input into it.
// Decoding the same slice in place with segmentio's Parse and the same
// flag gives the same values with none of that. Run:
//
//	go test -run '^$' -bench SDKDecode -benchmem ./bench

import (
	"bytes"
	"testing"

	sjson "github.com/segmentio/encoding/json"
	"github.com/stretchr/testify/require"
)

// A tasks/get request as a client sends it, and the struct go-sdk decodes
// its envelope into (the shape of jsonrpc2's wire message).
var sdkMessage = []byte(`{"jsonrpc":"2.0","id":42,"method":"tasks/get","params":{"taskId":"0b2d7a4c18a5e6f73f1c9e0b2d7a4c18","_meta":{"progressToken":7}}}`)

type sdkWire struct {
	VersionTag string           `json:"jsonrpc"`
	ID         any              `json:"id,omitempty"`
	Method     string           `json:"method,omitempty"`
	Params     sjson.RawMessage `json:"params,omitempty"`
	Result     sjson.RawMessage `json:"result,omitempty"`
	Error      *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// What go-sdk does today for every Unmarshal.
func BenchmarkSDKDecodeStreaming(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var w sdkWire
		dec := sjson.NewDecoder(bytes.NewReader(sdkMessage))
		dec.DontMatchCaseInsensitiveStructFields()
		if err := dec.Decode(&w); err != nil {
			b.Fatal(err)
		}
	}
}

// The proposed change: parse the slice in place, same flag, and refuse
// trailing data the way encoding/json.Unmarshal does.
func BenchmarkSDKDecodeInPlace(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var w sdkWire
		rest, err := sjson.Parse(sdkMessage, &w, sjson.DontMatchCaseInsensitiveStructFields)
		if err != nil || len(bytes.TrimSpace(rest)) > 0 {
			b.Fatal(err, string(rest))
		}
	}
}

// TestSDKDecodeSameValues: both ways decode the same message to the same
// values, so the change is safe for the SDK's callers.
func TestSDKDecodeSameValues(t *testing.T) {
	var a, c sdkWire
	dec := sjson.NewDecoder(bytes.NewReader(sdkMessage))
	dec.DontMatchCaseInsensitiveStructFields()
	require.NoError(t, dec.Decode(&a))
	rest, err := sjson.Parse(sdkMessage, &c, sjson.DontMatchCaseInsensitiveStructFields)
	require.NoError(t, err)
	require.Empty(t, bytes.TrimSpace(rest))
	require.Equal(t, a, c)
	require.Equal(t, "tasks/get", c.Method)
	require.JSONEq(t, `{"taskId":"0b2d7a4c18a5e6f73f1c9e0b2d7a4c18","_meta":{"progressToken":7}}`, string(c.Params))
}
