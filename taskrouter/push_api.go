// The Go API of webhooks (Router.Webhooks) and what the webhook methods
// (push_methods.go) share with it: registering one, listing, deleting,
// reading its deliveries, and who may manage which.

package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/push"
	"github.com/taskbridge/taskbridge/store"
)

// WebhookRegistration is what Webhooks.Register registers.
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

// Webhooks is push's handle (Router.Webhooks): registering webhooks,
// listing and deleting them, reading their deliveries, for a requestor
// (a *Request; nil is the server's own code, an administrator) under the
// owner rules below. Errors are JSON-RPC errors (-32602 for bad input and
// for what the requestor may not see, -32000 past a cap).
//
// Who may: a webhook is its registrant's, as a task is its owner's: an
// authenticated requestor's (and, with Options.SessionBound, a
// session's) is its own only; one registered without authentication is
// also a capability, as such a task is: whoever presents its id may read
// its deliveries and delete it, and a requestor that may see a task
// lists the capabilities of that task's webhooks. A webhook for every
// task of its registrant needs a registrant that can be told apart: a
// stateless anonymous client (no token, no session: every such client is
// the one LocalOwner) may only register webhooks for one task (its task
// id is its access), never lists webhooks but by task, and each of its
// tasks counts its own webhooks (PushOptions.MaxWebhooksPerOwner).
type Webhooks struct{ w *webhooks }

// pushRequestor is who calls the webhook API: q's owner, or, for a nil
// q (the server's own code), an administrator.
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

// Register registers a webhook for q's requestor and returns it with its
// secret, the one time the secret is shown. A webhook for one task needs
// the requestor to see the task (the owner rules of tasks/get) unless it
// is an administrator; one for every task of an owner watches the
// requestor's own tasks (an administrator's may name another owner, or
// "*"), and is refused to a stateless anonymous requestor. The URL is
// checked against PushOptions (scheme, and the addresses its host
// resolves to), the caps (MaxWebhooks, MaxWebhooksPerOwner) before
// anything is stored.
func (h *Webhooks) Register(ctx context.Context, q *Request, reg WebhookRegistration) (mcptask.Webhook, string, error) {
	return h.w.register(ctx, q, reg)
}

func (w *webhooks) register(ctx context.Context, q *Request, reg WebhookRegistration) (mcptask.Webhook, string, error) {
	by, admin, err := w.pushRequestor(q)
	if err != nil {
		return mcptask.Webhook{}, "", err
	}
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
	now := w.e.Now()
	rec := hookRecord{URL: u.String(), Events: events, By: by, Created: now}
	ttl, err := w.watches(ctx, q, admin, reg, &rec)
	if err != nil {
		return mcptask.Webhook{}, "", err
	}
	if err := w.checkCaps(ctx, q, by, rec); err != nil {
		return mcptask.Webhook{}, "", err
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return mcptask.Webhook{}, "", mcptask.InternalError("encoding the webhook: %v", err)
	}
	sealed, _ := json.Marshal(secret)
	id := "wh_" + NewTaskID()
	t := &store.Task{
		ID: id, Owner: webhookOwnerPrefix + by, Status: mcptask.StatusCompleted, CreatedAt: now, UpdatedAt: now, TTL: ttl,
		Request: store.Request{Method: mcptask.MethodWebhooksRegister, Name: hookRequestName},
		Labels: map[string]string{LabelKind: KindWebhook, labelPushURL: rec.URL, labelPushTask: rec.TaskID,
			labelPushOwner: rec.Watch, labelPushEvents: joinEvents(events)},
		Result:    raw,
		Variables: map[string]json.RawMessage{varPushSecret: sealed},
	}
	if rec.TaskID != "" {
		t.Labels[labelPushFrom] = strconv.FormatUint(rec.FromSeq, 10)
	}
	if q != nil && q.byID(w.sessionBound) {
		t.Labels[labelPushAccess] = accessByID
	}
	created, err := w.e.Store().Create(ctx, t)
	if err != nil {
		return mcptask.Webhook{}, "", storeError(err)
	}
	if hook, ok := hookFromHeader(created); ok {
		w.hooks.add(hook)
	}
	w.e.Logger().Info("webhook registered", "webhook", id, "url", rec.URL, "task", rec.TaskID, "owner", rec.Watch)
	if rec.TaskID != "" {
		w.scans.rescan(rec.TaskID) // a task that already ended is told of its end
	}
	return wireWebhook(created, admin), secret, nil
}

