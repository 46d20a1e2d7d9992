// Package pushtest is a webhook receiver for the tests of push: an HTTP
// server on 127.0.0.1 that records every request and answers with the
// statuses queued, then 200. Only tests import it.
package pushtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/push"
)

// Request is one request the receiver got.
type Request struct {
	Header http.Header
	Body   []byte
	At     time.Time
}

// Receiver records deliveries.
type Receiver struct {
	// URL is where it listens (the server's URL + "/hook").
	URL string

	mu      sync.Mutex
	got     []Request
	answers []int
	arrived chan struct{}
}

// New starts a receiver, stopped when the test ends, that answers the
// first requests with answers, in order.
func New(t testing.TB, answers ...int) *Receiver {
	t.Helper()
	rc := &Receiver{answers: answers, arrived: make(chan struct{}, 1024)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, Request{Header: req.Header.Clone(), Body: body, At: time.Now()})
		code := http.StatusOK
		if len(rc.answers) > 0 {
			code, rc.answers = rc.answers[0], rc.answers[1:]
		}
		rc.mu.Unlock()
		w.WriteHeader(code)
		select {
		case rc.arrived <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL + "/hook"
	return rc
}

// Answer queues statuses for the next requests.
func (rc *Receiver) Answer(codes ...int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.answers = append(rc.answers, codes...)
}

// Wait waits (at most 20s) until n requests arrived and returns all so
// far.
func (rc *Receiver) Wait(t testing.TB, n int) []Request {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if rc.Count() >= n {
			return rc.Got()
		}
		select {
		case <-rc.arrived:
		case <-deadline:
			t.Fatalf("the receiver got %d requests, want %d", rc.Count(), n)
		}
	}
}

// Got returns the requests so far.
func (rc *Receiver) Got() []Request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Request(nil), rc.got...)
}

// Count is how many requests arrived.
func (rc *Receiver) Count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

// Verified checks r's signature and timestamp with secret (push.Verify,
// then push.Receive on the same bytes) and returns its delivery.
func Verified(t testing.TB, secret string, r Request) *push.Delivery {
	t.Helper()
	require.NoError(t, push.Verify(secret, r.Header, r.Body, time.Now(), 0))
	var d push.Delivery
	require.NoError(t, json.Unmarshal(r.Body, &d))
	require.Equal(t, r.Header.Get(push.HeaderID), d.ID, "webhook-id is the body's id")
	return &d
}
