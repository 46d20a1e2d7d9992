package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/postgres"
)

// A StoreOpener opens the store that spec names (the whole spec, scheme
// included, as given to WithDB, EnvDB or OpenStore). ctx bounds the
// opening only. The server that opened the store closes it.
type StoreOpener func(ctx context.Context, spec string) (store.Store, error)

// storeSchemes is the scheme table of OpenStore: the backends a spec of
// the form "scheme://..." can name. Like database/sql's drivers it is
// one table for the process, so that a backend registered once (in an
// init function, say) serves every builder and TASKBRIDGE_DB.
var storeSchemes = struct {
	sync.RWMutex
	open map[string]StoreOpener
}{open: map[string]StoreOpener{
	"postgres":   openPostgres,
	"postgresql": openPostgres,
}}

func openPostgres(ctx context.Context, dsn string) (store.Store, error) {
	return postgres.Open(ctx, dsn)
}

// RegisterStore makes WithDB, EnvDB and OpenStore open a spec of the form
// "scheme://..." with open; the scheme is matched without regard to case.
// "postgres" and "postgresql" are registered by default (package
// store/postgres with its default options); a spec without a scheme is a
// bbolt file path, the embedded default. Registering a scheme again
// replaces its opener, for example to open PostgreSQL with options:
//
//	builder.RegisterStore("postgres", func(ctx context.Context, dsn string) (store.Store, error) {
//		return postgres.Open(ctx, dsn, postgres.WithSchema("tasks"))
//	})
//
// A new backend registers its own scheme the same way. RegisterStore
// panics when scheme is not a URL scheme (a letter, then letters, digits,
// "+", "-" or ".") or open is nil. It is safe for concurrent use.
func RegisterStore(scheme string, open StoreOpener) {
	if !validScheme(scheme) {
		panic(fmt.Sprintf("builder: RegisterStore: %q is not a URL scheme", scheme))
	}
	if open == nil {
		panic(fmt.Sprintf("builder: RegisterStore(%q): nil opener", scheme))
	}
	storeSchemes.Lock()
	defer storeSchemes.Unlock()
	storeSchemes.open[strings.ToLower(scheme)] = open
}

// StoreSchemes returns the schemes registered with RegisterStore, sorted.
func StoreSchemes() []string {
	storeSchemes.RLock()
	defer storeSchemes.RUnlock()
	out := make([]string, 0, len(storeSchemes.open))
	for s := range storeSchemes.open {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
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

// storeScheme returns the scheme of spec, lower case, when it has the form
// "scheme://...", and "" when it is a file path.
func storeScheme(spec string) string {
	scheme, _, ok := strings.Cut(spec, "://")
	if !ok || !validScheme(scheme) {
		return ""
	}
	return strings.ToLower(scheme)
}

// OpenStore opens the store a spec names (see WithDB): a spec of the form
// "scheme://..." with the opener registered for its scheme (RegisterStore;
// PostgreSQL by default), an unknown scheme fails, and anything else is a
// bbolt file path (its directory is created when missing). bolt options
// apply to a bbolt file only.
func OpenStore(ctx context.Context, spec string, bolt ...bboltstore.Option) (store.Store, error) {
	if scheme := storeScheme(spec); scheme != "" {
		storeSchemes.RLock()
		open := storeSchemes.open[scheme]
		storeSchemes.RUnlock()
		if open == nil {
			return nil, fmt.Errorf("builder: no store is registered for scheme %q (registered: %s); a bbolt file is named by a path without a scheme",
				scheme, strings.Join(StoreSchemes(), ", "))
		}
		st, err := open(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("builder: opening %s store: %w", scheme, err)
		}
		return st, nil
	}
	if dir := filepath.Dir(spec); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("builder: %w", err)
		}
	}
	st, err := bboltstore.Open(spec, bolt...)
	if err != nil {
		return nil, fmt.Errorf("builder: opening %s: %w", spec, err)
	}
	return st, nil
}
