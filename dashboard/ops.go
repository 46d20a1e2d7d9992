package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Operations on the dashboard: pausing and resuming a workflow task (its
// owner, or an admin, who may act: Viewer.CanCancel), the task's actions
// (who paused and resumed it), and the schedules and queues page (an
// admin sees and acts on every schedule; another viewer on the
// schedules its Owner owns).

// actionRow is one entry of a task's actions (its event log's action
// events).
type actionRow struct {
	At                 time.Time
	Action, By, Reason string
}

// opsView adds to a task page what operations show: the pause, the
// buttons the viewer may use, the task's actions.
func (d *Dashboard) opsView(ctx context.Context, t *store.Task, data *taskData, v Viewer) {
	if data.Progress != nil && !data.Terminal {
		var p workflow.Progress
		if json.Unmarshal(t.Variables[workflow.VarProgress], &p) == nil {
			data.Paused = p.Paused
		}
		data.CanPause = v.CanCancel && data.Paused == nil
		data.CanResume = v.CanCancel && data.Paused != nil
		if data.CanPause || data.CanResume {
			data.CSRF = d.csrfToken(v)
		}
	}
	page, err := d.r.Store().Events(ctx, t.ID, 0, store.MaxPageSize)
	if err != nil {
		return
	}
	for _, e := range page.Events {
		if e.Type != mcptask.EventAction {
			continue
		}
		var a mcptask.ActionEvent
		if json.Unmarshal(e.Data, &a) == nil {
			data.Actions = append(data.Actions, actionRow{At: e.At, Action: a.Action, By: a.By, Reason: a.Reason})
		}
	}
}

// actor names a viewer in a task's or a schedule's history.
func (v Viewer) actor() string {
	switch {
	case v.Name != "":
		return "dashboard user " + v.Name
	case v.Owner != "":
		return v.Owner
	}
	return "a dashboard user"
}

// viewable reads task id for viewer v; a task v may not see, or one that
// is not there, is answered 404 alike (it reports false).
func (d *Dashboard) viewable(w http.ResponseWriter, r *http.Request, v Viewer, id string) (*store.Task, bool) {
	t, err := d.r.Task(r.Context(), id)
	if err != nil || !v.mayView(t.Owner) {
		http.NotFound(w, r)
		return nil, false
	}
	return t, true
}

// checkForm refuses a cross-site post, a viewer who may not act, and a
// missing or stale form token; it reports whether the post may go on.
func (d *Dashboard) checkForm(w http.ResponseWriter, r *http.Request, v Viewer, may bool, what string) bool {
	switch {
	case !sameOrigin(r):
		http.Error(w, "cross-site request refused", http.StatusForbidden)
	case !may:
		http.Error(w, "you may not "+what, http.StatusForbidden)
	case !d.formTokenOK(v, r.PostFormValue("csrf")):
		http.Error(w, "missing or stale form token: reload the page", http.StatusForbidden)
	default:
		return true
	}
	return false
}

// pause pauses (resume resumes) a workflow task for a viewer who may act
// on it.
func (d *Dashboard) pause(w http.ResponseWriter, r *http.Request, v Viewer, id string, resume bool) {
	what := "pause tasks"
	if resume {
		what = "resume tasks"
	}
	if !d.checkForm(w, r, v, v.CanCancel, what) {
		return
	}
	if _, ok := d.viewable(w, r, v, id); !ok {
		return
	}
	done := "paused"
	var err error
	if resume {
		done = "resumed"
		_, _, err = d.r.Pauses().Resume(r.Context(), id, v.actor())
	} else {
		_, _, err = d.r.Pauses().Pause(r.Context(), id, taskrouter.PauseRequest{By: v.actor(), Reason: r.PostFormValue("reason"), Cut: r.PostFormValue("cut") != ""})
	}
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, taskrouter.ErrNotPausable) {
			code = http.StatusConflict
		}
		http.Error(w, err.Error(), code)
		return
	}
	http.Redirect(w, r, d.prefix+"/tasks/"+url.PathEscape(id)+"?done="+done, http.StatusSeeOther)
}

// scheduleRow is a schedule on the schedules page.
type scheduleRow struct {
	taskrouter.ScheduleInfo
	CanAct bool
}

type schedulesData struct {
	page
	Schedules []scheduleRow
	Queues    []store.QueueCount
	CSRF      string
	Done      string
	Error     string
	Now       time.Time
}

// mayManage reports whether viewer v may see and act on a schedule of
// owner: an admin, or a viewer who owns it.
func (v Viewer) mayManage(owner string) bool { return v.Admin || v.Owner != "" && v.Owner == owner }

// schedules renders the schedules and queues page.
func (d *Dashboard) schedules(w http.ResponseWriter, r *http.Request, v Viewer) {
	data := schedulesData{page: d.page(v, "Schedules and queues"), Done: r.URL.Query().Get("done"), Now: time.Now()}
	all, err := d.r.Schedules().List(r.Context())
	if err != nil {
		data.Error = "reading the schedules: " + err.Error()
	}
	for _, in := range all {
		if v.mayManage(in.Owner) {
			data.Schedules = append(data.Schedules, scheduleRow{ScheduleInfo: in, CanAct: v.CanCancel})
		}
	}
	if v.Admin {
		if data.Queues, err = d.r.Store().QueueCounts(r.Context()); err != nil {
			data.Error = "reading the queues: " + err.Error()
		}
	}
	data.CSRF = d.csrfToken(v)
	d.render(w, "schedules", data)
}

// scheduleAction pauses, resumes or triggers a schedule ({name}/pause,
// {name}/resume, {name}/trigger) for a viewer who may manage it.
func (d *Dashboard) scheduleAction(w http.ResponseWriter, r *http.Request, v Viewer, rest string) {
	i := strings.LastIndex(rest, "/")
	if i < 0 {
		http.NotFound(w, r)
		return
	}
	name, action := rest[:i], rest[i+1:]
	if n, err := url.PathUnescape(name); err == nil {
		name = n
	}
	var owner string
	all, err := d.r.Schedules().List(r.Context())
	found := false
	for _, in := range all {
		if in.Name == name {
			owner, found = in.Owner, true
		}
	}
	if err != nil || !found || !v.mayManage(owner) {
		http.NotFound(w, r)
		return
	}
	if !d.checkForm(w, r, v, v.CanCancel, "act on schedules") {
		return
	}
	switch action {
	case "pause":
		_, err = d.r.Schedules().Pause(r.Context(), name, v.actor(), r.PostFormValue("reason"))
	case "resume":
		_, err = d.r.Schedules().Resume(r.Context(), name, v.actor())
	case "trigger":
		var f store.Fire
		if f, err = d.r.Schedules().Trigger(r.Context(), name, v.actor()); err == nil {
			http.Redirect(w, r, d.prefix+"/tasks/"+url.PathEscape(f.TaskID)+"?done=triggered", http.StatusSeeOther)
			return
		}
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	http.Redirect(w, r, d.prefix+"/schedules?done="+action+"d", http.StatusSeeOther)
}
