package postgres

import (
	"context"

	"github.com/taskbridge/taskbridge/store"
)

// The schemes this package registers with store.Register: a PostgreSQL
// URL, "postgres://..." or "postgresql://...", opens a Store (Open with
// the whole DSN and the *Options among store.Options.Backend, with the
// shared settings where those leave them unset).
const (
	Scheme    = "postgres"
	SchemeAlt = "postgresql"
)

func init() {
	store.Register(Scheme, openDSN)
	store.Register(SchemeAlt, openDSN)
}

func openDSN(ctx context.Context, dsn string, opts *store.Options) (store.Store, error) {
	var o Options
	if own, ok := store.BackendOptions[*Options](opts); ok && own != nil {
		o = *own
	}
	o.Options = o.Options.Merge(opts)
	return Open(ctx, dsn, &o)
}
