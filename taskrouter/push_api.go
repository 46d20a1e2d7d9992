// The Go API of webhooks and what the webhook methods (push_methods.go)
// share with it: registering one, listing, deleting, reading its
// deliveries, and who may manage which.

package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/push"
	"github.com/taskbridge/taskbridge/store"
)

// WebhookRegistration is what Router.RegisterWebhook registers.
type WebhookRegistration struct {
	// URL is where deliveries go: https://, or http:// to a loopback
	// address (see PushOptions for what else is allowed).
	URL string
	// Events are what the webhook is told of; nil means
	// mcptask.DefaultWebhookEvents.
	Events []mcptask.WebhookEvent
	// TaskID names the one task to watch; empty means every task of the
	// requestor (or of Owner).
	TaskID string
	// Owner, for an administrator (PushOptions.Admins) only, names the
	// owner whose tasks to watch, "*" for every owner's; empty means the
	// requestor's.
	Owner string
	// Secret signs the deliveries ("whsec_" + base64 of 24 to 64 bytes);
	// empty means a new one (push.NewSecret), returned by RegisterWebhook.
	Secret string
}

// pushRequestor is who calls the webhook API: q's owner, or, for a nil
// q (the server's own code), an administrator.
//
// A webhook follows the owner rules of tasks: an authenticated
// requestor's (or, with Options.SessionBound, a session's) is its own;
// one registered without an authorization context is a capability, as
// such a task is: whoever presents its id may list it (with the task's
// id), read its deliveries and delete it.
func (w *webhooks) pushRequestor(q *Request) (owner string, admin bool, err error) {
	if w.opts.Disabled {
		return "", false, mcptask.MethodNotFound("push is disabled on this server (taskrouter.PushOptions.Disabled)")
	}
	if q == nil {
		return LocalOwner, true, nil
	}
	if q.OwnerErr != nil {
		return "", false, q.OwnerErr
	}
	if isPushOwner(q.Owner) {
		return "", false, mcptask.InvalidRequest("the owner %q is reserved", q.Owner)
	}
	return q.Owner, w.opts.isAdmin(q.Owner), nil
}

// RegisterWebhook registers a webhook for q's requestor (nil: the
// server itself, an administrator) and returns it with its secret. A
// webhook for one task needs the requestor to see the task (the owner
// rules of tasks/get) unless it is an administrator; one for every task
// of an owner watches the requestor's own tasks (an administrator's may
// name another owner, or "*"). The URL is checked against PushOptions
// (scheme, and the addresses its host resolves to). Errors are JSON-RPC
// errors (-32602 for bad input and tasks not found).
func (r *Router) RegisterWebhook(ctx context.Context, q *Request, reg WebhookRegistration) (mcptask.Webhook, string, error) {
	return r.hooks.register(ctx, q, reg)
}

func (w *webhooks) register(ctx context.Context, q *Request, reg WebhookRegistration) (mcptask.Webhook, string, error) {
	by, admin, err := w.pushRequestor(q)
	if err != nil {
		return mcptask.Webhook{}, "", err
	}
	r := w.r
	events, err := checkEvents(reg.Events)
	if err != nil {
		return mcptask.Webhook{}, "", mcptask.InvalidParams("events: %v", err)
	}
	u, err := w.policy.checkURL(reg.URL)
	if err == nil {
		err = w.policy.resolveCheck(ctx, u)
	}
	if err != nil {
		return mcptask.Webhook{}, "", mcptask.InvalidParams("%v", err)
	}
	secret := reg.Secret
	if secret == "" {
		secret = push.NewSecret()
	} else if _, err := push.Key(secret); err != nil {
		return mcptask.Webhook{}, "", mcptask.InvalidParams("secret: %v", err)
	}
	now := r.opts.Now()
	rec := hookRecord{URL: u.String(), Secret: secret, Events: events, By: by, Created: now}
	ttl, err := w.watches(ctx, q, admin, reg, &rec)
	if err != nil {
		return mcptask.Webhook{}, "", err
	}
	if n, err := w.countOwn(ctx, by); err != nil {
		return mcptask.Webhook{}, "", storeError(err)
	} else if n >= w.opts.MaxWebhooksPerOwner {
		return mcptask.Webhook{}, "", mcptask.Errorf(mcptask.CodeTooManyTasks, "too many webhooks: %d registered, limit %d (taskrouter.PushOptions.MaxWebhooksPerOwner); delete one first", n, w.opts.MaxWebhooksPerOwner)
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return mcptask.Webhook{}, "", mcptask.InternalError("encoding the webhook: %v", err)
	}
	id := "wh_" + NewTaskID()
	t := &store.Task{
		ID: id, Owner: webhookOwnerPrefix + by, Status: mcptask.StatusCompleted, CreatedAt: now, UpdatedAt: now, TTL: ttl,
		Request: store.Request{Method: mcptask.MethodWebhooksRegister, Name: hookRequestName},
		Labels: map[string]string{LabelKind: KindWebhook, labelPushURL: rec.URL, labelPushTask: rec.TaskID,
			labelPushOwner: rec.Watch, labelPushEvents: joinEvents(events)},
		Result: raw,
	}
	if q != nil && q.byID(&r.opts) {
		t.Labels[labelAccess] = accessByID
	}
	created, err := r.st.Create(ctx, t)
	if err != nil {
		return mcptask.Webhook{}, "", storeError(err)
	}
	h := &webhook{id: id, url: rec.URL, secret: secret, events: events, task: rec.TaskID, fromSeq: rec.FromSeq,
		watch: rec.Watch, by: by, created: now, version: created.Version}
	w.hooks.add(h)
	r.log.Info("webhook registered", "webhook", id, "url", rec.URL, "task", rec.TaskID, "owner", rec.Watch)
	if rec.TaskID != "" {
		w.scans.rescan(rec.TaskID) // a task that already ended is told of its end
	}
	return wireWebhook(created, admin), secret, nil
}

