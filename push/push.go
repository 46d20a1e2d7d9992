// Package push signs and verifies taskbridge's push deliveries: the
// webhooks a taskbridge server POSTs when a task it runs ends, needs
// input, pauses for its client or runs a step (see the README, "Push").
//
// A delivery is an HTTP POST with a JSON body (Delivery) and three
// headers in the style of Standard Webhooks (standardwebhooks.com):
//
//	webhook-id:        the delivery's id, the same on every retry (deduplicate by it)
//	webhook-timestamp: when this attempt was signed, in Unix seconds
//	webhook-signature: "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body))
//
// The key is the registration's secret, "whsec_" + base64 of its bytes,
// decoded. A receiver checks the signature (Verify) and that the
// timestamp is recent (a replayed request carries an old one), answers
// 2xx, and drops a delivery whose id it has seen before: a delivery is
// retried until a 2xx arrives, so it may arrive more than once.
//
// The package is a leaf (it imports nothing of the module but the task
// vocabulary): a receiver imports it without the server.
package push

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
)

// The headers of a delivery (Standard Webhooks' names).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every secret: "whsec_" + base64 of the key.
const SecretPrefix = "whsec_"

// Key sizes a secret may have, in bytes.
const (
	MinKeyBytes = 24
	MaxKeyBytes = 64
)

// DefaultTolerance is how far a delivery's timestamp may be from the
// receiver's clock, either way, in Verify: older ones may be replays.
const DefaultTolerance = 5 * time.Minute

// MaxBodyBytes bounds a delivery's body as Receive reads it: the event
// (at most 64 KiB of data by default) and the task around it.
const MaxBodyBytes = 1 << 20

// Errors Verify returns; test with errors.Is.
var (
	// ErrNoSignature: a header is missing or malformed.
	ErrNoSignature = errors.New("push: missing or malformed webhook headers")
	// ErrSignature: no signature matches the body with this secret.
	ErrSignature = errors.New("push: signature does not match")
	// ErrTimestamp: the timestamp is outside the tolerance (a replay, or
	// a clock far off).
	ErrTimestamp = errors.New("push: timestamp outside the tolerance")
	// ErrSecret: the secret is not "whsec_" + base64 of 24 to 64 bytes.
	ErrSecret = errors.New("push: malformed secret")
)

// NewSecret returns a new random secret: "whsec_" + base64 of 32 bytes.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// Key decodes a secret into the HMAC key, refusing one that is not
// "whsec_" + base64 of MinKeyBytes to MaxKeyBytes bytes.
func Key(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: it must start with %q", ErrSecret, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSecret, err)
	}
	if len(key) < MinKeyBytes || len(key) > MaxKeyBytes {
		return nil, fmt.Errorf("%w: the key is %d bytes, want %d to %d", ErrSecret, len(key), MinKeyBytes, MaxKeyBytes)
	}
	return key, nil
}

// Sign returns the webhook-signature value of a delivery: "v1," and the
// base64 HMAC-SHA256, keyed with the secret, of id, ".", the timestamp in
// Unix seconds, ".", and the body.
func Sign(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := Key(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, ts.Unix(), body)), nil
}

func mac(key []byte, id string, ts int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, ts, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a delivery: its headers h, its body exactly as received,
// against secret, with now as the receiver's clock and tolerance the
// largest distance allowed between now and the delivery's timestamp
// (zero means DefaultTolerance). The signature header may hold several
// space-separated signatures (a sender rotating its secret); one match
// is enough. It returns nil or an error matching ErrNoSignature,
// ErrSignature, ErrTimestamp or ErrSecret.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := Key(secret)
	if err != nil {
		return err
	}
	id, tsText, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return ErrNoSignature
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q", ErrNoSignature, tsText)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s off", ErrTimestamp, d.Round(time.Second))
	}
	want := mac(key, id, ts, body)
	for _, sig := range strings.Fields(sigs) {
		version, enc, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(enc)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}

// Receive reads a delivery from an HTTP request (at most MaxBodyBytes),
// verifies it with Verify (tolerance zero: DefaultTolerance) and decodes
// its body. Deduplicate by the returned Delivery's ID.
func Receive(secret string, req *http.Request, now time.Time) (*Delivery, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("push: reading the body: %w", err)
	}
	if len(body) > MaxBodyBytes {
		return nil, fmt.Errorf("push: the body is larger than %d bytes", MaxBodyBytes)
	}
	if err := Verify(secret, req.Header, body, now, 0); err != nil {
		return nil, err
	}
	var d Delivery
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("push: decoding the body: %w", err)
	}
	if d.ID != req.Header.Get(HeaderID) {
		return nil, fmt.Errorf("%w: the body's id %q is not the header's", ErrSignature, d.ID)
	}
	return &d, nil
}

// Delivery is the JSON body of a push delivery.
type Delivery struct {
	// ID is the delivery's id, the webhook-id header: the same on every
	// attempt, and for the same event of the same task to the same
	// webhook (a receiver drops the ones it has seen).
	ID string `json:"id"`
	// Type is what the delivery reports: one of the mcptask.WebhookEvent
	// values (terminal, input_required, paused, step).
	Type mcptask.WebhookEvent `json:"type"`
	// WebhookID is the registration that asked for it.
	WebhookID string `json:"webhookId"`
	// Task is the task as it was when the delivery was made (its status
	// may have moved on since: Event says what happened).
	Task mcptask.CoreTask `json:"task"`
	// Event is the entry of the task's event log that the delivery
	// reports.
	Event Event `json:"event"`
}

// Event is an entry of a task's event log as a delivery carries it.
type Event struct {
	// Seq numbers the event in its task's log (1, 2, 3, ...).
	Seq uint64 `json:"seq"`
	// Type is the event's kind: mcptask.EventStatus, EventStepStarted,
	// EventStepEnded, EventPaused, ...
	Type mcptask.EventType `json:"type"`
	// At is when it happened (RFC 3339).
	At string `json:"at"`
	// Data is the event's payload (for the mcptask types, the matching
	// mcptask payload struct), absent for none.
	Data json.RawMessage `json:"data,omitempty"`
}
