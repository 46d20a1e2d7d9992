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
// hands it to Wake, which claims it (its lease, on a shared store: one
// replica per attempt), makes one attempt, and records the outcome in
// one fenced write: delivered (completed), the next attempt's time (its
// WakeAt, the backoff), or failed once its attempts or its age ran out.
// A failure is then shown on the webhook (its record's labels: failures,
// last error) and in the task's event log (EventPushFailed, while the
// task is active).

// Recover resolves a delivery whose process stopped mid-attempt: after a
// restart nothing is needed (it is still due), after a takeover the
// lease is released so that the scheduler runs it again. The interrupted
// attempt is not counted (whether it reached the receiver is unknown: the
// receiver deduplicates).
func (w *webhooks) Recover(ctx context.Context, t *store.Task, reason string) error {
	if reason != ReasonTakeover && !t.WakeAt.IsZero() {
		return nil
	}
	now := w.r.opts.Now()
	u := store.Update{WakeAt: &now}
	if reason == ReasonTakeover {
		fence := t.Fence()
		u.Fence, u.ReleaseLease = &fence, true
	}
	return w.write(ctx, t.ID, u)
}

// Wake makes one attempt of a due delivery.
func (w *webhooks) Wake(ctx context.Context, t *store.Task) error {
	r := w.r
	lease, err := r.TryLease(ctx, t.ID)
	if errors.Is(err, store.ErrLeased) || errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) {
		return nil // another replica attempts it, or it ended
	}
	if err != nil {
		return err
	}
	d := lease.Task
	now := r.opts.Now()
	if d.WakeAt.IsZero() || d.WakeAt.After(now) {
		// Another replica attempted it since the scheduler read it: the
		// next attempt is not due yet.
		if !lease.Held() {
			return nil
		}
		lease.Release()
		return w.write(ctx, d.ID, store.Update{Fence: lease.Fence(), ReleaseLease: true})
	}
	h := w.lookup(ctx, d.Request.Name)
	if h == nil || w.opts.Disabled {
		lease.Release()
		msg := "cancelled: the webhook was deleted"
		if w.opts.Disabled {
			msg = "cancelled: push is disabled on this server"
		}
		return w.write(ctx, d.ID, store.Update{Fence: lease.Fence(), Status: mcptask.StatusCancelled, StatusMessage: &msg})
	}
	attempts, _ := strconv.Atoi(d.Labels[labelPushAttempts])
	attempts++
	status, sendErr := w.send(ctx, h, d.ID, d.Variables[varPushBody])
	lease.Release() // before the releasing write: see Lease.Release
	labels := map[string]string{labelPushAttempts: strconv.Itoa(attempts)}
	defer w.signals.Attempted.Send(d.ID)
	if sendErr == nil {
		res, _ := json.Marshal(map[string]int{"status": status, "attempts": attempts})
		msg := fmt.Sprintf("delivered to %s (HTTP %d, attempt %d)", h.url, status, attempts)
		labels[labelPushError] = ""
		return w.write(ctx, d.ID, store.Update{Fence: lease.Fence(), Status: mcptask.StatusCompleted, Result: res,
			StatusMessage: &msg, Labels: labels})
	}
	labels[labelPushError] = sendErr.Error()
	now = r.opts.Now() // the wait counts from the failure
	next := now.Add(w.backoff(attempts))
	if attempts < w.opts.MaxAttempts && next.Before(d.CreatedAt.Add(w.opts.MaxAge)) {
		msg := fmt.Sprintf("attempt %d failed: %v; next attempt at %s", attempts, sendErr, mcptask.FormatTime(next))
		return w.write(ctx, d.ID, store.Update{Fence: lease.Fence(), ReleaseLease: lease.Held(), WakeAt: &next,
			StatusMessage: &msg, Labels: labels})
	}
	why := fmt.Sprintf("gave up after %d attempts", attempts)
	if attempts < w.opts.MaxAttempts {
		why = fmt.Sprintf("gave up after %d attempts in %s", attempts, now.Sub(d.CreatedAt).Round(time.Second))
	}
	msg := fmt.Sprintf("%s: %v", why, sendErr)
	err = w.write(ctx, d.ID, store.Update{Fence: lease.Fence(), Status: mcptask.StatusFailed, StatusMessage: &msg,
		Error: &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}, Labels: labels})
	if err != nil {
		return err
	}
	w.failed(ctx, h, d, attempts, msg)
	return nil
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
	t, err := w.r.st.Update(ctx, id, u)
	if errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) {
		return nil // another replica took it over, or it ended meanwhile
	}
	if err != nil {
		return err
	}
	if u.WakeAt != nil {
		w.r.sched.note(t.WakeAt)
	}
	return nil
}

// lookup returns webhook id as it is now, or nil once it was deleted. On
// a shared store the record is read (it may have been deleted on
// another replica since this one learned of it).
func (w *webhooks) lookup(ctx context.Context, id string) *webhook {
	h := w.hooks.get(id)
	if h != nil && (h.static || !w.r.shared) {
		return h
	}
	t, err := w.r.st.Get(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			w.hooks.remove(id)
			return nil
		}
		return h // the store errs: go with what is known
	}
	fresh, err := hookFromRecord(t)
	if err != nil {
		return nil
	}
	if h == nil {
		w.hooks.add(fresh)
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
	now := w.r.opts.Now()
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
	r := w.r
	now := r.opts.Now()
	r.log.Warn("push delivery gave up", "delivery", d.ID, "webhook", h.id, "task", d.Labels[labelPushTask], "error", msg)
	if h.static {
		h.mu.Lock()
		h.failures++
		h.lastErr, h.failedAt = msg, now
		h.mu.Unlock()
	} else {
		for range 5 { // count under compare-and-swap: replicas may fail deliveries of one webhook at once
			t, err := r.st.Get(ctx, h.id)
			if err != nil {
				break
			}
			n, _ := strconv.Atoi(t.Labels[labelPushFailures])
			_, err = r.st.Update(ctx, h.id, store.Update{IfVersion: t.Version, Annotate: true, Labels: map[string]string{
				labelPushFailures: strconv.Itoa(n + 1), labelPushError: msg, labelPushFailedAt: mcptask.FormatTime(now)}})
			if !errors.Is(err, store.ErrConflict) {
				break
			}
		}
	}
	seq, _ := strconv.ParseUint(d.Labels[labelPushSeq], 10, 64)
	data, _ := json.Marshal(mcptask.PushFailedEvent{WebhookID: h.id, DeliveryID: d.ID, Seq: seq, Attempts: attempts, Error: msg})
	_, err := r.Update(ctx, d.Labels[labelPushTask], store.Update{Events: []store.Event{{Type: mcptask.EventPushFailed, Data: data}}})
	if err != nil && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
		r.log.Warn("recording a failed push delivery in its task's events", "task", d.Labels[labelPushTask], "error", err)
	}
}
