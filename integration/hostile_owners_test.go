package integration

// The hostile-input suite's families of issue 41: what one client may do
// to another's webhooks, deliveries, queue places and debounced starts,
// with real HTTP clients (anonymous stateless, anonymous with sessions,
// two bearer tokens), and the smaller findings (resumption ids, numbers
// at their extremes, a limit's wait in a status).

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

// TestHostileStreamResumeIDs: a GET resuming a tasks/stream answers with
// the request id its Last-Event-ID carries; a forged one must be an id a
// POST may carry (a string, or an integer within ±(2^53−1)). An object,
// null, 1e300, 2.5, 2^53+1, true, an array or undecodable bytes are a 400
// with -32600 and a null id, never echoed; a forged string id is
// resumed as the server would have written it.
func TestHostileStreamResumeIDs(t *testing.T) {
	s := newRelServer(t, relServerOptions{})
	ctx := relCtx(t, time.Minute)
	ex := newRelClient(s.url, newRelHTTPClient(2), relExt, "")
	id := relTaskID(ex.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"label": "r"}}))
	require.NotEmpty(t, id)
	sse := openSSE(t, s.url, mcptask.Extension, id)
	primer := sse.raw(t)
	_ = sse.body.Close()
	parts := strings.Split(primer.id, ".")
	require.Len(t, parts, 5, "tbs1.<seq>.<dialect>.<task>.<request id>: %s", primer.id)
	forge := func(reqID string) string {
		return strings.Join(append(parts[:4:4], base64.RawURLEncoding.EncodeToString([]byte(reqID))), ".")
	}
	get := func(last string) (*http.Response, []byte) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", last)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, body
	}
	for _, bad := range []string{`{"a":1}`, `null`, `1e300`, `2.5`, `9007199254740993`, `-9007199254740993`, `true`, `[1]`, `"unterminated`, ``} {
		resp, body := get(forge(bad))
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "id %s: %s", bad, body)
		var reply struct {
			ID    json.RawMessage `json:"id"`
			Error *relRPCError    `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &reply), "id %s: %s", bad, body)
		require.Equal(t, "null", string(reply.ID), "id %s: nothing of the header is echoed", bad)
		require.NotNil(t, reply.Error)
		require.EqualValues(t, mcptask.CodeInvalidRequest, reply.Error.Code)
		require.Contains(t, reply.Error.Message, "Last-Event-ID")
	}
	// Bytes that are no base64 at all in the request id's place.
	resp, _ := get(strings.Join(append(parts[:4:4], "!!"), "."))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	// Ids a POST may carry resume the stream and answer with that id.
	for _, good := range []string{`"forged-but-fine"`, `9007199254740991`, `-3`} {
		resp, body := get(forge(good))
		require.Equal(t, http.StatusOK, resp.StatusCode, "id %s: %s", good, body)
		require.Contains(t, string(body), `"id":`+good, "id %s", good)
	}
}
