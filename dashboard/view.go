package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// maxQueryCalls bounds the store queries one table page may take (each
// examines at most store.QueryScanBudget index entries).
const maxQueryCalls = 8

// maxShownJSON bounds how much of one variable or result a page shows.
const maxShownJSON = 16 << 10

// taskRow is one task in a table.
type taskRow struct {
	ID, Name, Kind, Status, Owner, Message string
	Created, Updated                       time.Time
	// Parent and ParentStep are, for a child workflow's task, the
	// workflow task whose step started it and that step's path.
	Parent, ParentStep string
}

func rowOf(t *store.Task) taskRow {
	kind := t.Labels[taskrouter.LabelKind]
	if kind == "" {
		kind = taskrouter.KindTool
	}
	return taskRow{ID: t.ID, Name: t.Request.Name, Kind: kind, Status: string(t.Status), Owner: t.Owner,
		Message: clip(t.StatusMessage, 140), Created: t.CreatedAt, Updated: t.UpdatedAt,
		Parent: t.Labels[workflow.LabelParent], ParentStep: t.Labels[workflow.LabelParentStep]}
}

type countItem struct {
	Status string
	N      int
}

type filter struct {
	Status, Name, Owner string
	// Show picks the rows: "" (the tasks people and programs started),
	// "deliveries" (push webhooks' registrations and deliveries, which
	// the engine keeps as tasks), "all".
	Show string
}

// Values of filter.Show.
const (
	showTasks      = ""
	showDeliveries = "deliveries"
	showAll        = "all"
)

// isDelivery reports whether t is a record of push, not a user's task: a
// webhook's registration or one of its deliveries.
func isDelivery(t *store.Task) bool {
	return t.Labels[taskrouter.LabelKind] == taskrouter.KindPush || t.Request.Method == mcptask.MethodWebhooksRegister
}

// shows reports whether the rows of f.Show include t.
func (f filter) shows(t *store.Task) bool {
	switch f.Show {
	case showAll:
		return true
	case showDeliveries:
		return isDelivery(t)
	}
	return !isDelivery(t)
}

type overviewData struct {
	page
	Counts      []countItem
	Total       int
	Rates       []Rate
	HasRates    bool
	LastCreated int
	LastDone    int
	RateMax     int
	Oldest      *taskRow
	Filter      filter
	Statuses    []string
	Rows        []taskRow
	NextURL     string
	FirstURL    string
	Paged       bool
	Error       string
	Now         time.Time
	// Versions counts the active workflow tasks per workflow version
	// (admins): what an operator watches drain before retiring a version.
	Versions         []versionRow
	VersionsComplete bool
}

// versionRow is one workflow version's active tasks.
type versionRow struct {
	Workflow, Version string
	Active            int
}

// versionCensus is a cached count of active workflow tasks per version.
type versionCensus struct {
	at       time.Time
	rows     []versionRow
	complete bool
}

// maxCensus bounds the tasks one census reads; censusTTL how long it is
// reused (the overview refreshes live).
const (
	maxCensus = 100000
	censusTTL = 10 * time.Second
)

// versionCensus returns the active workflow tasks per version, counted at
// most every censusTTL.
func (d *Dashboard) versionCensus(ctx context.Context) versionCensus {
	d.versionsMu.Lock()
	defer d.versionsMu.Unlock()
	if time.Since(d.versions.at) < censusTTL {
		return d.versions
	}
	counts, complete, err := d.r.ActiveByLabels(ctx, taskrouter.KindWorkflow, []string{workflow.LabelWorkflow, workflow.LabelVersion}, maxCensus)
	if err != nil {
		return d.versions
	}
	c := versionCensus{at: time.Now(), complete: complete}
	for _, lc := range counts {
		v := lc.Values[1]
		if v == "" {
			v = "(recorded before versions)"
		}
		c.rows = append(c.rows, versionRow{Workflow: lc.Values[0], Version: v, Active: lc.N})
	}
	d.versions = c
	return c
}