// checkCaps refuses a registration past a cap: the server's
// (MaxWebhooks), the registrant's (MaxWebhooksPerOwner), or, for a
// stateless anonymous requestor, which is no one to count for, its
// task's.
func (w *webhooks) checkCaps(ctx context.Context, q *Request, by string, rec hookRecord) error {
	if n := w.hooks.count(w.e.Now()); n >= w.opts.MaxWebhooks {
		return mcptask.Errorf(mcptask.CodeTooManyTasks, "the server holds too many webhooks: %d registered, limit %d (taskrouter.PushOptions.MaxWebhooks); retry later", n, w.opts.MaxWebhooks)
	}
	if q.anonymous() {
		if n := w.hooks.countTask(rec.TaskID, by, w.e.Now()); n >= w.opts.MaxWebhooksPerOwner {
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "too many webhooks for task %s: %d registered, limit %d (taskrouter.PushOptions.MaxWebhooksPerOwner, per task for a client without a token or a session); delete one first", rec.TaskID, n, w.opts.MaxWebhooksPerOwner)
		}
		return nil
	}
	n, err := w.countOwn(ctx, by)
	if err != nil {
		return storeError(err)
	}
	if n >= w.opts.MaxWebhooksPerOwner {
		return mcptask.Errorf(mcptask.CodeTooManyTasks, "too many webhooks: %d registered, limit %d (taskrouter.PushOptions.MaxWebhooksPerOwner); delete one first", n, w.opts.MaxWebhooksPerOwner)
	}
	return nil
}

// watches fills in what registration reg watches (a task, an owner's
// tasks, or the registrant's own) into rec, and returns the webhook's ttl:
// a task's webhook lives as long as the task plus Retention; one for
// the tasks of a registrant without authentication (a session's, a stdio
// client's) AnonymousTTL; others until deleted (0).
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
			return max(t.ExpiresAt.Sub(w.e.Now()), 0) + w.opts.Retention, nil
		}
	case reg.Owner != "" && !admin:
		return 0, mcptask.InvalidParams("only an administrator (taskrouter.PushOptions.Admins) registers webhooks for another owner's tasks")
	case reg.Owner != "":
		if isPushOwner(reg.Owner) {
			return 0, mcptask.InvalidParams("the owner %q is reserved", reg.Owner)
		}
		rec.Watch = reg.Owner
	case q.anonymous():
		return 0, mcptask.InvalidParams("a webhook for all of a requestor's tasks needs a requestor the server can tell apart (a bearer token, or a session): without one, every client is the same owner; register a webhook for one task (taskId) instead")
	default:
		rec.Watch = rec.By
		if q != nil && !q.Authenticated && !admin {
			return w.opts.AnonymousTTL, nil
		}
	}
	return 0, nil
}

