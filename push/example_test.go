package push_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/push"
)

// A webhook receiver: it verifies each delivery (signature and
// timestamp), drops the ones it has seen (a delivery is retried until a
// 2xx arrives, so it may come twice), and answers 204.
func Example_receiver() {
	secret := push.NewSecret() // the secret io.taskbridge/webhooks/register returned
	var mu sync.Mutex
	seen := map[string]bool{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := push.Receive(secret, r, time.Now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		dup := seen[d.ID]
		seen[d.ID] = true
		mu.Unlock()
		if !dup {
			fmt.Printf("task %s: %s (%s)\n", d.Task.TaskID, d.Type, d.Task.Status)
		}
		w.WriteHeader(http.StatusNoContent)
	})

	// What a taskbridge server sends, twice (a retry), and a forgery.
	srv := httptest.NewServer(handler)
	defer srv.Close()
	body := []byte(`{"id":"whd_5f2c","type":"terminal","webhookId":"wh_91ab","task":{"taskId":"3f1c9e0b","status":"completed","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:04Z","ttl":3600000},"event":{"seq":4,"type":"status","at":"2026-01-01T00:00:04Z","data":{"status":"completed"}}}`)
	send := func(secret string) int {
		now := time.Now()
		sig, _ := push.Sign(secret, "whd_5f2c", now, body)
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header.Set(push.HeaderID, "whd_5f2c")
		req.Header.Set(push.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(push.HeaderSignature, sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println(send(secret), send(secret), send(push.NewSecret()))
	// Output:
	// task 3f1c9e0b: terminal (completed)
	// 204 204 401
}
