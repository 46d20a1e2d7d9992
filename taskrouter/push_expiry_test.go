package taskrouter_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// TestPushExpiredWebhooksCountForNoCap: a webhook for all the tasks of a
// requestor without a token (here the in-memory client's) expires after
// AnonymousTTL, and from then on it counts against no cap (the
// requestor's nor the server's) and is listed to no one, before the
// sweeper deletes its record.
func TestPushExpiredWebhooksCountForNoCap(t *testing.T) {
	for cap, set := range map[string]func(*taskrouter.PushOptions){
		"MaxWebhooksPerOwner": func(o *taskrouter.PushOptions) { o.MaxWebhooksPerOwner = 1 },
		"MaxWebhooks":         func(o *taskrouter.PushOptions) { o.MaxWebhooks = 1 },
	} {
		t.Run(cap, func(t *testing.T) {
			var ahead atomic.Int64 // how far the router's clock runs ahead
			h := newHarness(t, func(o *taskrouter.Options) {
				o.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
				o.SweepInterval = time.Hour // the test reads before any sweep
				o.Push.AnonymousTTL = time.Hour
				set(&o.Push)
			})
			rc := pushtest.New(t)
			p := h.dial(inMemory, core, nil)
			first, _ := register(t, p, map[string]any{"url": rc.URL})
			_, err := p.call(mcptask.MethodWebhooksRegister, map[string]any{"url": rc.URL})
			require.Error(t, err)
			require.EqualValues(t, mcptask.CodeTooManyTasks, rpcCode(t, err))
			require.ErrorContains(t, err, cap)

			ahead.Store(int64(2 * time.Hour)) // past AnonymousTTL
			second, _ := register(t, p, map[string]any{"url": rc.URL})
			require.NotEqual(t, first, second)
			listed := p.mustCall(mcptask.MethodWebhooksList, nil)["webhooks"].([]any)
			require.Len(t, listed, 1, "the expired webhook is listed no more")
			require.Equal(t, second, listed[0].(map[string]any)["webhookId"])
		})
	}
}
