package postgres

import (
	"context"

	"github.com/taskbridge/taskbridge/store"
)

// The schemes this package registers with store.Register: a PostgreSQL
// URL, "postgres://..." or "postgresql://...", opens a Store (Open with
// the whole DSN, the shared options and the Option values among
// store.Options.Backend, such as WithSchema).
const (
	Scheme    = "postgres"
	SchemeAlt = "postgresql"
)

func init() {
	store.Register(Scheme, openDSN)
	store.Register(SchemeAlt, openDSN)
}

func openDSN(ctx context.Context, dsn string, opts ...store.Option) (store.Store, error) {
	o := store.NewOptions(opts...)
	own := append([]Option{WithOptions(opts...)}, store.BackendOptions[Option](o)...)
	return Open(ctx, dsn, own...)
}
