package dashboard_test

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// TestOverviewSeparatesDeliveries: the overview lists the tasks people and
// programs started; a webhook's registration and its deliveries (records
// the engine keeps as tasks) are listed apart (show=deliveries), so that a
// webhook watching every task does not bury them. The oldest working
// task is a user's, with its status line.
func TestOverviewSeparatesDeliveries(t *testing.T) {
	e := newEnv(t, usersOptions())
	rc := pushtest.New(t)
	ctx := t.Context()
	hook, _, err := e.f.Srv.Router.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: rc.URL, Owner: "*"})
	require.NoError(t, err)
	done := e.ownedTask(t, "user:alice", "echo")
	msg := "waiting for the client to call tool \"review\""
	_, err = e.f.Srv.Router.Update(ctx, done.ID, store.Update{Status: mcptask.StatusCompleted, Result: []byte(`{"content":[]}`)})
	require.NoError(t, err)
	waiting := e.ownedTask(t, "user:alice", "flow")
	_, err = e.f.Srv.Router.Update(ctx, waiting.ID, store.Update{StatusMessage: &msg})
	require.NoError(t, err)
	rc.Wait(t, 1) // the end of done was delivered: its record exists

	code, body := e.get(t, adminToken, "/dashboard/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, done.ID)
	require.NotContains(t, body, hook.WebhookID, "no webhook records among the tasks")
	require.Regexp(t, `id="oldest">`+waiting.ID[:12]+`<`, body)
	require.Contains(t, body, `working for`)
	require.Contains(t, body, `id="oldest-msg">waiting for the client to call tool &#34;review&#34;<`, "the oldest working task says what it waits for")

	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body = e.get(t, adminToken, "/dashboard/?show=deliveries")
		if time.Now().After(deadline) || regexpCount(body, `data-task-id=`) >= 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotContains(t, body, `data-task-id="`+done.ID+`"`, "deliveries only")
	require.GreaterOrEqual(t, regexpCount(body, `data-task-id=`), 2, "the registration and the delivery")
	_, body = e.get(t, adminToken, "/dashboard/?show=all")
	require.Contains(t, body, `data-task-id="`+done.ID+`"`)
}

// regexpCount counts the matches of expr in s.
func regexpCount(s, expr string) int { return len(regexp.MustCompile(expr).FindAllStringIndex(s, -1)) }
