package wire

import (
	"testing"

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
