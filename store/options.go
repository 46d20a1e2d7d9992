package store

import "time"

// Options are the settings every backend shares: the size limits it
// enforces and the clock it stamps UpdatedAt with. A nil *Options means
// the defaults. A backend keeps them in its own options (embedding
// Options: bboltstore.Options, postgres.Options; the memory store takes
// them as they are) and resolves them once with WithDefaults, so that no
// backend writes the limits, the clock or their defaults again:
//
//	type Options struct {
//		store.Options        // limits and clock
//		Path string          // the backend's own settings
//	}
//
//	func Open(opts *Options) (*Store, error) {
//		var o Options
//		if opts != nil {
//			o = *opts
//		}
//		shared := o.Options.WithDefaults()
//		...
//	}
//
// Every constructor of this module takes its settings so, as *XOptions
// with nil for the defaults (bbolt's bolt.Open and pgx's pgxpool.Config
// take theirs the same way); none takes functional options.
type Options struct {
	// Limits bound what a task may hold; zero fields take the defaults
	// (Limits.WithDefaults).
	Limits Limits
	// Now is the clock used for UpdatedAt; nil means time.Now.
	Now func() time.Time
	// Backend holds backends' own options for Open to hand on, one value
	// per backend a DSN may name (a *bboltstore.Options, a
	// *postgres.Options): the backend Open picks takes the value of its
	// own type (BackendOptions) and ignores the others. A backend's own
	// constructor, called directly, ignores it.
	Backend []any
}

// BackendOptions returns the first value of o.Backend of type T (a nil o
// has none): the options a backend's Opener takes.
func BackendOptions[T any](o *Options) (T, bool) {
	var zero T
	if o == nil {
		return zero, false
	}
	for _, v := range o.Backend {
		if t, ok := v.(T); ok {
			return t, true
		}
	}
	return zero, false
}

// WithDefaults returns o (nil: the zero Options) with every limit
// resolved (Limits.WithDefaults) and Now set (time.Now when nil): what a
// backend runs with.
func (o *Options) WithDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	r.Limits = r.Limits.WithDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	return r
}

// Merge returns o with the shared settings base sets where o leaves them
// zero (its Limits as a whole, its clock): what a backend's Opener runs
// with when Open was given both.
func (o Options) Merge(base *Options) Options {
	if base == nil {
		return o
	}
	if o.Limits == (Limits{}) {
		o.Limits = base.Limits
	}
	if o.Now == nil {
		o.Now = base.Now
	}
	return o
}