// watchable returns task id if the requestor may watch it: it sees it
// (tasks/get's rules), or is an administrator.
func (w *webhooks) watchable(ctx context.Context, q *Request, admin bool, id string) (*store.Task, error) {
	var t *store.Task
	var err error
	if admin || q == nil {
		t, err = w.e.Store().Get(ctx, id)
	} else {
		t, err = w.e.TaskFor(ctx, q, id)
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
	st := w.e.Store()
	before, err := st.Events(ctx, id, math.MaxUint64, 1)
	if err != nil {
		return 0, err
	}
	t, err := st.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	if !t.Status.Terminal() {
		return before.Last + 1, nil
	}
	// It ended, maybe since the first read: its end is its last event.
	now, err := st.Events(ctx, id, math.MaxUint64, 1)
	return now.Last, err
}

// countOwn counts by's registrations.
func (w *webhooks) countOwn(ctx context.Context, by string) (int, error) {
	n := 0
	err := w.eachOwn(ctx, by, func(*store.Task) bool { n++; return true })
	return n, err
}

// eachOwn calls f with the header of each of by's registrations that
// have not expired, oldest first, until f returns false.
func (w *webhooks) eachOwn(ctx context.Context, by string, f func(*store.Task) bool) error {
	cursor := ""
	now := w.e.Now()
	for {
		page, err := w.e.Store().List(ctx, store.ListOptions{Owner: webhookOwnerPrefix + by, Cursor: cursor, HeadersOnly: true, Limit: store.MaxPageSize})
		if err != nil {
			return err
		}
		for _, t := range page.Tasks {
			if t.Labels[LabelKind] == KindWebhook && liveRecord(t, now) && !f(t) {
				return nil
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		cursor = page.NextCursor
	}
}

// List lists the webhooks of q's requestor, those watching taskID only
// when it is not empty, with the capabilities of the webhooks of taskID
// it may manage (see Webhooks). A stateless anonymous requestor has no
// webhooks of its own: it lists by task only. An administrator sees
// every webhook, the static ones included.
func (h *Webhooks) List(ctx context.Context, q *Request, taskID string) ([]mcptask.Webhook, error) {
	return h.w.list(ctx, q, taskID)
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
		if !q.anonymous() {
			if err := w.eachOwn(ctx, by, keep); err != nil {
				return nil, storeError(err)
			}
		}
		if taskID != "" {
			w.capabilitiesOf(ctx, q, by, taskID, keep)
		}
		return out, nil
	}
	q2 := store.Query{Name: hookRequestName, Limit: store.MaxPageSize, Oldest: true}
	now := w.e.Now()
	for {
		page, err := w.e.Store().Query(ctx, q2)
		if err != nil {
			return nil, storeError(err)
		}
		for _, t := range page.Tasks {
			if isHookRecord(t) && liveRecord(t, now) {
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
// manage as capabilities (registered by others without authentication),
// when q may see the task.
func (w *webhooks) capabilitiesOf(ctx context.Context, q *Request, by, taskID string, keep func(*store.Task) bool) {
	if _, err := w.e.TaskFor(ctx, q, taskID); err != nil {
		return
	}
	now := w.e.Now()
	for _, h := range w.hooks.ofTask(taskID) {
		if h.static || h.by == by && !q.anonymous() || !h.live(now) {
			continue // listed already, or expired
		}
		if t, err := w.e.Store().Get(ctx, h.id); err == nil && w.mayManage(q, by, t) {
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

// Delete deletes one of q's requestor's webhooks (an administrator's:
// any stored one; anyone's it may manage as a capability). Its pending
// deliveries are cancelled when they come due. An unknown or foreign id
// is -32602 "webhook not found"; a static one cannot be deleted.
func (h *Webhooks) Delete(ctx context.Context, q *Request, id string) error {
	return h.w.remove(ctx, q, id)
}

func (w *webhooks) remove(ctx context.Context, q *Request, id string) error {
	t, err := w.own(ctx, q, id)
	if err != nil {
		return err
	}
	if err := w.e.Store().Delete(ctx, t.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return storeError(err)
	}
	w.hooks.remove(t.ID)
	w.e.Logger().Info("webhook deleted", "webhook", t.ID)
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
	t, err := w.e.Store().Get(ctx, id)
	if err == nil && (!isHookRecord(t) || !admin && !w.mayManage(q, by, t)) {
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
// the webhook of record t: its own (a stateless anonymous requestor has
// none: its owner is everyone's), or a capability (see Webhooks).
func (w *webhooks) mayManage(q *Request, by string, t *store.Task) bool {
	if !q.anonymous() && t.Owner == webhookOwnerPrefix+by {
		return true
	}
	capability := t.Labels[labelPushAccess] == accessByID || t.Labels[labelAccess] == accessByID // the label of records before push.access
	return q != nil && q.byID(w.sessionBound) && capability
}

// Deliveries lists a webhook's deliveries, newest first, one page
// (cursor: the previous page's next cursor). The requestor must be one
// that may manage the webhook (or an administrator).
func (h *Webhooks) Deliveries(ctx context.Context, q *Request, id, cursor string) ([]mcptask.WebhookDelivery, string, error) {
	return h.w.deliveries(ctx, q, id, cursor)
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
		page, err := w.e.Store().Query(ctx, qq)
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
