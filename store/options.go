package store

import "time"

// Options are the settings every backend shares: the size limits it
// enforces and the clock it stamps UpdatedAt with. A backend keeps them in
// its own settings (embedding Options), accepts Option values for them
// beside its own options, and resolves them once with WithDefaults, so
// that no backend writes WithLimits, WithClock or their defaults again:
//
//	type options struct {
//		store.Options
//		path string // the backend's own settings
//	}
//
//	// WithOptions applies the options every backend shares (store.WithLimits,
//	// store.WithClock).
//	func WithOptions(opts ...store.Option) Option {
//		return func(o *options) { o.Options.Apply(opts...) }
//	}
//
//	func Open(path string, opts ...Option) (*Store, error) {
//		o := options{path: path}
//		for _, opt := range opts {
//			opt(&o)
//		}
//		o.Options = o.Options.WithDefaults()
//		...
//	}
type Options struct {
	// Limits bound what a task may hold; zero fields take the defaults
	// (Limits.WithDefaults).
	Limits Limits
	// Now is the clock used for UpdatedAt; nil means time.Now.
	Now func() time.Time
	// Backend holds options of backends' own types (bboltstore.Option,
	// postgres.Option, ...) for Open to hand to the backend it picks:
	// each backend's Opener applies the values of its type
	// (BackendOptions) and ignores the others. Constructors called
	// directly ignore it.
	Backend []any
}

// Option sets one of the Options every backend shares.
type Option func(*Options)

// WithLimits sets the size limits; zero fields take the defaults.
func WithLimits(l Limits) Option {
	return func(o *Options) { o.Limits = l }
}

// WithClock sets the clock used for UpdatedAt (default time.Now). A nil
// clock is ignored.
func WithClock(now func() time.Time) Option {
	return func(o *Options) {
		if now != nil {
			o.Now = now
		}
	}
}

// WithBackendOptions passes options of a backend's own type through Open
// (see Options.Backend): one list may carry options for several
// backends, and only the backend Open picks applies its own. Options
// accumulate over several calls.
//
//	st, err := store.Open(ctx, dsn,
//		store.WithBackendOptions(bboltstore.WithNoSync(true), postgres.WithSchema("tasks")))
func WithBackendOptions(opts ...any) Option {
	return func(o *Options) { o.Backend = append(o.Backend[:len(o.Backend):len(o.Backend)], opts...) }
}

// BackendOptions returns the values of o.Backend of type T, in order: the
// options a backend's Opener applies.
func BackendOptions[T any](o Options) []T {
	var out []T
	for _, v := range o.Backend {
		if t, ok := v.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// Apply applies opts to o, in order.
func (o *Options) Apply(opts ...Option) {
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
}

// WithDefaults returns o with every limit resolved (Limits.WithDefaults)
// and Now set (time.Now when nil): what a backend runs with.
func (o Options) WithDefaults() Options {
	o.Limits = o.Limits.WithDefaults()
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// NewOptions returns the Options opts set, with defaults (WithDefaults).
func NewOptions(opts ...Option) Options {
	var o Options
	o.Apply(opts...)
	return o.WithDefaults()
}
