package main

// The `ui` command: the terminal UI (package internal/tui) on a server
// given as a URL or as a command line after "--".

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/tui"
)

// runUI runs `taskbridge ui URL` or `taskbridge ui -- COMMAND ARGS`.
func runUI(ctx context.Context, g globals, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out := newPrinter(stderr, false)
	fs := newUIFlags(g)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return report(out, stderr, usagef("ui: %v", err))
	}
	tgt, err := uiTarget(g, args, fs.Args())
	if err != nil {
		return report(out, stderr, err)
	}
	d, err := parseDialect(fs.Lookup("dialect").Value.String())
	if err != nil {
		return report(out, stderr, err)
	}
	u := tui.New(tui.Options{Target: tgt.String(), NoColor: os.Getenv("NO_COLOR") != ""})
	defer u.Close()
	// A stdio server's stderr would scribble over the UI: it shows while
	// connecting, then is kept (the tail) and printed when the UI ends.
	logs := &serverLog{w: stderr}
	dctx, cancel := context.WithTimeout(ctx, g.timeout)
	c, err := dial(dctx, tgt, d, u.InputHandler, logs)
	cancel()
	if err != nil {
		return report(out, stderr, err)
	}
	defer c.Close()
	logs.hold()
	err = u.Run(ctx, c, stdin, stdout)
	logs.release()
	if err != nil {
		fmt.Fprintln(stderr, "taskbridge: ui:", err)
		return exitFailed
	}
	return exitOK
}

// newUIFlags returns ui's flag set: -dialect, defaulting to the global
// flag's value.
func newUIFlags(g globals) *flag.FlagSet {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("dialect", g.dialect, "auto, core or extension")
	return fs
}

// uiTarget reads the server from ui's arguments: one URL, or a command
// line after "--"; with neither, the global -url or -stdio.
func uiTarget(g globals, args, rest []string) (target, error) {
	if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
		if len(rest) == 0 {
			return target{}, usagef("ui: give the server's command after --")
		}
		return target{argv: rest}, nil
	}
	switch len(rest) {
	case 0:
		t, _, err := g.resolve()
		if err != nil {
			return target{}, usagef("ui needs a server: taskbridge ui URL, or taskbridge ui -- COMMAND ARGS")
		}
		return t, nil
	case 1:
		return target{url: rest[0]}, nil
	}
	return target{}, usagef("ui takes one URL, or a command after --: taskbridge ui -- %s", rest[0])
}

// serverLog passes a stdio server's stderr through until hold, keeps the
// last few KiB while the UI runs, and prints them at release.
type serverLog struct {
	mu   sync.Mutex
	w    io.Writer
	held bool
	buf  []byte
}

const serverLogKeep = 4 << 10

func (l *serverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return l.w.Write(p)
	}
	l.buf = append(l.buf, p...)
	if len(l.buf) > serverLogKeep {
		l.buf = l.buf[len(l.buf)-serverLogKeep:]
	}
	return len(p), nil
}

func (l *serverLog) hold() {
	l.mu.Lock()
	l.held = true
	l.mu.Unlock()
}

func (l *serverLog) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		fmt.Fprintf(l.w, "taskbridge: the server's stderr while the UI ran (last %d bytes):\n%s", len(l.buf), l.buf)
	}
	l.buf, l.held = nil, false
}
