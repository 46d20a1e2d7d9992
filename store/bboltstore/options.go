package bboltstore

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// Options configure Open; nil means the defaults.
type Options struct {
	// Options are the settings every backend shares: its limits and its
	// clock.
	store.Options

	// NoSync skips the fsync after each commit. This is UNSAFE: it is
	// much faster, but a machine crash or power loss can lose
	// acknowledged writes or corrupt the file. Use it for tests and
	// throw-away data only. The default is false (every acknowledged
	// write is on stable storage).
	NoSync bool

	// Prefault maps the file with its pages populated (MAP_POPULATE,
	// Linux only; elsewhere it does nothing): Open, and every remap when
	// the file grows, fault in the whole file at once, so that reads
	// never take a page fault. It pays off on large stores read at
	// random — tasks/get and tasks/list over a million tasks — where each
	// read otherwise faults a page in, which costs most on virtual
	// machines (bench row 5 on a Firecracker VM: a tasks/list page at 1M
	// tasks 1.2 ms → 0.6 ms in the store). The price: Open reads the
	// whole file (45–75 ms for 900 MiB in the page cache; a cold file is
	// read from disk), a growth remap stalls readers and writers while it
	// populates, and the file counts in the process's resident set.
	// Default false.
	Prefault bool

	// CommitWindow is how long the committer may hold a busy batch open
	// for more writes before committing it (default DefaultCommitWindow,
	// 0: never). Every write waits for a commit and its fsyncs, and
	// writes queued while a commit runs share the next one; with a
	// window, when at least CommitWindowFrom writes were already waiting,
	// the committer also takes the writes arriving within it, so each
	// commit (bbolt rewriting the touched pages of every B+tree, and its
	// two fsyncs: a cost nearly fixed per commit) serves more of them.
	//
	// It pays only when the server is saturated by many more writers than
	// a batch holds. Measured on two cores, task round trips, server CPU
	// and p50: at 64 clients, 2 ms cut the CPU per round trip by 15–23%
	// in three measurements and by nothing in a fourth, with p50
	// unchanged or lower; at 16 and 32 clients, 1 ms cost 1–1.5 ms of p50
	// and 15% of throughput, and 2 ms at 16 clients 2.5 ms of p50 (the
	// clients end up waiting in step, so the window mostly adds its own
	// length). Hence off by default.
	CommitWindow time.Duration

	// OpenTimeout is how long Open waits for the exclusive file lock held
	// by another open store before failing: zero means
	// DefaultOpenTimeout, a negative value waits indefinitely.
	OpenTimeout time.Duration

	// Logger reports unusual events (failed commits, rolled back
	// batches); nil discards them.
	Logger *slog.Logger
}

// resolved returns o (nil: the defaults) with its defaults filled in, or
// an error naming the field that cannot work.
func (o *Options) resolved() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.CommitWindow < 0 {
		return r, fmt.Errorf("bboltstore: CommitWindow is negative (%s): 0 turns it off", r.CommitWindow)
	}
	r.Options = r.Options.WithDefaults()
	switch {
	case r.OpenTimeout == 0:
		r.OpenTimeout = DefaultOpenTimeout
	case r.OpenTimeout < 0:
		r.OpenTimeout = 0 // bbolt's: wait indefinitely
	}
	if r.CommitWindow == 0 {
		r.CommitWindow = DefaultCommitWindow
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// CommitWindow reports the store's commit window (Options.CommitWindow;
// 0: none).
func (s *Store) CommitWindow() time.Duration { return s.window }