// overview renders the overview, or its live part (?partial=1).
func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, v Viewer) {
	ctx := r.Context()
	q := r.URL.Query()
	data := overviewData{page: d.page(v, "Tasks"), Now: time.Now(),
		Filter: filter{Status: q.Get("status"), Name: strings.TrimSpace(q.Get("name")), Owner: strings.TrimSpace(q.Get("owner"))}}
	switch sh := q.Get("show"); sh {
	case showDeliveries, showAll:
		data.Filter.Show = sh
	}
	for _, s := range store.AllStatuses() {
		data.Statuses = append(data.Statuses, string(s))
	}
	query := store.Query{Name: data.Filter.Name, Cursor: q.Get("cursor"), Limit: d.opts.PageSize}
	if data.Filter.Status != "" {
		query.Statuses = []mcptask.Status{mcptask.Status(data.Filter.Status)}
	}
	switch {
	case !v.Admin:
		query.Owner = v.Owner
		data.Filter.Owner = ""
	default:
		query.Owner = data.Filter.Owner
	}
	if v.Admin {
		// Counts and rates are of every owner's tasks: admins only.
		if counts, err := d.r.Store().Counts(ctx); err == nil {
			for _, s := range store.AllStatuses() {
				data.Counts = append(data.Counts, countItem{string(s), counts[s]})
				data.Total += counts[s]
			}
		} else {
			data.Error = "counts: " + err.Error()
		}
		vc := d.versionCensus(ctx)
		data.Versions, data.VersionsComplete = vc.rows, vc.complete
		if d.opts.Feed != nil {
			data.HasRates = true
			data.Rates = d.feed.Rates(30)
			for _, r := range data.Rates {
				data.RateMax = max(data.RateMax, r.Created, r.Finished)
			}
			last := data.Rates[len(data.Rates)-1]
			data.LastCreated, data.LastDone = last.Created, last.Finished
		}
	}
	if v.Admin || v.Owner != "" {
		if t, err := d.oldestWorking(ctx, query.Owner); err == nil && t != nil {
			row := rowOf(t)
			data.Oldest = &row
		}
		rows, next, err := d.tasks(ctx, query, data.Filter)
		switch {
		case errors.Is(err, store.ErrInvalidCursor):
			data.Error = "That page link is stale (the filters changed): showing the newest tasks."
			query.Cursor = ""
			rows, next, err = d.tasks(ctx, query, data.Filter)
		case errors.Is(err, store.ErrInvalid):
			data.Error = "Unknown status filter."
			err = nil
		}
		if err != nil {
			data.Error = err.Error()
		}
		data.Rows = rows
		base := url.Values{}
		for k, val := range map[string]string{"status": data.Filter.Status, "name": data.Filter.Name, "owner": data.Filter.Owner, "show": data.Filter.Show} {
			if val != "" {
				base.Set(k, val)
			}
		}
		data.FirstURL = d.prefix + "/?" + base.Encode()
		data.Paged = query.Cursor != ""
		if next != "" {
			base.Set("cursor", next)
			data.NextURL = d.prefix + "/?" + base.Encode()
		}
	}
	if q.Get("partial") != "" {
		d.render(w, "overview-live", data)
		return
	}
	d.render(w, "overview", data)
}

// tasks reads one table page of the rows f shows: store queries until
// the page is full or the listing ends, at most maxQueryCalls of them.
func (d *Dashboard) tasks(ctx context.Context, q store.Query, f filter) ([]taskRow, string, error) {
	var rows []taskRow
	for range maxQueryCalls {
		page, err := d.r.Store().Query(ctx, q)
		if err != nil {
			return nil, "", err
		}
		for _, t := range page.Tasks {
			if len(rows) < d.opts.PageSize && f.shows(t) {
				rows = append(rows, rowOf(t))
			}
		}
		if page.NextCursor == "" || len(rows) >= d.opts.PageSize {
			return rows, page.NextCursor, nil
		}
		q.Cursor = page.NextCursor
		q.Limit = d.opts.PageSize - len(rows)
	}
	return rows, q.Cursor, nil
}

// oldestWorking finds the oldest user task in status working (of owner,
// when set; no push delivery), from the oldest end of the status index.
// A task waiting for a person is input_required, so it is not among
// them; one waiting for its client or paused is, and its row's message
// says so.
func (d *Dashboard) oldestWorking(ctx context.Context, owner string) (*store.Task, error) {
	q := store.Query{Statuses: []mcptask.Status{mcptask.StatusWorking}, Owner: owner, Oldest: true, Limit: 8}
	for range maxQueryCalls {
		page, err := d.r.Store().Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, t := range page.Tasks {
			if !isDelivery(t) {
				return t, nil
			}
		}
		if page.NextCursor == "" {
			return nil, nil
		}
		q.Cursor = page.NextCursor
	}
	return nil, nil
}

// ---- the task page ----

type histRow struct {
	Status, Message string
	At              time.Time
	After           time.Duration // since the previous entry
}

type varView struct {
	Name, JSON string
	Clipped    bool
}

type taskData struct {
	page
	T         taskRow
	Terminal  bool
	TTL       time.Duration
	ExpiresAt time.Time
	// Deadline says which rule set ExpiresAt (a workflow task's deadline
	// moves with its progress, or is the orphan timeout).
	Deadline string
	// WakeAt is when the engine's scheduler next runs work for the task.
	WakeAt time.Time
	// Version is a workflow task's workflow version.
	Version   string
	Method    string
	Arguments string
	History   []histRow
	Progress  *progressView
	Vars      []varView
	Result    string
	Error     *mcptask.ErrorInfo
	CanCancel bool
	// CanFork shows the "rerun from here" buttons (an admin, a Forker);
	// ForkedFrom and Forks are the task's lineage.
	CanFork    bool
	ForkedFrom string
	ForkedAt   string
	Forks      []workflow.Fork
	CSRF       string
	Done       string
	Now        time.Time
	// Paused is a workflow task's pause; CanPause and CanResume show the
	// buttons; Actions are who paused and resumed it (ops.go).
	Paused    *workflow.Pause
	CanPause  bool
	CanResume bool
	Actions   []actionRow
}

