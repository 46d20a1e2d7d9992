// Package metrics exports taskbridge's task engine and workflow activity as
// Prometheus metrics.
//
// A *Metrics is an observer: give it to the engine (taskrouter.Options.Observer,
// or builder.WithObserver, which also wires the workflow steps and calls
// Attach), then serve Handler at /metrics:
//
//	m, err := metrics.New(nil)
//	srv, _ := builder.New("demo", "1").WithObserver(m).Build(ctx)
//	http.Handle("/metrics", m.Handler())
//
// Nothing is collected unless a Metrics is installed: the library has no
// global registry and no metrics by default.
//
// # Metrics
//
// Counters and histograms fed by the engine's events (this process's
// writes):
//
//	taskbridge_tasks_created_total{kind,name}                 tasks created
//	taskbridge_tasks_finished_total{kind,name,status}         tasks that reached completed, failed or cancelled
//	taskbridge_task_duration_seconds{kind,name,status}        creation to terminal status (histogram)
//	taskbridge_tasks_deleted_total{kind}                      tasks the ttl sweeper deleted
//	taskbridge_handler_duration_seconds{tool}                 task handler run time (histogram)
//	taskbridge_handler_queue_seconds{tool}                    wait for a running slot (histogram)
//	taskbridge_workflow_step_attempts_total{workflow,step,by,outcome}  step attempts that ended
//	taskbridge_workflow_step_duration_seconds{workflow,step,by}        step attempt duration (histogram)
//
// Gauges read at scrape time from the router (Attach):
//
//	taskbridge_tasks_pending          tasks queued or running in this process
//	taskbridge_handlers_running       task handlers running
//	taskbridge_tasks_queued           tasks waiting for a running slot
//	taskbridge_result_waiters         tasks/result requests waiting for a task to end
//	taskbridge_tracked_work           in-request work (workflow server steps) running
//	taskbridge_tasks_stored{status}   tasks in the store by status (store.Counts, O(1))
//	taskbridge_workflow_tasks_active{workflow,version}  active workflow tasks per workflow version
//	                                  (counted from the store's query index at most every 10 s, up
//	                                  to 100,000 tasks): watch a version drain before retiring it
//	taskbridge_queue_runs{queue,state}  runs holding a place on each queue (state "holding") and
//	                                  waiting for one ("waiting"), from the store (store.QueueCounts)
//
// and, when the store reports write statistics (it implements
// store.StatsReporter, as bboltstore and postgres do):
//
//	taskbridge_store_commits_total                  write transactions committed
//	taskbridge_store_commit_duration_seconds        commit latency (summary: _sum and _count)
//	taskbridge_store_commit_writes                  writes per commit (summary: _sum writes, _count commits)
//	taskbridge_store_commit_writes_max              the largest commit so far
//	taskbridge_store_writes_failed_total            write operations that returned an error
//	taskbridge_store_commit_errors_total            failed commits
//
// Labels are low-cardinality by construction: kind is "tool" or
// "workflow", name is the tool or workflow name, status one of the three
// terminal statuses, by "server" or "client", outcome "ok" or "error". No
// task id, owner or argument is ever a label. Names come from the
// registered tools and workflows; past Options.MaxNames distinct values
// per label, further ones are counted as "other".
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// DefaultNamespace prefixes every metric name.
const DefaultNamespace = "taskbridge"

// DefaultMaxNames is the default Options.MaxNames.
const DefaultMaxNames = 256

// OtherName replaces label values past Options.MaxNames.
const OtherName = "other"

// DefaultDurationBuckets are the task and step duration histogram buckets,
// in seconds: tasks last from milliseconds to an hour.
var DefaultDurationBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Options configure New; nil means the defaults.
type Options struct {
	// Registerer receives the collectors; nil means a new registry of
	// its own (served by Handler). When it is also a prometheus.Gatherer
	// (a *prometheus.Registry), Handler serves it.
	Registerer prometheus.Registerer
	// Namespace prefixes the metric names; "" means DefaultNamespace.
	Namespace string
	// MaxNames bounds the distinct values of each of the name, tool,
	// workflow and step labels; later values are counted as OtherName.
	// Zero means DefaultMaxNames.
	MaxNames int
	// Buckets are the duration histograms' buckets in seconds; nil means
	// DefaultDurationBuckets.
	Buckets []float64
}

