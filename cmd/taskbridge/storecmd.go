package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/taskbridge/taskbridge/store/bboltstore"
)

// runStore runs `taskbridge store check FILE`: it checks a bbolt store
// file offline (bbolt's page check, then the store's own invariants) and
// prints what it found. It needs no server, and refuses a file a running
// server holds open.
func runStore(g globals, args []string, stdout, stderr io.Writer) int {
	out := newPrinter(stdout, g.json)
	if len(args) != 2 || args[0] != "check" {
		return report(out, stderr, usagef("usage: taskbridge store check FILE"))
	}
	path := args[1]
	if _, err := os.Stat(path); err != nil {
		return report(out, stderr, usagef("store check: %v", err))
	}
	err := bboltstore.Check(path)
	switch {
	case err == nil:
		if out.json {
			_ = out.line(map[string]any{"event": "store", "path": path, "ok": true})
		} else {
			fmt.Fprintf(stdout, "%s: ok\n", path)
		}
		return exitOK
	case errors.Is(err, bboltstore.ErrCorrupt):
		if out.json {
			_ = out.line(map[string]any{"event": "store", "path": path, "ok": false, "error": err.Error()})
			return exitFailed
		}
		fmt.Fprintf(stdout, "%s: corrupt\n", path)
		return report(out, stderr, failedf("%v", err))
	}
	return report(out, stderr, err)
}
