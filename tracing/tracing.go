// Package tracing emits OpenTelemetry spans for taskbridge tasks: one span
// per task, from its creation to its terminal status, with a child span per
// workflow step attempt and per task handler run, and it hands the task's
// W3C trace context to clients so that a workflow whose client performs
// half the steps is still one trace.
//
// # How a task becomes a trace without stored state
//
// A task's trace id is its 128-bit id (32 hex characters; other ids are
// hashed to 128 bits), and its span id is derived from the id too
// (TaskSpanContext). Any process that learns of a task event (the one that
// created it, one restarted since, another replica) can therefore emit
// spans in the task's trace, parented to the task span, without storing or
// passing anything:
//
//   - the task span ("taskbridge.task <name>") is emitted once, by the
//     process that records the task's terminal status, with start =
//     Task.CreatedAt and end = the terminal write;
//   - a step span ("taskbridge.step <workflow>/<step>") is emitted for every
//     ended workflow step attempt, start = Attempt.At, duration =
//     Attempt.DurationMs, parent = the task span;
//   - a handler span ("taskbridge.handler <tool>") is emitted when a tool
//     task's handler returns, covering its run.
//
// To make the task span carry the derived span id, the TracerProvider must
// use this package's IDGenerator (NewProvider adds it). With another
// provider the task span gets a random id and Tracer logs it once: step
// spans then point at a parent that is never exported.
//
// # Crossing to the client
//
// Tracer.ResultMeta puts "traceparent" (the task span's context) into the
// _meta of every workflow prompt result, beside the handoff. A client
// sends it back in the _meta of its continuation calls (client.Follow
// does); the step span of a client-performed step is parented to the
// client's span when the client sent its own span in the task's trace,
// otherwise to the task span, with a link to any other context it sent.
//
// # Sampling
//
// Spans of one task are emitted at different times, possibly by different
// processes, each asking its own sampler. Step and handler spans have the
// task span as a sampled remote parent; keep the decisions per task
// consistent by sampling on the trace id, for example
// sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1),
// sdktrace.WithRemoteParentSampled(sdktrace.TraceIDRatioBased(0.1))).
//
// Tracing is off unless a Tracer is installed (builder.WithObserver).
package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// MetaTraceParent is the _meta key of the W3C trace context
// (https://www.w3.org/TR/trace-context/) on prompt results and
// continuation calls.
const MetaTraceParent = "traceparent"

// MetaTraceState is the _meta key of the W3C tracestate that may travel
// with MetaTraceParent.
const MetaTraceState = "tracestate"

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/taskbridge/taskbridge/tracing"

// Span names (followed by a space and the tool, workflow or step name).
const (
	SpanTask    = "taskbridge.task"
	SpanStep    = "taskbridge.step"
	SpanHandler = "taskbridge.handler"
)

// Span attribute keys.
const (
	AttrTaskID        = attribute.Key("taskbridge.task.id")
	AttrTaskKind      = attribute.Key("taskbridge.task.kind")
	AttrTaskStatus    = attribute.Key("taskbridge.task.status")
	AttrTaskMessage   = attribute.Key("taskbridge.task.status_message")
	AttrTaskDialect   = attribute.Key("taskbridge.task.dialect")
	AttrMethod        = attribute.Key("mcp.method.name")
	AttrToolName      = attribute.Key("gen_ai.tool.name")
	AttrWorkflow      = attribute.Key("taskbridge.workflow.name")
	AttrStep          = attribute.Key("taskbridge.step.name")
	AttrStepTool      = attribute.Key("taskbridge.step.tool")
	AttrStepBy        = attribute.Key("taskbridge.step.by")
	AttrStepAttempt   = attribute.Key("taskbridge.step.attempt")
	AttrStepReason    = attribute.Key("taskbridge.step.reason")
	AttrStepOutcome   = attribute.Key("taskbridge.step.outcome")
	AttrHandlerQueued = attribute.Key("taskbridge.handler.queued_ms")
)