// Metrics collects taskbridge metrics. It implements taskrouter.Observer
// and workflow.StepObserver; its methods are safe for concurrent use and
// cheap (a few map lookups and atomic adds).
type Metrics struct {
	reg      prometheus.Registerer
	gatherer prometheus.Gatherer
	ns       string
	names    *limiter

	created   *prometheus.CounterVec
	finished  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	deleted   *prometheus.CounterVec
	handler   *prometheus.HistogramVec
	queue     *prometheus.HistogramVec
	steps     *prometheus.CounterVec
	stepTimes *prometheus.HistogramVec

	attachOnce sync.Once
}

// New returns metrics registered with opts.Registerer (or a registry of
// their own). A nil opts means the defaults. It fails, naming the field,
// on a negative MaxNames or Buckets that do not increase, and when the
// names are already registered with Registerer.
func New(opts *Options) (*Metrics, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	m := &Metrics{reg: o.Registerer, ns: o.Namespace}
	if m.ns == "" {
		m.ns = DefaultNamespace
	}
	if m.reg == nil {
		r := prometheus.NewRegistry()
		m.reg, m.gatherer = r, r
	} else if g, ok := m.reg.(prometheus.Gatherer); ok {
		m.gatherer = g
	}
	max := o.MaxNames
	if max == 0 {
		max = DefaultMaxNames
	}
	m.names = newLimiter(max)
	buckets := o.Buckets
	if buckets == nil {
		buckets = DefaultDurationBuckets
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: m.ns, Name: name, Help: help}, labels)
	}
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: m.ns, Name: name, Help: help, Buckets: buckets}, labels)
	}
	m.created = counter("tasks_created_total", "Tasks created, by kind (tool or workflow) and tool or workflow name.", "kind", "name")
	m.finished = counter("tasks_finished_total", "Tasks that reached a terminal status (completed, failed, cancelled).", "kind", "name", "status")
	m.duration = hist("task_duration_seconds", "Time from a task's creation to its terminal status.", "kind", "name", "status")
	m.deleted = counter("tasks_deleted_total", "Tasks deleted by the ttl sweeper.", "kind")
	m.handler = hist("handler_duration_seconds", "How long task handlers ran.", "tool")
	m.queue = hist("handler_queue_seconds", "How long tasks waited for a running slot before their handler started.", "tool")
	m.steps = counter("workflow_step_attempts_total", "Workflow step attempts that ended, by who performed them and outcome.", "workflow", "step", "by", "outcome")
	m.stepTimes = hist("workflow_step_duration_seconds", "Duration of workflow step attempts.", "workflow", "step", "by")
	collectors := []prometheus.Collector{m.created, m.finished, m.duration, m.deleted, m.handler, m.queue, m.steps, m.stepTimes}
	for i, c := range collectors {
		if err := m.reg.Register(c); err != nil {
			for _, done := range collectors[:i] {
				m.reg.Unregister(done) // none or all
			}
			return nil, fmt.Errorf("metrics: registering with Registerer (are taskbridge's metrics of Namespace %q registered there already?): %w", m.ns, err)
		}
	}
	return m, nil
}

// validate refuses what cannot work, naming the field.
func (o Options) validate() error {
	var errs []error
	if o.MaxNames < 0 {
		errs = append(errs, fmt.Errorf("metrics: MaxNames is negative (%d)", o.MaxNames))
	}
	for i := 1; i < len(o.Buckets); i++ {
		if o.Buckets[i] <= o.Buckets[i-1] {
			errs = append(errs, fmt.Errorf("metrics: Buckets must increase: %g follows %g", o.Buckets[i], o.Buckets[i-1]))
			break
		}
	}
	return errors.Join(errs...)
}

