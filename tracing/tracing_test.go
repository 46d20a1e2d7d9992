package tracing_test

import (
	"bytes"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/internal/tests/obstest"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/tracing"
	"github.com/taskbridge/taskbridge/workflow"
)

// traced builds the fixture with a Tracer over an in-memory exporter (a
// synchronous processor, so spans are there when the event returns).
func traced(t *testing.T, st store.Store, extra ...taskrouter.Observer) (*obstest.Fixture, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	tr := tracing.New(tp, nil)
	f := obstest.New(t, st, func(b *builder.Builder) {
		b.WithObserver(tr)
		for _, o := range extra {
			b.WithObserver(o)
		}
	})
	return f, exp
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func spansOf(exp *tracetest.InMemoryExporter, traceID trace.TraceID) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == traceID {
			out = append(out, s)
		}
	}
	return out
}

func named(t *testing.T, spans []tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	t.Fatalf("no span %q among %q", name, names)
	return tracetest.SpanStub{}
}

// metaRecorder keeps the _meta of client step events.
type metaRecorder struct {
	mu   sync.Mutex
	meta map[string]map[string]any
}

func (m *metaRecorder) TaskEvent(taskrouter.TaskEvent)       {}
func (m *metaRecorder) HandlerEvent(taskrouter.HandlerEvent) {}
func (m *metaRecorder) StepEvent(e workflow.StepEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Attempt.By == "client" {
		m.meta[e.Step] = e.Meta
	}
}

// TestWorkflowIsOneTrace: a workflow whose client performs a step is one
// trace: the task span (derived ids, created to completed), a span per
// step attempt under it, server and client alike; the prompt result hands
// the traceparent over and client.Follow sends it back.
func TestWorkflowIsOneTrace(t *testing.T) {
	rec := &metaRecorder{meta: map[string]map[string]any{}}
	f, exp := traced(t, nil, rec)
	c := f.Client(t)
	res, doc := obstest.Handoff(t, c, "tracing")
	id := doc.TaskID
	require.Equal(t, tracing.TraceParent(id), res.Meta[tracing.MetaTraceParent], "the prompt result carries the task's traceparent")
	obstest.Finish(t, c, doc, nil)
	task := f.Wait(t, id, mcptask.StatusCompleted)

	rec.mu.Lock()
	require.Equal(t, tracing.TraceParent(id), rec.meta["review"][tracing.MetaTraceParent], "Follow forwarded the traceparent")
	rec.mu.Unlock()

	tid := tracing.TraceID(id)
	require.Equal(t, id, tid.String(), "the trace id is the task id")
	var spans []tracetest.SpanStub
	require.Eventually(t, func() bool { spans = spansOf(exp, tid); return len(spans) == 5 }, 30*time.Second, 5*time.Millisecond)
	root := named(t, spans, "taskbridge.task release")
	require.Equal(t, tracing.TaskSpanID(id), root.SpanContext.SpanID(), "the task span has the derived id")
	require.False(t, root.Parent.IsValid(), "the task span is the root")
	require.Equal(t, task.CreatedAt, root.StartTime.UTC())
	require.Equal(t, task.UpdatedAt, root.EndTime.UTC())
	require.Equal(t, codes.Ok, root.Status.Code)
	a := attrs(root)
	require.Equal(t, id, a[tracing.AttrTaskID].AsString())
	require.Equal(t, "workflow", a[tracing.AttrTaskKind].AsString())
	require.Equal(t, "completed", a[tracing.AttrTaskStatus].AsString())
	require.Equal(t, "release", a[tracing.AttrWorkflow].AsString())
	require.Equal(t, "prompts/get", a[tracing.AttrMethod].AsString())
	for _, step := range obstest.Steps {
		s := named(t, spans, "taskbridge.step release/"+step)
		require.Equal(t, root.SpanContext.SpanID(), s.Parent.SpanID(), step)
		sa := attrs(s)
		require.Equal(t, step, sa[tracing.AttrStep].AsString())
		require.Equal(t, "ok", sa[tracing.AttrStepOutcome].AsString())
		require.EqualValues(t, 1, sa[tracing.AttrStepAttempt].AsInt64())
		// (The first attempt is opened in the progress the task is created
		// with, a moment before the task's CreatedAt.)
		require.False(t, s.StartTime.Before(root.StartTime.Add(-time.Second)), "%s starts with the task: %s < %s", step, s.StartTime, root.StartTime)
		require.False(t, s.EndTime.After(root.EndTime.Add(time.Millisecond)), "%s ends inside the task", step)
		want := "server"
		if step == "review" {
			want = "client"
			require.Equal(t, trace.SpanKindClient, s.SpanKind)
		}
		require.Equal(t, want, sa[tracing.AttrStepBy].AsString(), step)
	}
}

