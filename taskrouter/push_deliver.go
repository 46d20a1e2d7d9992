package taskrouter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/push"
	"github.com/taskbridge/taskbridge/store"
)

// Delivering: a delivery record (push_scan.go) comes due, the scheduler
// hands it to Wake, which takes an attempt's place on the pool
// (push_workers.go; refused, it puts the delivery off), claims the
// record (its lease, on a shared store: one replica per attempt), holds
// it out of the due index for the attempt, and starts the attempt on the
// pool. The attempt POSTs it and records the outcome in one fenced
// write: delivered (completed), the next attempt's time (its WakeAt, the
// backoff), or failed once its attempts or its age ran out. A failure is
// then shown on the webhook (its record's labels: failures, last error)
// and in the task's event log (EventPushFailed, while the task is
// active).

// attemptGrace is how long past an attempt's timeout its record is held
// out of the due index: a process that dies mid-attempt leaves the
// delivery due then.
const attemptGrace = 5 * time.Second

// Recover resolves a delivery whose process stopped mid-attempt: after a
// restart nothing is needed (it is due, or will be once its attempt's
// hold passes), after a takeover the lease is released so that the
// scheduler runs it again. The interrupted attempt is not counted
// (whether it reached the receiver is unknown: the receiver
// deduplicates).
func (w *webhooks) Recover(ctx context.Context, t *store.Task, reason string) error {
	if reason != ReasonTakeover && !t.WakeAt.IsZero() {
		return nil
	}
	now := w.e.Now()
	u := store.Update{WakeAt: &now}
	if reason == ReasonTakeover {
		fence := t.Fence()
		u.Fence, u.ReleaseLease = &fence, true
	}
	return w.write(ctx, t.ID, u)
}

// Wake starts one attempt of a due delivery on the pool, or puts it off.
// It returns as soon as the attempt started: the scheduler's wake-up is
// never held by a receiver.
func (w *webhooks) Wake(ctx context.Context, t *store.Task) error {
	h := w.lookup(ctx, t.Request.Name)
	if h == nil || w.opts.Disabled {
		msg := "cancelled: the webhook was deleted"
		if w.opts.Disabled {
			msg = "cancelled: push is disabled on this server"
		}
		_, err := w.e.Store().Update(ctx, t.ID, store.Update{IfVersion: t.Version, Status: mcptask.StatusCancelled, StatusMessage: &msg})
		if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}
	key := receiverKey(h.url)
	now := w.e.Now()
	ok, retry, why := w.pool.acquire(key, now)
	if !ok {
		return w.putOff(ctx, h, t, retry, why)
	}
	started := false
	defer func() {
		if !started {
			w.pool.release(key, now, true, now) // no attempt: nothing learnt of the receiver
		}
	}()
	lease, err := w.e.TryLease(ctx, t.ID)
	if errors.Is(err, store.ErrLeased) || errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) {
		return nil // another replica attempts it, or it ended
	}
	if err != nil {
		return err
	}
	d := lease.Task
	if d.WakeAt.IsZero() || d.WakeAt.After(now) {
		// Another replica attempted it since the scheduler read it: the
		// next attempt is not due yet.
		if !lease.Held() {
			return nil
		}
		lease.Release()
		return w.write(ctx, d.ID, store.Update{Fence: lease.Fence(), ReleaseLease: true})
	}
	attempt, _ := strconv.Atoi(d.Labels[labelPushAttempts])
	attempt++
	hold := now.Add(w.opts.Timeout + attemptGrace)
	msg := fmt.Sprintf("attempt %d to %s", attempt, h.url)
	if err := w.write(ctx, d.ID, store.Update{Fence: lease.Fence(), WakeAt: &hold, StatusMessage: &msg}); err != nil {
		lease.Release()
		return err
	}
	started = true
	w.pool.run(func(pctx context.Context) { w.attempt(pctx, lease, h, d, key, now, attempt) })
	return nil
}

