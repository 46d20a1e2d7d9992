package builder

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"

	// The backends register their schemes with store.Register: a plain
	// path or "bbolt://" (bboltstore, imported above), "memory://",
	// "postgres://" and "postgresql://".
	_ "github.com/taskbridge/taskbridge/store/memory"
	_ "github.com/taskbridge/taskbridge/store/postgres"
)

// StoreSchemes returns the schemes a spec may name, sorted: those the
// backends registered with store.Register.
func StoreSchemes() []string { return store.Schemes() }

// OpenStore opens the store a spec names (see WithDB) with store.Open: a
// spec of the form "scheme://..." with the backend registered for its
// scheme ("postgres", "postgresql", "memory", "bbolt", and any other a
// backend registered), an unknown scheme
// fails, and anything else is a bbolt file path (its directory is created
// when missing). bolt (nil: the defaults) applies to a bbolt file only.
func OpenStore(ctx context.Context, spec string, bolt *bboltstore.Options) (store.Store, error) {
	scheme := store.SchemeOf(spec)
	if scheme != "" && !slices.Contains(store.Schemes(), scheme) {
		return nil, fmt.Errorf("builder: no store is registered for scheme %q (registered: %s); a bbolt file is named by a path without a scheme",
			scheme, strings.Join(StoreSchemes(), ", "))
	}
	st, err := store.Open(ctx, spec, &store.Options{Backend: []any{bolt}})
	if err != nil {
		return nil, fmt.Errorf("builder: %w", err)
	}
	return st, nil
}
