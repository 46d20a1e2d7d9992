package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/metrics"
	"github.com/taskbridge/taskbridge/tracing"
)

// observed turns on what an operator would: Prometheus metrics and
// OpenTelemetry tracing with a batching processor (its exporter drops
// the spans, so the bench measures making and queueing them, not a
// collector). It returns the /metrics handler and a shutdown function.
func observed(b *builder.Builder) (http.Handler, func()) {
	m, err := metrics.New(nil)
	if err != nil {
		panic(err) // a registry of its own: nothing is registered there yet
	}
	tp := tracing.NewProvider(sdktrace.WithBatcher(discard{}))
	b.WithObserver(m).WithObserver(tracing.New(tp, nil))
	return m.Handler(), func() { _ = tp.Shutdown(context.Background()) }
}

// discard is a span exporter that drops everything.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// 7. The cost of observing: task round trips on a server with metrics and
// tracing on versus the same server with them off (the library default),
// both on bbolt, rounds interleaved.
func observeOverhead(o options, tmp string, rep *report) error {
	off, err := startOurs("bbolt", filepath.Join(tmp, "observe-off.db"))
	if err != nil {
		return err
	}
	defer off.stop()
	on, err := startOurs("bbolt", filepath.Join(tmp, "observe-on.db"), "-observe")
	if err != nil {
		return err
	}
	defer on.stop()
	for _, conc := range []int{1, 64} {
		sd, err := interleaved(o, conc, "task", on, off)
		if err != nil {
			return err
		}
		mOn, mOff := sd[0].rate(), sd[1].rate()
		rep.add(row{"7", fmt.Sprintf("task round trips with metrics + tracing on vs off, %d client(s), bbolt", conc),
			withCPU(fmt.Sprintf("%.0f tasks/s (on)", mOn), sd[0].cpu()), withCPU(fmt.Sprintf("%.0f tasks/s (off)", mOff), sd[1].cpu()), fmt.Sprintf("%.3f", mOn/mOff), "≥ 0.95", met(mOn/mOff >= 0.95)})
	}
	return nil
}
