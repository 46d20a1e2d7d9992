package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/mcptask"
)

// Following a task's events (-follow): what its work reports while it
// runs (progress, log lines, output) and, for a workflow, its steps'
// attempts, one line each as it happens. Human output writes them to
// stderr, each line starting with eventPrefix, so that a script reading
// stdout gets the result alone; -json writes them to stdout as JSON lines
// whose "event" is "task_event", beside the status and result lines.
// Status events are left out: the status line shows them. While a
// question waits for an answer on the terminal, the lines wait too.

// eventPrefix starts every event line on stderr.
const eventPrefix = "  | "

// eventPrinter prints a task's events for -follow.
type eventPrinter struct {
	out    *printer
	stderr io.Writer
	status *statusLine // the spinner to clear before a line, if any
	asker  *asker      // a question being asked holds the lines back
	mu     sync.Mutex
}

// print shows one event (from the client's event goroutine).
func (p *eventPrinter) print(ev client.TaskEvent) {
	if ev.Type == mcptask.EventStatus {
		return
	}
	if p.out.json {
		m := map[string]any{"event": "task_event", "taskId": ev.TaskID, "seq": ev.Seq, "type": ev.Type, "line": ev.Line()}
		if !ev.At.IsZero() {
			m["at"] = ev.At.UTC().Format(time.RFC3339Nano)
		}
		if len(ev.Data) > 0 {
			m["data"] = json.RawMessage(ev.Data)
		}
		_ = p.out.line(m)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.asker != nil {
		p.asker.mu.Lock() // not in the middle of a question
		defer p.asker.mu.Unlock()
	}
	write := func() { fmt.Fprintf(p.stderr, "%s%s\n", eventPrefix, ev.Line()) }
	if p.status != nil {
		p.status.interject(write)
		return
	}
	write()
}

// lockedWriter serializes the writes of several goroutines to one writer,
// one Write at a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
