package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/dashboard"
	"github.com/taskbridge/taskbridge/metrics"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/tracing"
)

// EnvDashboardToken is the environment variable read for -dashboard-token.
const EnvDashboardToken = "TASKBRIDGE_DASHBOARD_TOKEN"

// observers are what serve turns on: metrics, traces (with -trace
// stdout) and the dashboard's live feed (all off in the library, on in
// this example).
type observers struct {
	metrics  *metrics.Metrics
	feed     *dashboard.Feed
	provider *sdktrace.TracerProvider // nil without spans (-trace none)
}

// observe adds metrics, tracing (exported as traceTo says) and the
// dashboard feed to b.
func observe(b *builder.Builder, traceTo string, stderr io.Writer) (*observers, error) {
	m, err := metrics.New(nil)
	if err != nil {
		return nil, err
	}
	o := &observers{metrics: m, feed: dashboard.NewFeed()}
	b.WithObserver(o.metrics).WithObserver(o.feed)
	switch traceTo {
	case "none", "":
		// No spans (nothing would export them: making them cost 5% of a
		// task round trip); clients still get each workflow task's
		// traceparent, derived from its id.
		b.WithObserver(traceParents{})
	case "stdout":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(stderr))
		if err != nil {
			return nil, err
		}
		o.provider = tracing.NewProvider(sdktrace.WithBatcher(exp))
		b.WithObserver(tracing.New(o.provider, nil))
	default:
		return nil, fmt.Errorf("serve: -trace %q: want none or stdout", traceTo)
	}
	return o, nil
}

// traceParents hands clients each workflow task's traceparent
// (tracing.TraceParent, what a tracer's ResultMeta hands out) and makes no
// spans: -trace none.
type traceParents struct{}

func (traceParents) TaskEvent(taskrouter.TaskEvent)       {}
func (traceParents) HandlerEvent(taskrouter.HandlerEvent) {}

// ResultMeta is builder.ResultMetaSource's.
func (traceParents) ResultMeta(t *store.Task) map[string]any {
	return map[string]any{tracing.MetaTraceParent: tracing.TraceParent(t.ID)}
}

// shutdown flushes the spans still buffered.
func (o *observers) shutdown() {
	if o.provider == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.provider.Shutdown(ctx)
}

// newDashboard is the dashboard at /dashboard/: the admin token sees every
// task; each user of -tokens signs in with their own token and sees the
// tasks they own ("user:<USER>", the owner the engine gives their MCP
// requests), and may cancel them. With no token at all it is off (404).
func newDashboard(srv *builder.Server, feed *dashboard.Feed, admin string, users map[string]string) (*dashboard.Dashboard, error) {
	viewers := map[string]dashboard.Viewer{}
	for token, user := range users {
		viewers[token] = dashboard.Viewer{Name: user, Owner: "user:" + user, CanCancel: true}
	}
	opts := &dashboard.Options{Token: admin, Feed: feed, Forker: srv.Bridge}
	if len(viewers) > 0 {
		opts.Authenticate = dashboard.TokenViewers(viewers)
	}
	return dashboard.New(srv.Router, opts)
}