// task renders one task's page, or its live part (?partial=1).
func (d *Dashboard) task(w http.ResponseWriter, r *http.Request, v Viewer, id string) {
	t, err := d.r.Task(r.Context(), id)
	if err != nil || !v.mayView(t.Owner) {
		// Hidden and missing tasks look the same.
		w.WriteHeader(http.StatusNotFound)
		d.render(w, "notfound", d.page(v, "Not found"))
		return
	}
	data := taskData{page: d.page(v, "Task "+short(t.ID)), T: rowOf(t), Terminal: t.Status.Terminal(),
		TTL: t.TTL, ExpiresAt: t.ExpiresAt, Deadline: deadlineWhy(t), WakeAt: t.WakeAt, Version: t.Labels[workflow.LabelVersion],
		Method: t.Request.Method, Arguments: pretty(t.Request.Arguments, maxShownJSON),
		Error: t.Error, Now: time.Now(), Done: r.URL.Query().Get("done")}
	data.CanCancel = v.CanCancel && !data.Terminal
	data.ForkedFrom, data.ForkedAt = t.Labels[workflow.LabelForkedFrom], t.Labels[workflow.LabelForkedAt]
	data.Forks = workflow.Forks(t)
	var points []string
	if v.Admin && d.opts.Forker != nil {
		points = d.opts.Forker.ForkPoints(t)
		data.CanFork = len(points) > 0
	}
	if data.CanCancel || data.CanFork {
		data.CSRF = d.csrfToken(v)
	}
	for i, h := range t.History {
		row := histRow{Status: string(h.Status), Message: h.Message, At: h.At}
		if i > 0 {
			row.After = h.At.Sub(t.History[i-1].At)
		}
		data.History = append(data.History, row)
	}
	if raw, ok := t.Variables[workflow.VarProgress]; ok {
		var p workflow.Progress
		if json.Unmarshal(raw, &p) == nil {
			ended := ""
			if data.Terminal {
				ended = string(t.Status)
			}
			data.Progress = timeline(&p, data.Now, ended)
			for i, s := range data.Progress.Steps {
				switch {
				case slices.Contains(points, s.Name):
					data.Progress.Steps[i].ForkFrom = s.Name
				case s.Group != "" && slices.Contains(points, s.Group):
					data.Progress.Steps[i].ForkFrom = s.Group
				}
			}
		}
	}
	names := make([]string, 0, len(t.Variables))
	for k := range t.Variables {
		if k != workflow.VarProgress {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		js := pretty(t.Variables[k], maxShownJSON)
		data.Vars = append(data.Vars, varView{Name: k, JSON: js, Clipped: len(t.Variables[k]) > maxShownJSON})
	}
	if len(t.Result) > 0 {
		data.Result = pretty(t.Result, maxShownJSON)
	}
	d.opsView(r.Context(), t, &data, v)
	if r.URL.Query().Get("partial") != "" {
		d.render(w, "task-live", data)
		return
	}
	d.render(w, "task", data)
}

// ---- template helpers ----

var funcs = template.FuncMap{
	"short": short,
	"ts":    func(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") },
	"since": func(now, t time.Time) string { return human(now.Sub(t)) },
	"human": human,
	"pct": func(n, total int) int {
		if total <= 0 {
			return 0
		}
		return n * 100 / total
	},
	"barh": func(n, maxN int) int {
		if maxN <= 0 || n <= 0 {
			return 0
		}
		return max(1, n*40/maxN)
	},
	"add": func(a, b int) int { return a + b },
	"mul": func(a, b int) int { return a * b },
	"sub": func(a, b int) int { return a - b },
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// human prints a duration the way an operator reads it.
func human(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// pretty indents JSON for display, clipped to n bytes.
func pretty(raw json.RawMessage, n int) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if len(raw) > n || json.Indent(&b, raw, "", "  ") != nil {
		return clip(string(raw), n)
	}
	return b.String()
}

// deadlineWhy says which rule set a task's expiry.
func deadlineWhy(t *store.Task) string {
	switch {
	case t.ExpiresAt.IsZero():
		return ""
	case t.Status.Terminal():
		return "kept until then to be read, then deleted"
	case t.Labels[workflow.LabelDeadline] == workflow.DeadlineOrphan:
		return "orphan timeout: no client holds this workflow task's id yet (its handoff was not delivered); it fails then unless a client names it"
	case t.Labels[workflow.LabelDeadline] == workflow.DeadlineIdle:
		return "idle allowance: " + human(t.TTL) + " after the last recorded step; every recorded step moves it"
	}
	return "ttl: " + human(t.TTL) + " from creation"
}
