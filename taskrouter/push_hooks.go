package taskrouter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
// and the registrant), so that no client's tasks/list shows it and
// tasks/get finds it for nobody. Its result holds the registration (the
// secret included), its labels what a listing shows. A webhook for one
// task lives as long as the task (plus PushOptions.Retention); one for an
// owner's tasks until it is deleted. Static webhooks (PushOptions.Hooks)
// live in memory only, on every replica alike.
//
// Every replica keeps the registrations in memory (hookSet), loaded on
// Start and, on a shared store, re-read every PushOptions.RefreshInterval:
// the engine's writes are matched against it without a store read.

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
	// varPushBody is a delivery's body, the same bytes on every attempt.
	varPushBody = "push.body"
)

func isPushOwner(owner string) bool {
	return strings.HasPrefix(owner, webhookOwnerPrefix) || strings.HasPrefix(owner, deliveryOwnerPrefix)
}

// webhook is a registration, as the engine matches and delivers it.
type webhook struct {
	id      string
	url     string
	secret  string
	events  []mcptask.WebhookEvent
	task    string // the one task watched; "" for an owner's tasks
	watch   string // the owner whose tasks it watches (allOwners: every owner's); "" with task
	by      string // the registrant, who lists and deletes it
	created time.Time
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

// hookRecord is a registration's stored result.
type hookRecord struct {
	URL     string                 `json:"url"`
	Secret  string                 `json:"secret"`
	Events  []mcptask.WebhookEvent `json:"events"`
	TaskID  string                 `json:"taskId,omitempty"`
	FromSeq uint64                 `json:"fromSeq,omitempty"`
	Watch   string                 `json:"owner,omitempty"`
	By      string                 `json:"by"`
	Created time.Time              `json:"createdAt"`
}

// hookFromRecord reads a registration's record; an error for one that is
// not one.
func hookFromRecord(t *store.Task) (*webhook, error) {
	if t.Labels[LabelKind] != KindWebhook {
		return nil, fmt.Errorf("task %s is not a webhook", t.ID)
	}
	var rec hookRecord
	if err := json.Unmarshal(t.Result, &rec); err != nil {
		return nil, fmt.Errorf("webhook %s: %w", t.ID, err)
	}
	return &webhook{id: t.ID, url: rec.URL, secret: rec.Secret, events: rec.Events, task: rec.TaskID, fromSeq: rec.FromSeq,
		watch: rec.Watch, by: rec.By, created: rec.Created, version: t.Version}, nil
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

// match returns the webhooks that watch t.
func (s *hookSet) match(t *store.Task) []*webhook {
	if isPushOwner(t.Owner) {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.byID) == 0 {
		return nil
	}
	var out []*webhook
	out = append(out, s.byTask[t.ID]...)
	out = append(out, s.byWatch[t.Owner]...)
	return append(out, s.byWatch[allOwners]...)
}

// mayWatch reports whether a change of task id (owner unknown) may
// concern a webhook: one watches it, or one watches an owner's tasks.
func (s *hookSet) mayWatch(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byTask[id]) > 0 || len(s.byWatch) > 0
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

// load reads every stored registration into the set, and forgets the
// ones no longer stored (deleted on another replica, or expired).
func (w *webhooks) load(ctx context.Context) error {
	known := w.hooks.stored()
	seen := map[string]bool{}
	q := store.Query{Name: hookRequestName, Statuses: []mcptask.Status{mcptask.StatusCompleted}, Limit: store.MaxPageSize, Oldest: true}
	for {
		page, err := w.r.st.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("taskrouter: reading the webhooks: %w", err)
		}
		for _, t := range page.Tasks {
			if t.Labels[LabelKind] != KindWebhook || !strings.HasPrefix(t.Owner, webhookOwnerPrefix) {
				continue
			}
			seen[t.ID] = true
			if v, ok := known[t.ID]; ok && v == t.Version {
				continue
			}
			full, err := w.r.st.Get(ctx, t.ID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("taskrouter: reading webhook %s: %w", t.ID, err)
			}
			h, err := hookFromRecord(full)
			if err != nil {
				w.r.log.Warn("skipping a malformed webhook record", "webhook", t.ID, "error", err)
				continue
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
