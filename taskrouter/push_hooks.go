package taskrouter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// Webhook registrations. A registration is a record of the store: a task
// of kind KindWebhook, created already completed (nothing runs for it and
// it never changes but for its labels, which count its failed
// deliveries), under a reserved owner of its own ("io.taskbridge/webhooks:"
// and the registrant), so that no client's tasks/list shows it and no
// client's request reaches it as a task (Request.mayAccess refuses the
// reserved owners). Its result holds the registration, its labels what a
// listing and the matching need, and its variable varPushSecret the
// signing secret: the one value the server must keep in plain, since it
// signs with it. No read returns it: not the webhook methods, not
// tasks/get or tasks/result (the record is no client's), not Router.Task
// (which drops it from these records: the dashboard's read); only the
// store itself (an operator with the database) and the delivery that
// signs with it read it. A webhook for one task lives as long as the task
// (plus PushOptions.Retention); one for an owner's tasks until it is
// deleted, or, registered without authentication, PushOptions.AnonymousTTL.
// Static webhooks (PushOptions.Hooks) live in memory only, on every
// replica alike.
//
// Every replica keeps what the matching needs of every registration in
// memory (hookSet: ids, what each watches, its events; no URL is dialled
// and no secret is read from there), read from the records' labels in one
// paged query on Start and, on a shared store, every
// PushOptions.RefreshInterval: the engine's writes are matched against it
// without a store read. A delivery reads its webhook's record (lookup),
// secret included, when it is made. PushOptions.MaxWebhooks bounds them
// (about 0.6 KB each in the set: ~6 MiB at the default 10,000). They are
// not loaded lazily, by owner or task on first need: every write of a
// task would then wait for a store query until its owner's and its own
// registrations were known (and for the webhooks of every owner's tasks
// in any case), and another replica's registration would still need the
// refresh to be seen.

// Kinds of the push records (the LabelKind label).
const (
	// KindWebhook marks a webhook registration's record.
	KindWebhook = "webhook"
	// KindPush marks a push delivery's record.
	KindPush = "push"
)

// Reserved owner prefixes of the push records: an owner the Owner policy
// returns must not start with them.
const (
	webhookOwnerPrefix  = "io.taskbridge/webhooks:"
	deliveryOwnerPrefix = "io.taskbridge/deliveries:"
	// hookRequestName is every registration's Request.Name: Query by it
	// lists them all.
	hookRequestName = "io.taskbridge/webhook"
	// allOwners is the watched owner of a webhook for every owner's tasks.
	allOwners = "*"
)

// Labels of the push records.
const (
	labelPushURL      = "push.url"
	labelPushTask     = "push.task"
	labelPushOwner    = "push.owner"
	labelPushEvents   = "push.events"
	labelPushFailures = "push.failures"
	labelPushError    = "push.error"
	labelPushFailedAt = "push.failed_at"
	labelPushSeq      = "push.seq"
	labelPushType     = "push.type"
	labelPushAttempts = "push.attempts"
	// labelPushFrom is a webhook of one task's fromSeq.
	labelPushFrom = "push.from"
	// labelPushAccess is accessByID on a webhook registered without an
	// authorization context: whoever presents its id may manage it (the
	// webhook's own label, so that no task rule reads it).
	labelPushAccess = "push.access"
	// varPushBody is a delivery's body, the same bytes on every attempt.
	varPushBody = "push.body"
	// varPushSecret is a webhook record's signing secret (a JSON string).
	varPushSecret = "push.secret"
)

func isPushOwner(owner string) bool {
	return strings.HasPrefix(owner, webhookOwnerPrefix) || strings.HasPrefix(owner, deliveryOwnerPrefix)
}

// webhook is a registration, as the engine matches and delivers it.
type webhook struct {
	id      string
	url     string
	secret  string // a static one's, or a stored one's as lookup read it; "" in the hookSet
	events  []mcptask.WebhookEvent
	task    string // the one task watched; "" for an owner's tasks
	watch   string // the owner whose tasks it watches (allOwners: every owner's); "" with task
	by      string // the registrant, who lists and deletes it
	created time.Time
	expires time.Time // its record's expiry; zero: none
	// fromSeq, for a webhook of one task, is the first event of the
	// task's log it is told of: the next one at its registration, or the
	// task's end when it had ended by then (a client that registers just
	// after its task ended is still told of the end).
	fromSeq uint64
	static  bool
	version uint64 // the record's version (refresh)

	// A static webhook's failures (a stored one's are in its labels).
	mu       sync.Mutex
	failures int
	lastErr  string
	failedAt time.Time
}

// wants reports whether h is told of e.
func (h *webhook) wants(e mcptask.WebhookEvent) bool { return slices.Contains(h.events, e) }