// watches fills in what registration reg watches (a task, an owner's
// tasks, or the registrant's own) into rec, and returns the webhook's ttl:
// a task's webhook lives as long as the task plus Retention, others
// until deleted (0).
func (w *webhooks) watches(ctx context.Context, q *Request, admin bool, reg WebhookRegistration, rec *hookRecord) (time.Duration, error) {
	switch {
	case reg.TaskID != "" && reg.Owner != "":
		return 0, mcptask.InvalidParams("give taskId or owner, not both")
	case reg.TaskID != "":
		t, err := w.watchable(ctx, q, admin, reg.TaskID)
		if err != nil {
			return 0, err
		}
		rec.TaskID = t.ID
		if rec.FromSeq, err = w.firstEvent(ctx, t.ID); err != nil {
			return 0, storeError(err)
		}
		if !t.ExpiresAt.IsZero() {
			return max(t.ExpiresAt.Sub(w.r.opts.Now()), 0) + w.opts.Retention, nil
		}
	case reg.Owner != "" && !admin:
		return 0, mcptask.InvalidParams("only an administrator (taskrouter.PushOptions.Admins) registers webhooks for another owner's tasks")
	case reg.Owner != "":
		if isPushOwner(reg.Owner) {
			return 0, mcptask.InvalidParams("the owner %q is reserved", reg.Owner)
		}
		rec.Watch = reg.Owner
	default:
		rec.Watch = rec.By
	}
	return 0, nil
}

// watchable returns task id if the requestor may watch it: it sees it
// (tasks/get's rules), or is an administrator.
func (w *webhooks) watchable(ctx context.Context, q *Request, admin bool, id string) (*store.Task, error) {
	var t *store.Task
	var err error
	if admin || q == nil {
		t, err = w.r.st.Get(ctx, id)
	} else {
		t, err = w.r.TaskFor(ctx, q, id)
	}
	if err == nil && isPushOwner(t.Owner) {
		err = fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, storeError(err)
	}
	return t, nil
}

// firstEvent is the first event of task id's log a webhook registered
// now is told of: the next one, or, when the task has ended, its end
// (its last event).
func (w *webhooks) firstEvent(ctx context.Context, id string) (uint64, error) {
	before, err := w.r.st.Events(ctx, id, math.MaxUint64, 1)
	if err != nil {
		return 0, err
	}
	t, err := w.r.st.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	if !t.Status.Terminal() {
		return before.Last + 1, nil
	}
	// It ended, maybe since the first read: its end is its last event.
	now, err := w.r.st.Events(ctx, id, math.MaxUint64, 1)
	return now.Last, err
}

// countOwn counts by's registrations.
func (w *webhooks) countOwn(ctx context.Context, by string) (int, error) {
	n := 0
	err := w.eachOwn(ctx, by, func(*store.Task) bool { n++; return true })
	return n, err
}

