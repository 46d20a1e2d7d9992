package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/client"
)

// statusLine shows a task's progress: on a terminal, one line redrawn with
// a spinner and the elapsed time; otherwise a line per change.
type statusLine struct {
	p       *printer
	tool    string
	start   time.Time
	mu      sync.Mutex
	text    string
	stopped bool
	done    chan struct{}
	once    sync.Once
}

func (p *printer) status(tool string) *statusLine {
	s := &statusLine{p: p, tool: tool, start: time.Now(), done: make(chan struct{}), text: "calling"}
	if p.tty {
		go s.spin()
	}
	return s
}

var spinner = []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")

func (s *statusLine) spin() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.mu.Lock()
			fmt.Fprintf(s.p.w, "\r\033[K%c %s  %s  %.1fs", spinner[i%len(spinner)], s.tool, s.text, time.Since(s.start).Seconds())
			s.mu.Unlock()
		}
	}
}

func (s *statusLine) update(ev client.Event) {
	text := ev.Kind.String()
	if ev.Task != nil {
		text = string(ev.Task.Status)
		if ev.Task.StatusMessage != "" {
			text += ": " + oneLine(ev.Task.StatusMessage, 50)
		}
	}
	if ev.Kind == client.EventInput {
		text = "asking you for input"
	}
	s.mu.Lock()
	s.text = text
	s.mu.Unlock()
	switch {
	case s.p.json:
		m := map[string]any{"event": ev.Kind.String()}
		if ev.Task != nil {
			m["task"] = taskJSON(ev.Task)
		}
		_ = s.p.line(m)
	case !s.p.tty:
		id := ""
		if ev.Task != nil {
			id = ev.Task.ID + " "
		}
		fmt.Fprintf(s.p.w, "%s %s%s (%.1fs)\n", ev.Kind, id, text, time.Since(s.start).Seconds())
	}
}

// interject runs write (a line on another stream) with the spinner's
// line cleared, so that the two do not mix on a terminal; the spinner
// draws itself again at its next tick.
func (s *statusLine) interject(write func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p.tty {
		fmt.Fprintf(s.p.w, "\r\033[K")
	}
	write()
}

func (s *statusLine) stop() {
	s.once.Do(func() {
		close(s.done)
		if s.p.tty {
			s.mu.Lock()
			fmt.Fprintf(s.p.w, "\r\033[K")
			s.mu.Unlock()
		}
	})
}
