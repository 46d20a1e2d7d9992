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

	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/tui"
)

// runUI runs `taskbridge ui URL` or `taskbridge ui -- COMMAND ARGS`.
func runUI(ctx context.Context, g globals, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out := newPrinter(stdout, false)
	fs := newUIFlags(&g)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return report(out, stderr, errHelp)
		}
		return report(out, stderr, usagef("ui: %v", err))
	}
	g.noteExplicit(fs)
	tgt, err := uiTarget(g, args, fs.Args())
	if err != nil {
		return report(out, stderr, err)
	}
	d, err := parseDialect(g.dialect)
	if err != nil {
		return report(out, stderr, err)
	}
	u := tui.New(tui.Options{Target: tgt.String(), NoColor: os.Getenv("NO_COLOR") != "", History: history.Default()})
	defer u.Close()
	// A stdio server's stderr would scribble over the UI: it shows while
	// connecting, then is kept (the tail) and printed when the UI ends.
	logs := &serverLog{w: stderr}
	dctx, cancel := context.WithTimeoutCause(ctx, g.timeout, errTimedOut)
	c, err := dial(dctx, tgt, d, u.InputHandler, logs)
	cancel()
	if err != nil {
		return report(out, stderr, err)
	}
	defer c.Close()
	logs.hold()
	err = u.Run(ctx, c.Client, stdin, stdout)
	logs.release()
	if err != nil {
		fmt.Fprintln(stderr, "taskbridge: ui:", err)
		return exitFailed
	}
	return exitOK
}

// newUIFlags returns ui's flag set: -dialect, -token and -header, which
// set g's (the global flags' values are the defaults).
func newUIFlags(g *globals) *flag.FlagSet {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&g.dialect, "dialect", g.dialect, "auto, core or extension")
	fs.StringVar(&g.token, "token", g.token, "bearer token (HTTP)")
	fs.Var(&g.headers, "header", "HTTP header K=V (repeatable)")
	return fs
}

// uiTarget reads the server from ui's arguments: one URL, or a command
// line after "--"; with neither, the global -url or -stdio.
func uiTarget(g globals, args, rest []string) (target, error) {
	if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
		if len(rest) == 0 {
			return target{}, usagef("ui: give the server's command after --")
		}
		if g.explicit["token"] || g.explicit["header"] {
			return target{}, usagef("ui: -token and -header are for a server's URL (HTTP); a stdio server has no HTTP headers")
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
		return target{url: rest[0], header: g.httpHeader()}, nil
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
