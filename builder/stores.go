package builder

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"

	// The backends register their schemes with store.Register: a plain
	// path or "bbolt://" (bboltstore, imported above), "memory://",
	// "postgres://" and "postgresql://".
	_ "github.com/taskbridge/taskbridge/store/memory"
	_ "github.com/taskbridge/taskbridge/store/postgres"
)

// A StoreOpener opens the store that spec names (the whole spec, scheme
// included, as given to WithDB, EnvDB or OpenStore). ctx bounds the
// opening only. The server that opened the store closes it.
//
// Deprecated: backends register a store.Opener with store.Register; see
// RegisterStore.
type StoreOpener func(ctx context.Context, spec string) (store.Store, error)

// replaced holds the openers RegisterStore installed, by lower-case
// scheme; OpenStore consults it before the store registry.
var replaced = struct {
	sync.RWMutex
	open map[string]StoreOpener
}{open: map[string]StoreOpener{}}

// RegisterStore makes WithDB, EnvDB and OpenStore open a spec of the form
// "scheme://..." with open, ahead of the backend registered for that
// scheme in package store; the scheme is matched without regard to case.
// Registering a scheme again replaces its opener. It panics when scheme
// is not a URL scheme (a letter, then letters, digits, "+", "-" or ".")
// or open is nil. It is safe for concurrent use.
//
// Deprecated: a backend registers its schemes itself, with store.Register
// in an init function, and builder imports the module's backends
// (bboltstore, memory, postgres), so WithDB names any of them without a
// registration here. To open a backend with options of its own, open it
// with store.Open and store.WithBackendOptions (or its Open function) and
// hand it to WithStore.
func RegisterStore(scheme string, open StoreOpener) {
	if store.SchemeOf(scheme+"://") == "" {
		panic(fmt.Sprintf("builder: RegisterStore: %q is not a URL scheme", scheme))
	}
	if open == nil {
		panic(fmt.Sprintf("builder: RegisterStore(%q): nil opener", scheme))
	}
	replaced.Lock()
	defer replaced.Unlock()
	replaced.open[strings.ToLower(scheme)] = open
}

// StoreSchemes returns the schemes a spec may name, sorted: those the
// backends registered with store.Register and those given to
// RegisterStore.
func StoreSchemes() []string {
	out := store.Schemes()
	replaced.RLock()
	for s := range replaced.open {
		out = append(out, s)
	}
	replaced.RUnlock()
	slices.Sort(out)
	return slices.Compact(out)
}

// OpenStore opens the store a spec names (see WithDB) with store.Open: a
// spec of the form "scheme://..." with the backend registered for its
// scheme ("postgres", "postgresql", "memory", "bbolt", and any other a
// backend registered; RegisterStore's openers first), an unknown scheme
// fails, and anything else is a bbolt file path (its directory is created
// when missing). bolt options apply to a bbolt file only.
func OpenStore(ctx context.Context, spec string, bolt ...bboltstore.Option) (store.Store, error) {
	scheme := store.SchemeOf(spec)
	if scheme != "" {
		replaced.RLock()
		open := replaced.open[scheme]
		replaced.RUnlock()
		if open != nil {
			st, err := open(ctx, spec)
			if err != nil {
				return nil, fmt.Errorf("builder: opening %s store: %w", scheme, err)
			}
			return st, nil
		}
		if !slices.Contains(store.Schemes(), scheme) {
			return nil, fmt.Errorf("builder: no store is registered for scheme %q (registered: %s); a bbolt file is named by a path without a scheme",
				scheme, strings.Join(StoreSchemes(), ", "))
		}
	}
	backend := make([]any, len(bolt))
	for i, o := range bolt {
		backend[i] = o
	}
	st, err := store.Open(ctx, spec, store.WithBackendOptions(backend...))
	if err != nil {
		return nil, fmt.Errorf("builder: %w", err)
	}
	return st, nil
}