// since reports whether e happened since h was registered: by its number
// for a webhook of one task, by its time for an owner's.
func (h *webhook) since(e store.Event) bool {
	if h.task != "" {
		return e.Seq >= h.fromSeq
	}
	return !e.At.Before(h.created)
}

// hookRecord is a registration's stored result. Secret is read from
// records of before the secret moved to varPushSecret, never written.
type hookRecord struct {
	URL     string                 `json:"url"`
	Secret  string                 `json:"secret,omitempty"`
	Events  []mcptask.WebhookEvent `json:"events"`
	TaskID  string                 `json:"taskId,omitempty"`
	FromSeq uint64                 `json:"fromSeq,omitempty"`
	Watch   string                 `json:"owner,omitempty"`
	By      string                 `json:"by"`
	Created time.Time              `json:"createdAt"`
}

// isHookRecord reports a registration's record.
func isHookRecord(t *store.Task) bool {
	return t.Labels[LabelKind] == KindWebhook && strings.HasPrefix(t.Owner, webhookOwnerPrefix)
}

// hookFromRecord reads a registration's full record, its secret
// included; an error for one that is not one.
func hookFromRecord(t *store.Task) (*webhook, error) {
	if !isHookRecord(t) {
		return nil, fmt.Errorf("task %s is not a webhook", t.ID)
	}
	var rec hookRecord
	if err := json.Unmarshal(t.Result, &rec); err != nil {
		return nil, fmt.Errorf("webhook %s: %w", t.ID, err)
	}
	secret := rec.Secret
	if raw, ok := t.Variables[varPushSecret]; ok {
		if err := json.Unmarshal(raw, &secret); err != nil {
			return nil, fmt.Errorf("webhook %s: its secret: %w", t.ID, err)
		}
	}
	return &webhook{id: t.ID, url: rec.URL, secret: secret, events: rec.Events, task: rec.TaskID, fromSeq: rec.FromSeq,
		watch: rec.Watch, by: rec.By, created: rec.Created, expires: t.ExpiresAt, version: t.Version}, nil
}

// hookFromHeader reads what the matching needs of a registration from
// its record's header (its labels), without its secret; false for a
// record that does not carry it all (one registered before the labels
// did: read it whole).
func hookFromHeader(t *store.Task) (*webhook, bool) {
	l := t.Labels
	if !isHookRecord(t) || l[labelPushURL] == "" {
		return nil, false
	}
	h := &webhook{id: t.ID, url: l[labelPushURL], events: splitEvents(l[labelPushEvents]), task: l[labelPushTask],
		watch: l[labelPushOwner], by: strings.TrimPrefix(t.Owner, webhookOwnerPrefix), created: t.CreatedAt,
		expires: t.ExpiresAt, version: t.Version}
	if h.task != "" {
		from, err := strconv.ParseUint(l[labelPushFrom], 10, 64)
		if err != nil {
			return nil, false
		}
		h.fromSeq = from
	} else if h.watch == "" {
		return nil, false
	}
	return h, true
}

// redactHook returns a registration's record without its secret (t
// itself for any other record): what Router.Task shows.
func redactHook(t *store.Task) *store.Task {
	if t == nil || !isHookRecord(t) {
		return t
	}
	c := *t
	c.Variables = maps.Clone(t.Variables)
	delete(c.Variables, varPushSecret)
	var rec hookRecord
	if json.Unmarshal(t.Result, &rec) == nil && rec.Secret != "" {
		rec.Secret = ""
		c.Result, _ = json.Marshal(rec)
	}
	return &c
}

// staticHook is the webhook of a StaticWebhook; its id is derived from
// its settings, so that every replica names it alike.
func staticHook(s StaticWebhook) *webhook {
	events, _ := checkEvents(s.Events)
	watch := s.Owner
	if watch == "" {
		watch = allOwners
	}
	sum := sha256.Sum256([]byte(s.URL + "\x00" + watch + "\x00" + joinEvents(events)))
	return &webhook{id: "wh_static_" + hex.EncodeToString(sum[:8]), url: s.URL, secret: s.Secret, events: events,
		watch: watch, static: true}
}

// hookSet is the registrations known to this process. Its lock is a
// leaf: nothing is called while it is held.
type hookSet struct {
	mu      sync.RWMutex
	byID    map[string]*webhook
	byTask  map[string][]*webhook
	byWatch map[string][]*webhook
}

func (s *hookSet) add(h *webhook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(h.id)
	if s.byID == nil {
		s.byID, s.byTask, s.byWatch = map[string]*webhook{}, map[string][]*webhook{}, map[string][]*webhook{}
	}
	s.byID[h.id] = h
	if h.task != "" {
		s.byTask[h.task] = append(s.byTask[h.task], h)
	} else {
		s.byWatch[h.watch] = append(s.byWatch[h.watch], h)
	}
}