// eachOwn calls f with the header of each of by's registrations, oldest
// first, until f returns false.
func (w *webhooks) eachOwn(ctx context.Context, by string, f func(*store.Task) bool) error {
	cursor := ""
	for {
		page, err := w.r.st.List(ctx, store.ListOptions{Owner: webhookOwnerPrefix + by, Cursor: cursor, HeadersOnly: true, Limit: store.MaxPageSize})
		if err != nil {
			return err
		}
		for _, t := range page.Tasks {
			if t.Labels[LabelKind] == KindWebhook && !f(t) {
				return nil
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		cursor = page.NextCursor
	}
}

// Webhooks lists the webhooks of q's requestor (nil: the server itself),
// those watching taskID only when it is not empty. An administrator sees
// every webhook, the static ones included.
func (r *Router) Webhooks(ctx context.Context, q *Request, taskID string) ([]mcptask.Webhook, error) {
	return r.hooks.list(ctx, q, taskID)
}

func (w *webhooks) list(ctx context.Context, q *Request, taskID string) ([]mcptask.Webhook, error) {
	by, admin, err := w.pushRequestor(q)
	if err != nil {
		return nil, err
	}
	out := []mcptask.Webhook{}
	keep := func(t *store.Task) bool {
		if taskID == "" || t.Labels[labelPushTask] == taskID {
			out = append(out, wireWebhook(t, admin))
		}
		return true
	}
	if !admin {
		if err := w.eachOwn(ctx, by, keep); err != nil {
			return nil, storeError(err)
		}
		if taskID != "" {
			w.capabilitiesOf(ctx, q, by, taskID, keep)
		}
		return out, nil
	}
	q2 := store.Query{Name: hookRequestName, Limit: store.MaxPageSize, Oldest: true}
	for {
		page, err := w.r.st.Query(ctx, q2)
		if err != nil {
			return nil, storeError(err)
		}
		for _, t := range page.Tasks {
			if t.Labels[LabelKind] == KindWebhook && strings.HasPrefix(t.Owner, webhookOwnerPrefix) {
				keep(t)
			}
		}
		if page.NextCursor == "" {
			break
		}
		q2.Cursor = page.NextCursor
	}
	if taskID == "" {
		for _, h := range w.hooks.all() {
			if h.static {
				out = append(out, h.wire())
			}
		}
	}
	return out, nil
}

// capabilitiesOf hands keep the webhooks of task taskID that q may
// manage as capabilities (registered by others without authentication).
func (w *webhooks) capabilitiesOf(ctx context.Context, q *Request, by, taskID string, keep func(*store.Task) bool) {
	w.hooks.mu.RLock()
	hooks := slices.Clone(w.hooks.byTask[taskID])
	w.hooks.mu.RUnlock()
	for _, h := range hooks {
		if h.static || h.by == by {
			continue // listed already
		}
		if t, err := w.r.st.Get(ctx, h.id); err == nil && w.mayManage(q, by, t) {
			keep(t)
		}
	}
}

// wireWebhook is a registration's record as the methods show it.
func wireWebhook(t *store.Task, admin bool) mcptask.Webhook {
	l := t.Labels
	wh := mcptask.Webhook{WebhookID: t.ID, URL: l[labelPushURL], Events: splitEvents(l[labelPushEvents]), TaskID: l[labelPushTask],
		CreatedAt: mcptask.FormatTime(t.CreatedAt), LastError: l[labelPushError], LastFailureAt: l[labelPushFailedAt]}
	wh.Failures, _ = strconv.Atoi(l[labelPushFailures])
	if admin {
		wh.Owner = l[labelPushOwner]
	}
	return wh
}

// wire is a static webhook as the methods show it (to administrators).
func (h *webhook) wire() mcptask.Webhook {
	h.mu.Lock()
	defer h.mu.Unlock()
	wh := mcptask.Webhook{WebhookID: h.id, URL: h.url, Events: h.events, Owner: h.watch, Static: true,
		Failures: h.failures, LastError: h.lastErr}
	if !h.failedAt.IsZero() {
		wh.LastFailureAt = mcptask.FormatTime(h.failedAt)
	}
	return wh
}

// DeleteWebhook deletes one of q's requestor's webhooks (an
// administrator's: any stored one). Its pending deliveries are
// cancelled when they come due. An unknown or foreign id is -32602
// "webhook not found"; a static one cannot be deleted.
func (r *Router) DeleteWebhook(ctx context.Context, q *Request, id string) error {
	return r.hooks.remove(ctx, q, id)
}

func (w *webhooks) remove(ctx context.Context, q *Request, id string) error {
	t, err := w.own(ctx, q, id)
	if err != nil {
		return err
	}
	if err := w.r.st.Delete(ctx, t.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return storeError(err)
	}
	w.hooks.remove(t.ID)
	w.r.log.Info("webhook deleted", "webhook", t.ID)
	return nil
}

// own reads webhook id if q's requestor may manage it.
func (w *webhooks) own(ctx context.Context, q *Request, id string) (*store.Task, error) {
	by, admin, err := w.pushRequestor(q)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, mcptask.InvalidParams("webhookId is required")
	}
	if h := w.hooks.get(id); h != nil && h.static {
		return nil, mcptask.InvalidParams("webhook %s is declared by the server's configuration", id)
	}
	t, err := w.r.st.Get(ctx, id)
	if err == nil && (t.Labels[LabelKind] != KindWebhook || !admin && !w.mayManage(q, by, t)) {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, mcptask.InvalidParams("webhook %s not found", id)
	}
	if err != nil {
		return nil, storeError(err)
	}
	return t, nil
}

// mayManage reports whether requestor q (owner by) may see and delete
// the webhook of record t: its own, or a capability (see pushRequestor).
func (w *webhooks) mayManage(q *Request, by string, t *store.Task) bool {
	return t.Owner == webhookOwnerPrefix+by || q != nil && q.byID(&w.r.opts) && t.Labels[labelAccess] == accessByID
}

// WebhookDeliveries lists a webhook's deliveries, newest first, one page
// (cursor: the previous page's next cursor). The requestor must own the
// webhook (or be an administrator).
func (r *Router) WebhookDeliveries(ctx context.Context, q *Request, id, cursor string) ([]mcptask.WebhookDelivery, string, error) {
	return r.hooks.deliveries(ctx, q, id, cursor)
}

func (w *webhooks) deliveries(ctx context.Context, q *Request, id, cursor string) ([]mcptask.WebhookDelivery, string, error) {
	owner := ""
	if h := w.hooks.get(id); h != nil && h.static {
		if _, admin, err := w.pushRequestor(q); err != nil {
			return nil, "", err
		} else if !admin {
			return nil, "", mcptask.InvalidParams("webhook %s not found", id)
		}
	} else {
		t, err := w.own(ctx, q, id)
		if err != nil {
			return nil, "", err
		}
		owner = strings.TrimPrefix(t.Owner, webhookOwnerPrefix)
	}
	out := []mcptask.WebhookDelivery{}
	qq := store.Query{Owner: deliveryOwnerPrefix + owner, Name: id, Cursor: cursor, Limit: store.DefaultPageSize}
	for {
		page, err := w.r.st.Query(ctx, qq)
		if err != nil {
			return nil, "", storeError(err)
		}
		for _, t := range page.Tasks {
			out = append(out, wireDelivery(t))
		}
		// A page may come back short while more follow: fill this one.
		if page.NextCursor == "" || len(out) >= store.DefaultPageSize {
			return out, page.NextCursor, nil
		}
		qq.Cursor = page.NextCursor
	}
}

// wireDelivery is a delivery's record as the methods show it.
func wireDelivery(t *store.Task) mcptask.WebhookDelivery {
	l := t.Labels
	d := mcptask.WebhookDelivery{DeliveryID: t.ID, WebhookID: t.Request.Name, TaskID: l[labelPushTask],
		Type: mcptask.WebhookEvent(l[labelPushType]), LastError: l[labelPushError],
		CreatedAt: mcptask.FormatTime(t.CreatedAt), UpdatedAt: mcptask.FormatTime(t.UpdatedAt)}
	d.Seq, _ = strconv.ParseUint(l[labelPushSeq], 10, 64)
	d.Attempts, _ = strconv.Atoi(l[labelPushAttempts])
	switch t.Status {
	case mcptask.StatusCompleted:
		d.Status = mcptask.DeliveryDelivered
	case mcptask.StatusFailed:
		d.Status = mcptask.DeliveryFailed
	case mcptask.StatusCancelled:
		d.Status = mcptask.DeliveryCancelled
	default:
		d.Status = mcptask.DeliveryPending
		if !t.WakeAt.IsZero() {
			d.NextAttemptAt = mcptask.FormatTime(t.WakeAt)
		}
	}
	return d
}
