package storerpc_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/storerpc"
	"github.com/taskbridge/taskbridge/mcptask"
)

func TestMapping(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	m := storerpc.Mapping{
		{Err: errA, Code: mcptask.CodeInvalidParams, Message: "it is a"},
		{Err: errB, Code: mcptask.CodeInvalidParams},
	}
	cases := []struct {
		name string
		err  error
		code int64
		msg  string
	}{
		{"worded", fmt.Errorf("x: %w", errA), mcptask.CodeInvalidParams, "it is a"},
		{"own text", fmt.Errorf("x: %w", errB), mcptask.CodeInvalidParams, "x: b"},
		{"first rule wins", errors.Join(errB, errA), mcptask.CodeInvalidParams, "it is a"},
		{"no rule", errors.New("c"), mcptask.CodeInternalError, "task store: c"},
		{"JSON-RPC", &jsonrpc.Error{Code: 7, Message: "m"}, 7, "m"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var je *jsonrpc.Error
			require.True(t, errors.As(m.Error(c.err), &je))
			require.Equal(t, c.code, je.Code)
			require.Equal(t, c.msg, je.Message)
		})
	}
	wrapped := fmt.Errorf("x: %w", &jsonrpc.Error{Code: 7})
	require.True(t, m.Error(wrapped) == wrapped)
	// A message with a verb in it is not a format.
	pct := storerpc.Mapping{{Err: errA, Code: 1, Message: "100%s"}}
	require.Equal(t, "100%s", pct.Error(errA).(*jsonrpc.Error).Message)
}