func (s *hookSet) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(id)
}

func (s *hookSet) removeLocked(id string) {
	h := s.byID[id]
	if h == nil {
		return
	}
	delete(s.byID, id)
	drop := func(m map[string][]*webhook, key string) {
		l := slices.DeleteFunc(slices.Clone(m[key]), func(x *webhook) bool { return x.id == id })
		if len(l) == 0 {
			delete(m, key)
		} else {
			m[key] = l
		}
	}
	if h.task != "" {
		drop(s.byTask, h.task)
	} else {
		drop(s.byWatch, h.watch)
	}
}

func (s *hookSet) get(id string) *webhook {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byID[id]
}

// empty reports whether no webhook is known: the engine's writes then
// cost nothing more.
func (s *hookSet) empty() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byID) == 0
}

// match returns the webhooks that watch t at now: those of the task,
// those of its owner's tasks (unless t is a scope of its own: a
// stateless anonymous client's task is no owner's to watch; see
// OwnerScope) and those of every owner's; not those whose record expired.
func (s *hookSet) match(t *store.Task, now time.Time) []*webhook {
	if isPushOwner(t.Owner) {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.byID) == 0 {
		return nil
	}
	var out []*webhook
	keep := func(hs []*webhook) {
		for _, h := range hs {
			if h.live(now) {
				out = append(out, h)
			}
		}
	}
	keep(s.byTask[t.ID])
	if t.Labels[labelScope] != scopeTask {
		keep(s.byWatch[t.Owner])
	}
	keep(s.byWatch[allOwners])
	return out
}

// count returns the number of stored webhooks known that have not
// expired at now (PushOptions.MaxWebhooks): one expired counts for no cap
// before the sweeper deletes its record.
func (s *hookSet) count(now time.Time) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, h := range s.byID {
		if !h.static && h.live(now) {
			n++
		}
	}
	return n
}

// countTask returns the number of task's webhooks registered by by that
// have not expired at now.
func (s *hookSet) countTask(task, by string, now time.Time) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, h := range s.byTask[task] {
		if h.by == by && h.live(now) {
			n++
		}
	}
	return n
}

// live reports whether h's record has not expired at now.
func (h *webhook) live(now time.Time) bool { return h.expires.IsZero() || now.Before(h.expires) }

// liveRecord reports whether registration record t has not expired at
// now (the sweeper deletes it a while after).
func liveRecord(t *store.Task, now time.Time) bool {
	return t.ExpiresAt.IsZero() || now.Before(t.ExpiresAt)
}

// mayWatch reports whether a change of task id (owner unknown) may
// concern a webhook: one watches it, or one watches an owner's tasks.
func (s *hookSet) mayWatch(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byTask[id]) > 0 || len(s.byWatch) > 0
}

// ofTask returns the webhooks that watch task id alone.
func (s *hookSet) ofTask(id string) []*webhook {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.byTask[id])
}

// all returns every known webhook.
func (s *hookSet) all() []*webhook {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*webhook, 0, len(s.byID))
	for _, h := range s.byID {
		out = append(out, h)
	}
	return out
}

// stored returns the ids and versions of the stored webhooks known.
func (s *hookSet) stored() map[string]uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]uint64{}
	for id, h := range s.byID {
		if !h.static {
			out[id] = h.version
		}
	}
	return out
}

// load reads every stored registration into the set, from the records'
// headers (one paged query; a record registered before its labels said
// it all is read whole), and forgets the ones no longer stored (deleted
// on another replica, or expired).
func (w *webhooks) load(ctx context.Context) error {
	st := w.e.Store()
	known := w.hooks.stored()
	seen := map[string]bool{}
	q := store.Query{Name: hookRequestName, Statuses: []mcptask.Status{mcptask.StatusCompleted}, Limit: store.MaxPageSize, Oldest: true}
	for {
		page, err := st.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("taskrouter: reading the webhooks: %w", err)
		}
		for _, t := range page.Tasks {
			if !isHookRecord(t) {
				continue
			}
			seen[t.ID] = true
			if v, ok := known[t.ID]; ok && v == t.Version {
				continue
			}
			h, ok := hookFromHeader(t)
			if !ok {
				full, err := st.Get(ctx, t.ID)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil {
					return fmt.Errorf("taskrouter: reading webhook %s: %w", t.ID, err)
				}
				if h, err = hookFromRecord(full); err != nil {
					w.e.Logger().Warn("skipping a malformed webhook record", "webhook", t.ID, "error", err)
					continue
				}
				h.secret = "" // read again at each delivery
			}
			w.hooks.add(h)
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	for id := range known {
		if !seen[id] {
			w.hooks.remove(id)
		}
	}
	return nil
}