// TestClientSpanParentsItsStep: a client that sends its own span (a child
// of the task span) gets the step span under it; a context from another
// trace becomes a link.
func TestClientSpanParentsItsStep(t *testing.T) {
	f, exp := traced(t, memory.New(nil))
	c := f.Client(t)

	_, doc := obstest.Handoff(t, c, "mine")
	tid := tracing.TraceID(doc.TaskID)
	clientSpan := trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}
	obstest.Finish(t, c, doc, &client.FollowOptions{TraceParent: fmt.Sprintf("00-%s-%s-01", tid, clientSpan)})
	f.Wait(t, doc.TaskID, mcptask.StatusCompleted)
	var review tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range spansOf(exp, tid) {
			if s.Name == "taskbridge.step release/review" {
				review = s
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, clientSpan, review.Parent.SpanID())
	require.Empty(t, review.Links)

	_, doc = obstest.Handoff(t, c, "theirs")
	other := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	obstest.Finish(t, c, doc, &client.FollowOptions{TraceParent: other})
	f.Wait(t, doc.TaskID, mcptask.StatusCompleted)
	tid = tracing.TraceID(doc.TaskID)
	require.Eventually(t, func() bool {
		for _, s := range spansOf(exp, tid) {
			if s.Name == "taskbridge.step release/review" {
				review = s
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, tracing.TaskSpanID(doc.TaskID), review.Parent.SpanID())
	require.Len(t, review.Links, 1)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", review.Links[0].SpanContext.TraceID().String())
}

// TestToolTaskSpans: a tool task gets a task span and a handler span
// under it; a failed task's span has an error status; a cancelled one
// says so.
func TestToolTaskSpans(t *testing.T) {
	f, exp := traced(t, nil)
	c := f.Client(t)
	ctx := t.Context()
	_, err := c.CallToolAndWait(ctx, "echo", map[string]any{"text": "x"}, nil)
	require.NoError(t, err)
	_, _ = c.CallToolAndWait(ctx, "fail", map[string]any{"text": "boom"}, nil)
	slow := obstest.Start(t, c, "slow", map[string]any{"text": "s", "ms": 60000})
	_, err = c.CancelTask(ctx, slow)
	require.NoError(t, err)
	f.Wait(t, slow, mcptask.StatusCancelled)

	byName := map[string][]tracetest.SpanStub{}
	require.Eventually(t, func() bool {
		byName = map[string][]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			byName[s.Name] = append(byName[s.Name], s)
		}
		return len(byName["taskbridge.handler slow"]) == 1 && len(byName["taskbridge.task slow"]) == 1
	}, 30*time.Second, 5*time.Millisecond)
	echo := byName["taskbridge.task echo"][0]
	handler := byName["taskbridge.handler echo"][0]
	require.Equal(t, echo.SpanContext.TraceID(), handler.SpanContext.TraceID())
	require.Equal(t, echo.SpanContext.SpanID(), handler.Parent.SpanID())
	require.Equal(t, "echo", attrs(echo)[tracing.AttrToolName].AsString())
	require.Equal(t, trace.SpanKindServer, echo.SpanKind)

	failed := byName["taskbridge.task fail"][0]
	require.Equal(t, codes.Error, failed.Status.Code)
	require.Equal(t, "failed", attrs(failed)[tracing.AttrTaskStatus].AsString())

	cancelled := byName["taskbridge.task slow"][0]
	require.Equal(t, "cancelled", attrs(cancelled)[tracing.AttrTaskStatus].AsString())
	require.Equal(t, slow, cancelled.SpanContext.TraceID().String())
}

// TestDerivedIDs: ids are deterministic, and ids that are not 32 hex
// characters are hashed.
func TestDerivedIDs(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef"
	require.Equal(t, id, tracing.TraceID(id).String())
	require.Equal(t, tracing.TaskSpanID(id), tracing.TaskSpanID(id))
	require.NotEqual(t, tracing.TaskSpanID(id), tracing.TaskSpanID("0123456789abcdef0123456789abcdee"))
	require.True(t, tracing.TraceID("task-7").IsValid())
	require.Equal(t, tracing.TraceID("task-7"), tracing.TraceID("task-7"))
	require.True(t, tracing.TraceID("00000000000000000000000000000000").IsValid(), "the invalid all-zero id is hashed")
	require.Equal(t, "00-"+id+"-"+tracing.TaskSpanID(id).String()+"-01", tracing.TraceParent(id))
}

// TestForeignProviderWarns: a provider without IDGenerator still gets
// spans, and the Tracer says once that they will not nest.
func TestForeignProviderWarns(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var logs bytes.Buffer
	tr := tracing.New(tp, &tracing.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 2 {
		task := &store.Task{ID: fmt.Sprintf("%032x", i+1), Status: mcptask.StatusCompleted, CreatedAt: time.Now(), UpdatedAt: time.Now()}
		tr.TaskEvent(taskrouter.TaskEvent{Kind: taskrouter.TaskUpdated, Task: task, Ended: true})
	}
	require.Len(t, exp.GetSpans(), 2)
	require.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("IDGenerator")), logs.String())
}
