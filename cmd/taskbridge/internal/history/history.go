// Package history is the local record of the tasks the taskbridge CLI and
// terminal UI created or opened: for each, its id, the server it lives on,
// the tool or workflow it runs and when it was created. The protocol gives
// a client no way back to a task whose id it lost (the tasks extension has
// no tasks/list, and a core-dialect tasks/list without authentication
// shows only the current session's tasks), so the CLI keeps the ids
// itself: `taskbridge tasks list` shows them with their status from the
// server, and the UI's Tasks tab starts with them.
//
// The record is one file of JSON lines, in the user's state directory
// ($XDG_STATE_HOME/taskbridge/history, by default
// ~/.local/state/taskbridge/history; TASKBRIDGE_HISTORY names another file,
// or "off"). Every change reads the file, applies itself and replaces the
// file by a rename, under an exclusive lock on a file beside it, so CLI
// runs and UIs working at once lose no entry. The file keeps at most Max
// entries: the ones seen least recently go first.
package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/internal/filelock"
)

// EnvPath names the environment variable that overrides the history
// file's path; the value "off" turns the history off.
const EnvPath = "TASKBRIDGE_HISTORY"

// DefaultMax is how many entries a history keeps by default.
const DefaultMax = 1000

// Kinds of task: what an entry's Name names.
const (
	KindTool     = "tool"
	KindWorkflow = "workflow"
)

// Entry is one remembered task.
type Entry struct {
	// ID is the task id.
	ID string `json:"id"`
	// Server is the server the task lives on: its URL, or the command
	// line of a stdio server.
	Server string `json:"server"`
	// Name is the tool or workflow the task runs; empty when unknown (a
	// task opened by id that this computer did not create).
	Name string `json:"name,omitempty"`
	// Kind says what Name is: KindTool or KindWorkflow.
	Kind string `json:"kind,omitempty"`
	// Created is when the task was created (the server's time when it
	// said, else when it was recorded).
	Created time.Time `json:"created"`
	// Seen is when the CLI or UI last recorded the task.
	Seen time.Time `json:"seen"`
}

// History is a history file. A nil *History is a history that is off:
// it records nothing and lists nothing.
type History struct {
	path string
	max  int
	mu   sync.Mutex // one change at a time within this process
}

// Open returns the history kept in path, holding at most max entries
// (DefaultMax when max <= 0). The file and its directory are created on
// the first change.
func Open(path string, max int) *History {
	if max <= 0 {
		max = DefaultMax
	}
	return &History{path: path, max: max}
}

// Default opens the history at the path the environment names (see the
// package documentation). It returns nil, a history that is off, when
// TASKBRIDGE_HISTORY is "off" or no state directory can be found.
func Default() *History {
	p, err := DefaultPath()
	if err != nil || p == "" {
		return nil
	}
	return Open(p, DefaultMax)
}

// DefaultPath returns the history file's path: $TASKBRIDGE_HISTORY, else
// $XDG_STATE_HOME/taskbridge/history, else ~/.local/state/taskbridge/history
// (on Windows, taskbridge\history in the local application data folder).
// It returns "" when the history is off.
func DefaultPath() (string, error) {
	if p := os.Getenv(EnvPath); p != "" {
		if p == "off" {
			return "", nil
		}
		return p, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "taskbridge", "history"), nil
	}
	if runtime.GOOS == "windows" {
		d, err := os.UserCacheDir() // %LocalAppData%
		if err != nil {
			return "", err
		}
		return filepath.Join(d, "taskbridge", "history"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "taskbridge", "history"), nil
}

// Path returns the file the history is kept in ("" when off).
func (h *History) Path() string {
	if h == nil {
		return ""
	}
	return h.path
}

// Record remembers a task, or refreshes what is known of it: a name, kind
// or creation time already recorded is kept when e has none, and Seen
// becomes now.
func (h *History) Record(e Entry) error {
	if h == nil || e.ID == "" || e.Server == "" {
		return nil
	}
	now := time.Now()
	return h.change(func(all []Entry) []Entry {
		e.Seen = now
		if e.Created.IsZero() {
			e.Created = now
		}
		i := slices.IndexFunc(all, func(x Entry) bool { return x.ID == e.ID && x.Server == e.Server })
		if i >= 0 {
			old := all[i]
			if e.Name == "" {
				e.Name, e.Kind = old.Name, old.Kind
			}
			if !old.Created.IsZero() && old.Created.Before(e.Created) {
				e.Created = old.Created
			}
			all = slices.Delete(all, i, i+1)
		}
		return append(all, e)
	})
}

// Lookup returns the entry of task id on server.
func (h *History) Lookup(server, id string) (Entry, bool, error) {
	all, err := h.List(server)
	if err != nil {
		return Entry{}, false, err
	}
	for _, e := range all {
		if e.ID == id {
			return e, true, nil
		}
	}
	return Entry{}, false, nil
}

// List returns the entries of server ("" for every server), oldest
// created first.
func (h *History) List(server string) ([]Entry, error) {
	if h == nil {
		return nil, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	all, err := h.read()
	if err != nil {
		return nil, err
	}
	all = slices.DeleteFunc(all, func(e Entry) bool { return server != "" && e.Server != server })
	slices.SortStableFunc(all, func(a, b Entry) int { return a.Created.Compare(b.Created) })
	return all, nil
}

// Forget drops the entries of the given task ids on server (server ""
// matches every server; no ids means every task of server) and returns how
// many it dropped. The tasks themselves are not touched.
func (h *History) Forget(server string, ids ...string) (int, error) {
	if h == nil {
		return 0, nil
	}
	n := 0
	err := h.change(func(all []Entry) []Entry {
		before := len(all)
		all = slices.DeleteFunc(all, func(e Entry) bool {
			return (server == "" || e.Server == server) && (len(ids) == 0 || slices.Contains(ids, e.ID))
		})
		n = before - len(all)
		return all
	})
	return n, err
}

// change applies f to every entry (ordered by Seen, oldest first) under
// the lock, keeps the newest max, and writes the file.
func (h *History) change(f func([]Entry) []Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(h.path), 0o700); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	lf, err := os.OpenFile(h.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer lf.Close()
	unlock, err := filelock.Lock(lf)
	if err != nil {
		return fmt.Errorf("history: locking %s: %w", lf.Name(), err)
	}
	defer unlock()
	all, err := h.read()
	if err != nil {
		return err
	}
	slices.SortStableFunc(all, func(a, b Entry) int { return a.Seen.Compare(b.Seen) })
	all = f(all)
	if len(all) > h.max {
		all = all[len(all)-h.max:]
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range all {
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(h.path), filepath.Base(h.path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing to remove
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("history: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if err := os.Rename(tmp.Name(), h.path); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}

// read reads every entry; a missing file is an empty history, and lines
// that do not parse (a file edited by hand) are skipped.
func (h *History) read() ([]Entry, error) {
	f, err := os.Open(h.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Entry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.ID == "" || e.Server == "" {
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history: reading %s: %w", h.path, err)
	}
	return out, nil
}
