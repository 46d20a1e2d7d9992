package memory

import (
	"context"

	"github.com/taskbridge/taskbridge/store"
)

// Scheme is the scheme this package registers with store.Register:
// store.Open(ctx, "memory://", nil) returns a new, empty Store (New with the
// shared options). The rest of the DSN is ignored: every Open makes a
// store of its own, and nothing is shared between them.
const Scheme = "memory"

func init() {
	store.Register(Scheme, func(_ context.Context, _ string, opts *store.Options) (store.Store, error) {
		return New(opts), nil
	})
}
