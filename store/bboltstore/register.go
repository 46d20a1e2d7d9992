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
// creating its directory when missing. It opens with the *Options among
// opts.Backend, and opts' shared settings where those leave them unset.
// ctx is not used: the wait for the file lock is bounded by
// Options.OpenTimeout.
func openDSN(_ context.Context, dsn string, opts *store.Options) (store.Store, error) {
	path := store.TrimScheme(dsn)
	if path == "" {
		return nil, fmt.Errorf("%w: the DSN %q names no file", store.ErrInvalid, dsn)
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	var o Options
	if own, ok := store.BackendOptions[*Options](opts); ok && own != nil {
		o = *own
	}
	o.Options = o.Options.Merge(opts)
	return Open(path, &o)
}
