package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// A task page's event log, live: GET {prefix}/tasks/{id}/events streams
// the task's events (taskrouter.Streams.Events) as server-sent
// events, each "event: taskevent" with the event's sequence number as its
// id (so a browser's EventSource resumes after the last one it had when
// the connection drops: it sends Last-Event-ID) and {"seq", "type", "at",
// "line"} as data; "event: end" once the task has ended and its last
// event was sent. The page's script appends each line to the page's event
// list.

// taskEventLine is the data of one taskevent.
type taskEventLine struct {
	Seq  uint64 `json:"seq"`
	Type string `json:"type"`
	At   string `json:"at,omitempty"`
	Line string `json:"line"`
}

// startEvents opens a server-sent event stream on w (its headers, no
// proxy buffering, a reconnect after a second) and sends first at once.
func startEvents(w http.ResponseWriter, fl http.Flusher, first string) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n"+first)
	fl.Flush()
}

// taskEvents streams task id's events to a page of viewer v.
func (d *Dashboard) taskEvents(w http.ResponseWriter, r *http.Request, v Viewer, id string) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	if _, ok := d.viewable(w, r, v, id); !ok {
		return
	}
	var after uint64
	if s := r.Header.Get("Last-Event-ID"); s != "" {
		after, _ = strconv.ParseUint(s, 10, 64)
	}
	startEvents(w, fl, "")
	err := d.r.Streams().Events(r.Context(), id, after, func(e store.Event) error {
		data, _ := json.Marshal(taskEventLine{Seq: e.Seq, Type: string(e.Type), At: e.At.UTC().Format(time.RFC3339), Line: mcptask.EventLine(e.Type, e.Data)})
		if _, err := fmt.Fprintf(w, "id: %d\nevent: taskevent\ndata: %s\n\n", e.Seq, data); err != nil {
			return err
		}
		fl.Flush()
		return nil
	})
	switch {
	case err == nil, errors.Is(err, store.ErrNotFound):
		fmt.Fprint(w, "event: end\ndata: {}\n\n")
		fl.Flush()
	case r.Context().Err() == nil:
		d.log.Debug("dashboard: streaming a task's events", "task", id, "err", err)
	}
}
