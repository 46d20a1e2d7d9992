package tokenauth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	m, err := Parse(" a=alice , b=bob ")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "alice", "b": "bob"}, m)
	m, err = Parse("")
	require.NoError(t, err)
	require.Nil(t, m)
	for _, bad := range []string{"a", "=alice", "a=", "a=x,a=y"} {
		_, err := Parse(bad)
		require.Error(t, err, bad)
	}
}

func TestMiddleware(t *testing.T) {
	require.Nil(t, Middleware(nil))
	var user string
	h := Middleware(map[string]string{"tok": "alice"})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user = auth.TokenInfoFromContext(r.Context()).UserID
	}))
	for _, c := range []struct {
		header string
		code   int
	}{{"Bearer tok", 200}, {"Bearer nope", 401}, {"", 401}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		h.ServeHTTP(rec, req)
		require.Equal(t, c.code, rec.Code, c.header)
	}
	require.Equal(t, "alice", user)
	_, err := Verifier(map[string]string{"x": "y"})(context.Background(), "z", nil)
	require.True(t, errors.Is(err, auth.ErrInvalidToken))
}
