package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// The registry of backends. A backend registers the schemes of the DSNs
// it opens in an init function, as database/sql drivers do, so that a
// program that imports it (a blank import will do) can open a store by
// DSN alone:
//
//	import (
//		"github.com/taskbridge/taskbridge/store"
//		_ "github.com/taskbridge/taskbridge/store/postgres"
//	)
//
//	st, err := store.Open(ctx, "postgres://tasks@db/tasks", nil)
//
// The backends of this module register these schemes: store/bboltstore
// "bbolt" and FileScheme (a DSN without a scheme is a bbolt file path),
// store/memory "memory", store/postgres "postgres" and "postgresql".

// An Opener opens the store a DSN names. It gets the whole DSN, scheme
// included (or the bare path, for FileScheme), and the options Open was
// given (nil: the defaults): the settings every backend shares, and out
// of Options.Backend the value of its own options type
// (BackendOptions). ctx bounds the opening only. The caller closes the
// store it returns.
type Opener func(ctx context.Context, dsn string, opts *Options) (Store, error)

// FileScheme is the scheme of a DSN without one: a file path. The backend
// registered for it (store/bboltstore) opens plain paths as well as
// "file://" DSNs.
const FileScheme = "file"

var registry = struct {
	sync.RWMutex
	open map[string]Opener
}{open: map[string]Opener{}}

// Register makes Open open the DSNs of scheme with open; the scheme is
// matched without regard to case. Backends call it from an init function.
// It panics when scheme is not a URL scheme (a letter, then letters,
// digits, "+", "-" or "."), when open is nil, or when the scheme is
// registered already: two backends cannot both own one. It is safe for
// concurrent use.
func Register(scheme string, open Opener) {
	if !validScheme(scheme) {
		panic(fmt.Sprintf("store: Register: %q is not a URL scheme", scheme))
	}
	if open == nil {
		panic(fmt.Sprintf("store: Register(%q): nil opener", scheme))
	}
	key := strings.ToLower(scheme)
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.open[key]; dup {
		panic(fmt.Sprintf("store: Register called twice for scheme %q", key))
	}
	registry.open[key] = open
}

// Schemes returns the registered schemes, lower case and sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.open))
	for s := range registry.open {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open opens the store dsn names with the backend registered for its
// scheme (see Register): a DSN of the form "scheme://...", or a file path
// (no scheme: FileScheme's backend). opts (nil: the defaults) are the
// settings every backend shares, and Options.Backend carries backends'
// own. It fails, naming the registered schemes, when no backend is
// registered for the scheme, and wraps the backend's error otherwise.
// The caller closes the store.
func Open(ctx context.Context, dsn string, opts *Options) (Store, error) {
	scheme := SchemeOf(dsn)
	key := scheme
	if key == "" {
		if dsn == "" {
			return nil, fmt.Errorf("%w: empty store DSN", ErrInvalid)
		}
		key = FileScheme
	}
	registry.RLock()
	open := registry.open[key]
	registry.RUnlock()
	if open == nil {
		what := fmt.Sprintf("scheme %q", key)
		if scheme == "" {
			what = "file paths (scheme " + FileScheme + ")"
		}
		return nil, fmt.Errorf("store: no store is registered for %s (registered: %s); import the backend's package to register it",
			what, strings.Join(Schemes(), ", "))
	}
	st, err := open(ctx, dsn, opts)
	if err != nil {
		if scheme == "" {
			return nil, fmt.Errorf("store: opening %s: %w", dsn, err)
		}
		// Not the DSN: it may hold a password.
		return nil, fmt.Errorf("store: opening %s store: %w", scheme, err)
	}
	return st, nil
}

// SchemeOf returns the scheme of dsn, lower case, when it has the form
// "scheme://...", and "" when it is a file path (a colon alone makes no
// scheme, nor does a "://" after a path separator).
func SchemeOf(dsn string) string {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || !validScheme(scheme) {
		return ""
	}
	return strings.ToLower(scheme)
}

// TrimScheme returns dsn without its "scheme://" prefix, or dsn itself
// when it has no scheme (a file path): what a file backend opens.
func TrimScheme(dsn string) string {
	if scheme := SchemeOf(dsn); scheme != "" {
		return dsn[len(scheme)+len("://"):]
	}
	return dsn
}

// validScheme reports whether s is a URL scheme (RFC 3986): a letter,
// then letters, digits, "+", "-" or ".".
func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}