// TraceID returns the trace id of a task: its id when that is 32 hex
// characters (taskbridge's ids), otherwise the first 16 bytes of the
// SHA-256 of the id.
func TraceID(taskID string) trace.TraceID {
	var tid trace.TraceID
	if len(taskID) == 32 {
		if _, err := hex.Decode(tid[:], []byte(taskID)); err == nil && tid.IsValid() {
			return tid
		}
	}
	sum := sha256.Sum256([]byte("taskbridge trace " + taskID))
	copy(tid[:], sum[:16])
	return tid
}

// TaskSpanID returns the span id of a task's span, derived from the id.
func TaskSpanID(taskID string) trace.SpanID {
	sum := sha256.Sum256([]byte("taskbridge task span " + taskID))
	var sid trace.SpanID
	copy(sid[:], sum[:8])
	if !sid.IsValid() {
		sid[7] = 1
	}
	return sid
}

// TaskSpanContext returns the span context of a task's span, marked
// sampled and remote: the parent of the task's step and handler spans and
// what ResultMeta hands to clients.
func TaskSpanContext(taskID string) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    TraceID(taskID),
		SpanID:     TaskSpanID(taskID),
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
}

// TraceParent returns the W3C traceparent of a task's span.
func TraceParent(taskID string) string {
	sc := TaskSpanContext(taskID)
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// idsKey carries the ids IDGenerator hands out for the next root span.
type idsKey struct{}

type ids struct {
	tid trace.TraceID
	sid trace.SpanID
}

// IDGenerator returns an sdktrace.IDGenerator that gives task spans their
// derived ids and every other span random ones. Pass it to
// sdktrace.NewTracerProvider with sdktrace.WithIDGenerator (NewProvider
// does).
func IDGenerator() sdktrace.IDGenerator { return idGen{} }

type idGen struct{}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		v := rand.Uint64()
		for i := range sid {
			sid[i] = byte(v >> (8 * i))
		}
	}
	return sid
}

// NewIDs implements sdktrace.IDGenerator.
func (idGen) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if x, ok := ctx.Value(idsKey{}).(ids); ok {
		return x.tid, x.sid
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		a, b := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			tid[i], tid[8+i] = byte(a>>(8*i)), byte(b>>(8*i))
		}
	}
	return tid, randomSpanID()
}

// NewSpanID implements sdktrace.IDGenerator.
func (idGen) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if x, ok := ctx.Value(idsKey{}).(ids); ok && x.tid == traceID {
		return x.sid
	}
	return randomSpanID()
}

// NewProvider returns an SDK TracerProvider configured by opts that uses
// IDGenerator, ready for New.
func NewProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append(opts, sdktrace.WithIDGenerator(IDGenerator()))...)
}