// Handler serves the registry in the Prometheus text format. With a
// Registerer that is not a Gatherer, it serves prometheus.DefaultGatherer.
func (m *Metrics) Handler() http.Handler {
	g := m.gatherer
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// Gatherer returns the registry Handler serves.
func (m *Metrics) Gatherer() prometheus.Gatherer {
	if m.gatherer == nil {
		return prometheus.DefaultGatherer
	}
	return m.gatherer
}

// Attach registers the gauges read from r at scrape time: r.Stats(), the
// store's counts by status, and, when r's store is a store.StatsReporter,
// its write statistics. Only the first call has an effect.
// builder.WithObserver calls it after building the router.
func (m *Metrics) Attach(r *taskrouter.Router) {
	m.attachOnce.Do(func() { m.reg.MustRegister(newRouterCollector(m.ns, r)) })
}

func kindOf(t *store.Task) string {
	if k := t.Labels[taskrouter.LabelKind]; k != "" {
		return k
	}
	return taskrouter.KindTool
}

// TaskEvent counts creations, ends and deletions (taskrouter.Observer).
func (m *Metrics) TaskEvent(e taskrouter.TaskEvent) {
	t := e.Task
	kind := m.names.get("kind", kindOf(t))
	switch e.Kind {
	case taskrouter.TaskCreated:
		m.created.WithLabelValues(kind, m.names.get("name", t.Request.Name)).Inc()
	case taskrouter.TaskDeleted:
		m.deleted.WithLabelValues(kind).Inc()
	}
	// A task ends on an update, or on its create when its handler returned
	// within the instant window.
	if e.Ended {
		name, status := m.names.get("name", t.Request.Name), string(t.Status)
		m.finished.WithLabelValues(kind, name, status).Inc()
		m.duration.WithLabelValues(kind, name, status).Observe(max(0, t.UpdatedAt.Sub(t.CreatedAt).Seconds()))
	}
}

// HandlerEvent records handler run and queue times (taskrouter.Observer).
func (m *Metrics) HandlerEvent(e taskrouter.HandlerEvent) {
	tool := m.names.get("tool", e.Tool)
	if e.Running {
		m.queue.WithLabelValues(tool).Observe(e.Queued.Seconds())
		return
	}
	m.handler.WithLabelValues(tool).Observe(e.Duration.Seconds())
}

// StepEvent counts workflow step attempts (workflow.StepObserver).
func (m *Metrics) StepEvent(e workflow.StepEvent) {
	wf, step := m.names.get("workflow", e.Workflow), m.names.get("step", e.Workflow+"\x00"+e.Step)
	if step != OtherName {
		step = e.Step
	}
	by, outcome := e.Attempt.By, e.Attempt.Outcome
	m.steps.WithLabelValues(wf, step, by, outcome).Inc()
	m.stepTimes.WithLabelValues(wf, step, by).Observe(float64(e.Attempt.DurationMs) / 1000)
}

// limiter caps the distinct values of each label.
type limiter struct {
	max  int
	mu   sync.RWMutex
	seen map[string]map[string]struct{}
}

func newLimiter(max int) *limiter {
	return &limiter{max: max, seen: map[string]map[string]struct{}{}}
}

// get returns v, or OtherName once label has max other values.
func (l *limiter) get(label, v string) string {
	l.mu.RLock()
	_, ok := l.seen[label][v]
	l.mu.RUnlock()
	if ok {
		return v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.seen[label]
	if set == nil {
		set = map[string]struct{}{}
		l.seen[label] = set
	}
	if _, ok := set[v]; ok {
		return v
	}
	if len(set) >= l.max {
		return OtherName
	}
	set[v] = struct{}{}
	return v
}

// routerCollector reads the router's and the store's gauges at scrape
// time.
type routerCollector struct {
	r                                                   *taskrouter.Router
	pending, running, queued, waiters, tracked, stored  *prometheus.Desc
	commits, commitDur, commitWrites, commitMax, failed *prometheus.Desc
	commitErrs, versions, queues                        *prometheus.Desc

	mu      sync.Mutex
	counted time.Time // when census was read
	census  []taskrouter.LabelCount
}

// Census bounds: how often, and over how many tasks, the active workflow
// tasks per version are counted.
const (
	censusEvery = 10 * time.Second
	censusMax   = 100000
)

func newRouterCollector(ns string, r *taskrouter.Router) *routerCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, nil)
	}
	return &routerCollector{
		r:            r,
		pending:      d("tasks_pending", "Tasks queued or running in this process."),
		running:      d("handlers_running", "Task handlers running in this process."),
		queued:       d("tasks_queued", "Tasks waiting for a running slot in this process."),
		waiters:      d("result_waiters", "tasks/result requests waiting for a task to end."),
		tracked:      d("tracked_work", "In-request work (workflow server steps) running."),
		stored:       d("tasks_stored", "Tasks in the store by status.", "status"),
		commits:      d("store_commits_total", "Write transactions the store committed."),
		commitDur:    d("store_commit_duration_seconds", "Time the store spent committing (writing, and syncing or waiting for the database) transactions."),
		commitWrites: d("store_commit_writes", "Write operations per committed store transaction (sum: writes, count: commits)."),
		commitMax:    d("store_commit_writes_max", "The most write operations one store transaction committed."),
		failed:       d("store_writes_failed_total", "Write operations the store refused or failed."),
		commitErrs:   d("store_commit_errors_total", "Store commits that failed."),
		versions:     d("workflow_tasks_active", "Active (working or input_required) workflow tasks by workflow and version.", "workflow", "version"),
		queues:       d("queue_runs", "Runs holding a place on a queue (state holding) or waiting for one (state waiting).", "queue", "state"),
	}
}

