package bboltstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/taskbridge/taskbridge/store"
)

// Scheme is the scheme this package registers with store.Register (see
// openDSN); it also registers store.FileScheme, so that a DSN without a
// scheme, a plain file path, opens a bbolt file too.
const Scheme = "bbolt"

func init() {
	store.Register(Scheme, openDSN)
	store.Register(store.FileScheme, openDSN)
}

// openDSN is the store.Opener of Scheme and store.FileScheme: it opens the
// bbolt file a DSN names, "bbolt://path", "file://path" or a plain path
// ("bbolt:///var/lib/tasks.db" is the absolute path /var/lib/tasks.db),
// creating its directory when missing. It applies the shared options and
// the Option values among store.Options.Backend. ctx is not used: the
// wait for the file lock is bounded by WithOpenTimeout.
func openDSN(_ context.Context, dsn string, opts ...store.Option) (store.Store, error) {
	path := store.TrimScheme(dsn)
	if path == "" {
		return nil, fmt.Errorf("%w: the DSN %q names no file", store.ErrInvalid, dsn)
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	o := store.NewOptions(opts...)
	own := append([]Option{WithOptions(opts...)}, store.BackendOptions[Option](o)...)
	return Open(path, own...)
}