// Options configure New; nil means the defaults.
type Options struct {
	// Logger reports a TracerProvider that does not use IDGenerator; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Tracer emits task, step and handler spans. It implements
// taskrouter.Observer and workflow.StepObserver, and its ResultMeta fits
// workflow.Options.ResultMeta; builder.WithObserver wires all three.
type Tracer struct {
	tracer trace.Tracer
	log    *slog.Logger
	warn   sync.Once
}

// New returns a Tracer that makes spans with tp (use NewProvider, or add
// IDGenerator to your provider). A nil opts means the defaults.
func New(tp trace.TracerProvider, opts *Options) *Tracer {
	t := &Tracer{tracer: tp.Tracer(ScopeName)}
	if opts != nil {
		t.log = opts.Logger
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	return t
}

// ResultMeta returns the _meta entries for a workflow task's prompt result:
// the task span's traceparent.
func (t *Tracer) ResultMeta(task *store.Task) map[string]any {
	return map[string]any{MetaTraceParent: TraceParent(task.ID)}
}

func taskName(task *store.Task) string {
	if task.Request.Name != "" {
		return task.Request.Name
	}
	return task.Request.Method
}

// TaskEvent emits the task span when the task reaches its terminal status
// (taskrouter.Observer).
func (t *Tracer) TaskEvent(e taskrouter.TaskEvent) {
	if !e.Ended { // an update, or the create of a task that ended within the instant window
		return
	}
	task := e.Task
	want := TaskSpanContext(task.ID)
	ctx := context.WithValue(context.Background(), idsKey{}, ids{want.TraceID(), want.SpanID()})
	kind := task.Labels[taskrouter.LabelKind]
	attrs := []attribute.KeyValue{
		AttrTaskID.String(task.ID),
		AttrTaskKind.String(kind),
		AttrTaskStatus.String(string(task.Status)),
		AttrMethod.String(task.Request.Method),
	}
	if d := task.Labels[taskrouter.LabelDialect]; d != "" {
		attrs = append(attrs, AttrTaskDialect.String(d))
	}
	if kind == taskrouter.KindWorkflow {
		attrs = append(attrs, AttrWorkflow.String(task.Request.Name))
	} else if task.Request.Name != "" {
		attrs = append(attrs, AttrToolName.String(task.Request.Name))
	}
	if task.StatusMessage != "" {
		attrs = append(attrs, AttrTaskMessage.String(task.StatusMessage))
	}
	_, span := t.tracer.Start(ctx, SpanTask+" "+taskName(task), trace.WithNewRoot(), trace.WithTimestamp(task.CreatedAt),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	if got := span.SpanContext(); span.IsRecording() && got.SpanID() != want.SpanID() {
		t.warn.Do(func() {
			t.log.Warn("tracing: the TracerProvider does not use tracing.IDGenerator; task spans get random ids, so step spans will not nest under them")
		})
	}
	switch task.Status {
	case mcptask.StatusFailed:
		msg := task.StatusMessage
		if task.Error != nil && msg == "" {
			msg = task.Error.Message
		}
		span.SetStatus(codes.Error, msg)
	case mcptask.StatusCompleted:
		span.SetStatus(codes.Ok, "")
	}
	span.End(trace.WithTimestamp(task.UpdatedAt))
}

// HandlerEvent emits a handler span when a tool task's handler returns
// (taskrouter.Observer).
func (t *Tracer) HandlerEvent(e taskrouter.HandlerEvent) {
	if e.Running {
		return
	}
	end := time.Now()
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), TaskSpanContext(e.TaskID))
	_, span := t.tracer.Start(ctx, SpanHandler+" "+e.Tool, trace.WithTimestamp(end.Add(-e.Duration)),
		trace.WithAttributes(AttrTaskID.String(e.TaskID), AttrToolName.String(e.Tool)))
	span.End(trace.WithTimestamp(end))
}

// StepEvent emits a step span for an ended workflow step attempt
// (workflow.StepObserver). A plain workflow prompt's steps (no task) have
// no trace of their own and are skipped.
func (t *Tracer) StepEvent(e workflow.StepEvent) {
	if e.TaskID == "" {
		return
	}
	a := e.Attempt
	taskSC := TaskSpanContext(e.TaskID)
	parent := taskSC
	var links []trace.Link
	if a.By == string(mcptask.ExecClient) {
		if sc := clientContext(e.Meta); sc.IsValid() && sc.SpanID() != taskSC.SpanID() {
			if sc.TraceID() == taskSC.TraceID() {
				parent = sc // the client's own span in the task's trace
			} else {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
	}
	attrs := []attribute.KeyValue{
		AttrTaskID.String(e.TaskID),
		AttrWorkflow.String(e.Workflow),
		AttrStep.String(e.Step),
		AttrStepTool.String(e.Tool),
		AttrStepBy.String(a.By),
		AttrStepAttempt.Int(a.N),
		AttrStepReason.String(a.Reason),
		AttrStepOutcome.String(a.Outcome),
	}
	kind := trace.SpanKindInternal
	if a.By == string(mcptask.ExecClient) {
		kind = trace.SpanKindClient
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	_, span := t.tracer.Start(ctx, SpanStep+" "+e.Workflow+"/"+e.Step, trace.WithTimestamp(a.At),
		trace.WithSpanKind(kind), trace.WithAttributes(attrs...), trace.WithLinks(links...))
	if a.Outcome == workflow.OutcomeError {
		span.SetStatus(codes.Error, a.Error)
	}
	span.End(trace.WithTimestamp(a.At.Add(time.Duration(a.DurationMs) * time.Millisecond)))
}

// clientContext reads a W3C trace context from a request's _meta.
func clientContext(meta map[string]any) trace.SpanContext {
	tp, _ := meta[MetaTraceParent].(string)
	if tp == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{MetaTraceParent: tp}
	if ts, ok := meta[MetaTraceState].(string); ok {
		carrier[MetaTraceState] = ts
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}