// putOff moves delivery t's next look to at (the pool gave it no place,
// for reason why; no attempt is counted), or, past its MaxAge, fails it.
func (w *webhooks) putOff(ctx context.Context, h *webhook, t *store.Task, at time.Time, why string) error {
	st := w.e.Store()
	attempts, _ := strconv.Atoi(t.Labels[labelPushAttempts])
	if !at.Before(t.CreatedAt.Add(w.opts.MaxAge)) {
		msg := fmt.Sprintf("gave up after %d attempts in %s: %s", attempts, w.e.Now().Sub(t.CreatedAt).Round(time.Second), why)
		_, err := st.Update(ctx, t.ID, store.Update{IfVersion: t.Version, Status: mcptask.StatusFailed, StatusMessage: &msg,
			Error: &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}})
		if err == nil {
			w.failed(ctx, h, t, attempts, msg)
		} else if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}
	at = at.Add(time.Duration(float64(max(at.Sub(w.e.Now()), time.Second)) * 0.2 * w.jitter())) // spread the looks of a receiver's deliveries
	msg := fmt.Sprintf("waiting: %s; next attempt at %s", why, mcptask.FormatTime(at))
	_, err := st.Update(ctx, t.ID, store.Update{IfVersion: t.Version, WakeAt: &at, StatusMessage: &msg})
	switch {
	case err == nil:
		w.sched.note(at)
	case errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound):
	default:
		return err
	}
	return nil
}

// attempt makes attempt number n of delivery d to webhook h, started at
// start, on the pool, and records its outcome. The pool stopping cuts it short: it is
// then due again at once, uncounted.
func (w *webhooks) attempt(ctx context.Context, lease *Lease, h *webhook, d *store.Task, key string, start time.Time, n int) {
	defer w.signals.Attempted.Send(d.ID)
	status, sendErr := w.send(ctx, h, d.ID, d.Variables[varPushBody])
	w.pool.release(key, start, !unanswered(sendErr) && ctx.Err() == nil, w.e.Now())
	lease.Release() // before the releasing write: see Lease.Release
	wctx := context.WithoutCancel(ctx)
	if sendErr != nil && ctx.Err() != nil {
		now := w.e.Now()
		msg := "the attempt was cut short by the server stopping; it is made again"
		w.report(d, w.write(wctx, d.ID, store.Update{Fence: lease.Fence(), ReleaseLease: lease.Held(), WakeAt: &now, StatusMessage: &msg}))
		return
	}
	labels := map[string]string{labelPushAttempts: strconv.Itoa(n)}
	if sendErr == nil {
		res, _ := json.Marshal(map[string]int{"status": status, "attempts": n})
		msg := fmt.Sprintf("delivered to %s (HTTP %d, attempt %d)", h.url, status, n)
		labels[labelPushError] = ""
		w.report(d, w.write(wctx, d.ID, store.Update{Fence: lease.Fence(), Status: mcptask.StatusCompleted, Result: res,
			StatusMessage: &msg, Labels: labels}))
		return
	}
	labels[labelPushError] = sendErr.Error()
	now := w.e.Now() // the wait counts from the failure
	next := now.Add(w.backoff(n))
	if n < w.opts.MaxAttempts && next.Before(d.CreatedAt.Add(w.opts.MaxAge)) {
		msg := fmt.Sprintf("attempt %d failed: %v; next attempt at %s", n, sendErr, mcptask.FormatTime(next))
		w.report(d, w.write(wctx, d.ID, store.Update{Fence: lease.Fence(), ReleaseLease: lease.Held(), WakeAt: &next,
			StatusMessage: &msg, Labels: labels}))
		return
	}
	why := fmt.Sprintf("gave up after %d attempts", n)
	if n < w.opts.MaxAttempts {
		why = fmt.Sprintf("gave up after %d attempts in %s", n, now.Sub(d.CreatedAt).Round(time.Second))
	}
	msg := fmt.Sprintf("%s: %v", why, sendErr)
	err := w.write(wctx, d.ID, store.Update{Fence: lease.Fence(), Status: mcptask.StatusFailed, StatusMessage: &msg,
		Error: &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}, Labels: labels})
	if err != nil {
		w.report(d, err)
		return
	}
	w.failed(wctx, h, d, n, msg)
}

// report logs an attempt's outcome the store did not take: the delivery
// is looked at again when its hold passes.
func (w *webhooks) report(d *store.Task, err error) {
	if err != nil {
		w.e.Logger().Warn("recording a push delivery's attempt; it is made again later", "delivery", d.ID, "error", err)
	}
}

// ExpiryMessage words the failure of a delivery still pending when its
// record expires (the sweeper's backstop: MaxAge ends it first).
func (w *webhooks) ExpiryMessage(t *store.Task) string {
	return "gave up: the delivery's record expired before it was delivered"
}

// Touched: nothing (no client names a delivery in a request).
func (w *webhooks) Touched(context.Context, *store.Task) {}

