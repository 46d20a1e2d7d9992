package taskrouter

import (
	"log/slog"
	"reflect"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// Config is the former configuration of a Router: the store and the
// options in one value, for New.
//
// Deprecated: use NewRouter(store, &Options{...}); Config's fields other
// than Store are Options's.
type Config struct {
	// Store holds the task records. Required.
	Store store.Store
	// See Options.Logger.
	Logger *slog.Logger
	// See Options.PollInterval.
	PollInterval time.Duration
	// See Options.DefaultTTL.
	DefaultTTL time.Duration
	// See Options.MaxTTL.
	MaxTTL time.Duration
	// See Options.TaskTimeout.
	TaskTimeout time.Duration
	// See Options.MaxConcurrent.
	MaxConcurrent int
	// See Options.MaxConcurrentPerOwner.
	MaxConcurrentPerOwner int
	// See Options.MaxPendingPerOwner.
	MaxPendingPerOwner int
	// See Options.MaxPendingPerSource.
	MaxPendingPerSource int
	// See Options.MaxPending.
	MaxPending int
	// See Options.SweepInterval.
	SweepInterval time.Duration
	// See Options.ExpiredGrace.
	ExpiredGrace time.Duration
	// See Options.Owner.
	Owner OwnerFunc
	// See Options.SessionBound.
	SessionBound bool
	// See Options.DisableFastPath.
	DisableFastPath bool
	// See Options.ImmediateResponse.
	ImmediateResponse func(tool string, task *store.Task) string
	// See Options.Now.
	Now func() time.Time
	// See Options.Observer.
	Observer Observer
	// See Options.ReplicaID.
	ReplicaID string
	// See Options.LeaseDuration.
	LeaseDuration time.Duration
	// See Options.ChangePollInterval.
	ChangePollInterval time.Duration
	// See Options.InstantWindow.
	InstantWindow time.Duration
	// See Options.HostDeadline.
	HostDeadline time.Duration
	// See Options.Push.
	Push PushOptions
}

// New returns a Router over cfg.Store configured by the rest of cfg.
//
// Deprecated: use NewRouter(cfg.Store, &opts), with the same fields in
// Options.
func New(cfg Config) (*Router, error) {
	o := cfg.options()
	return NewRouter(cfg.Store, &o)
}

// ConfigFromEnv returns base with every field that has an environment
// variable set overridden by it.
//
// Deprecated: use OptionsFromEnv.
func ConfigFromEnv(base Config) (Config, error) {
	o := base.options()
	if err := o.fromEnv(); err != nil {
		return base, err
	}
	return configOf(base.Store, o), nil
}

// Config returns the effective configuration (defaults filled in).
//
// Deprecated: use Router.Options (and Router.Store).
func (r *Router) Config() Config { return configOf(r.st, r.opts) }

// Options returns c's fields but Store, as Options (for moving from New
// to NewRouter).
func (c Config) Options() Options { return c.options() }

// options are c's fields but Store: Config is Store followed by Options's
// fields, in order (TestConfigMirrorsOptions keeps it so).
func (c Config) options() Options {
	var o Options
	cv, ov := reflect.ValueOf(c), reflect.ValueOf(&o).Elem()
	for i := range ov.NumField() {
		ov.Field(i).Set(cv.Field(i + 1))
	}
	return o
}

// configOf is the Config of st and o.
func configOf(st store.Store, o Options) Config {
	c := Config{Store: st}
	cv, ov := reflect.ValueOf(&c).Elem(), reflect.ValueOf(o)
	for i := range ov.NumField() {
		cv.Field(i + 1).Set(ov.Field(i))
	}
	return c
}