// workflowCensus returns the active workflow tasks per version, read at
// most every censusEvery.
func (c *routerCollector) workflowCensus(ctx context.Context) []taskrouter.LabelCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.counted) < censusEvery {
		return c.census
	}
	counts, _, err := c.r.ActiveByLabels(ctx, taskrouter.KindWorkflow, []string{workflow.LabelWorkflow, workflow.LabelVersion}, censusMax)
	if err == nil {
		c.census, c.counted = counts, time.Now()
	}
	return c.census
}

// Describe implements prometheus.Collector.
func (c *routerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.running, c.queued, c.waiters, c.tracked, c.stored,
		c.commits, c.commitDur, c.commitWrites, c.commitMax, c.failed, c.commitErrs, c.versions, c.queues} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *routerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.r.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.pending, float64(s.Pending))
	gauge(c.running, float64(s.Running))
	gauge(c.queued, float64(s.Queued))
	gauge(c.waiters, float64(s.Waiters))
	gauge(c.tracked, float64(s.Tracked))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if counts, err := c.r.Store().Counts(ctx); err == nil {
		for _, st := range store.AllStatuses() {
			gauge(c.stored, float64(counts[st]), string(st))
		}
	}
	for _, lc := range c.workflowCensus(ctx) {
		gauge(c.versions, float64(lc.N), lc.Values...)
	}
	if qs, err := c.r.Store().QueueCounts(ctx); err == nil {
		for _, q := range qs {
			gauge(c.queues, float64(q.Holding), q.Queue, "holding")
			gauge(c.queues, float64(q.Waiting), q.Queue, "waiting")
		}
	}
	if sr, ok := c.r.Store().(store.StatsReporter); ok {
		bs := sr.Stats()
		ch <- prometheus.MustNewConstMetric(c.commits, prometheus.CounterValue, float64(bs.Commits))
		ch <- prometheus.MustNewConstSummary(c.commitDur, bs.Commits, bs.CommitTime.Seconds(), nil)
		ch <- prometheus.MustNewConstSummary(c.commitWrites, bs.Commits, float64(bs.OpsCommitted), nil)
		gauge(c.commitMax, float64(bs.MaxOpsPerCommit))
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(bs.OpsFailed))
		ch <- prometheus.MustNewConstMetric(c.commitErrs, prometheus.CounterValue, float64(bs.CommitErrors))
	}
}