// write writes a push record and tells the scheduler of its wake-up.
func (w *webhooks) write(ctx context.Context, id string, u store.Update) error {
	t, err := w.e.Store().Update(ctx, id, u)
	if errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) {
		return nil // another replica took it over, or it ended meanwhile
	}
	if err != nil {
		return err
	}
	if u.WakeAt != nil {
		w.sched.note(t.WakeAt)
	}
	return nil
}

// lookup returns webhook id as its record is now, its secret included,
// or nil once it was deleted (here, or on another replica since this one
// learned of it) or expired. A static webhook is the configuration's.
func (w *webhooks) lookup(ctx context.Context, id string) *webhook {
	h := w.hooks.get(id)
	if h != nil && h.static {
		return h
	}
	t, err := w.e.Store().Get(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			w.hooks.remove(id)
		}
		return nil // the store errs: the delivery is looked at again after a backoff
	}
	fresh, err := hookFromRecord(t)
	if err != nil || !fresh.expires.IsZero() && !w.e.Now().Before(fresh.expires) {
		return nil
	}
	if h == nil {
		if header, ok := hookFromHeader(t); ok {
			w.hooks.add(header)
		}
	}
	return fresh
}

// backoff is the wait after a delivery's attempt-th failed attempt:
// RetryBase doubled per attempt, up to RetryMax, with 10% jitter.
func (w *webhooks) backoff(attempt int) time.Duration {
	d := w.opts.RetryBase
	for i := 1; i < attempt && d < w.opts.RetryMax; i++ {
		d *= 2
	}
	d = min(d, w.opts.RetryMax)
	return d + time.Duration(float64(d)*0.1*w.jitter())
}

// send POSTs a delivery's body to webhook h, signed now, and returns the
// HTTP status of a 2xx answer or why it failed.
func (w *webhooks) send(ctx context.Context, h *webhook, id string, body []byte) (int, error) {
	u, err := w.policy.checkURL(h.url)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer cancel()
	ctx = context.WithValue(ctx, dialKey{}, w.policy.loopbackOnly(u))
	now := w.e.Now()
	sig, err := push.Sign(h.secret, id, now, body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "taskbridge-push/1")
	req.Header.Set(push.HeaderID, id)
	req.Header.Set(push.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(push.HeaderSignature, sig)
	resp, err := w.http.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap() // the url is known: "Post \"...\":" says nothing more
		}
		return 0, fmt.Errorf("POST %s: %w", u.Redacted(), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, defaultPushResponseReadBytes))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return resp.StatusCode, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return 0, fmt.Errorf("HTTP %s: redirects are not followed", resp.Status)
	}
	return 0, fmt.Errorf("HTTP %s", resp.Status)
}

// failed shows a delivery that gave up: on its webhook (a stored one's
// labels, a static one's counters) and in its task's event log.
func (w *webhooks) failed(ctx context.Context, h *webhook, d *store.Task, attempts int, msg string) {
	st := w.e.Store()
	now := w.e.Now()
	w.e.Logger().Warn("push delivery gave up", "delivery", d.ID, "webhook", h.id, "task", d.Labels[labelPushTask], "error", msg)
	if h.static {
		h.mu.Lock()
		h.failures++
		h.lastErr, h.failedAt = msg, now
		h.mu.Unlock()
	} else {
		for range 5 { // count under compare-and-swap: replicas may fail deliveries of one webhook at once
			t, err := st.Get(ctx, h.id)
			if err != nil {
				break
			}
			n, _ := strconv.Atoi(t.Labels[labelPushFailures])
			_, err = st.Update(ctx, h.id, store.Update{IfVersion: t.Version, Annotate: true, Labels: map[string]string{
				labelPushFailures: strconv.Itoa(n + 1), labelPushError: msg, labelPushFailedAt: mcptask.FormatTime(now)}})
			if !errors.Is(err, store.ErrConflict) {
				break
			}
		}
	}
	seq, _ := strconv.ParseUint(d.Labels[labelPushSeq], 10, 64)
	data, _ := json.Marshal(mcptask.PushFailedEvent{WebhookID: h.id, DeliveryID: d.ID, Seq: seq, Attempts: attempts, Error: msg})
	_, err := w.e.Update(ctx, d.Labels[labelPushTask], store.Update{Events: []store.Event{{Type: mcptask.EventPushFailed, Data: data}}})
	if err != nil && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
		w.e.Logger().Warn("recording a failed push delivery in its task's events", "task", d.Labels[labelPushTask], "error", err)
	}
}
