package taskrouter

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// Defaults for Config fields left zero.
const (
	DefaultPollInterval          = 500 * time.Millisecond
	DefaultTTL                   = time.Hour
	DefaultMaxTTL                = 24 * time.Hour
	DefaultMaxConcurrent         = 256
	DefaultMaxConcurrentPerOwner = 32
	DefaultMaxPendingPerOwner    = 1024
	DefaultSweepInterval         = 30 * time.Second
	DefaultExpiredGrace          = 5 * time.Minute
)

// Environment variables read by ConfigFromEnv. Durations accept Go syntax
// ("1.5s", "10m") or a plain integer number of milliseconds.
const (
	EnvPollInterval          = "TASKBRIDGE_POLL_INTERVAL"
	EnvDefaultTTL            = "TASKBRIDGE_DEFAULT_TTL"
	EnvMaxTTL                = "TASKBRIDGE_MAX_TTL"
	EnvTaskTimeout           = "TASKBRIDGE_TASK_TIMEOUT"
	EnvMaxConcurrent         = "TASKBRIDGE_MAX_CONCURRENT"
	EnvMaxConcurrentPerOwner = "TASKBRIDGE_MAX_CONCURRENT_PER_OWNER"
	EnvSweepInterval         = "TASKBRIDGE_SWEEP_INTERVAL"
)

// An OwnerFunc decides which principal a request acts for. Tasks belong to
// the owner that created them; every other owner sees "not found".
type OwnerFunc func(ctx context.Context, req mcp.Request) (string, error)

// Config configures a Router. Only Store is required.
type Config struct {
	// Store holds the task records. Required.
	Store store.Store
	// Logger receives engine logs; nil discards them.
	Logger *slog.Logger
	// PollInterval is suggested to clients in every task.
	PollInterval time.Duration
	// DefaultTTL applies when a request asks for no ttl.
	DefaultTTL time.Duration
	// MaxTTL caps every requested ttl; the actual value is reported back.
	MaxTTL time.Duration
	// TaskTimeout bounds how long one task's handler may run; zero means no
	// bound beyond the task's ttl.
	TaskTimeout time.Duration
	// MaxConcurrent bounds how many task handlers run at once; more tasks
	// wait in "working" with a "queued" status message.
	MaxConcurrent int
	// MaxConcurrentPerOwner bounds how many handlers one owner runs at once.
	MaxConcurrentPerOwner int
	// MaxPendingPerOwner bounds one owner's queued plus running tasks; a
	// request past it fails with CodeTooManyTasks.
	MaxPendingPerOwner int
	// SweepInterval is how often expired tasks are swept.
	SweepInterval time.Duration
	// ExpiredGrace is how long a task that was still running when its ttl
	// ran out stays readable (as failed) before it is deleted.
	ExpiredGrace time.Duration
	// Owner maps a request to its owner; nil means DefaultOwner.
	Owner OwnerFunc
	// ImmediateResponse, when set, produces the optional core-dialect
	// model-immediate-response text for a newly created tool task.
	ImmediateResponse func(tool string, task *store.Task) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = DefaultMaxTTL
	}
	if c.DefaultTTL <= 0 {
		c.DefaultTTL = DefaultTTL
	}
	if c.DefaultTTL > c.MaxTTL {
		c.DefaultTTL = c.MaxTTL
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.MaxConcurrentPerOwner <= 0 {
		c.MaxConcurrentPerOwner = DefaultMaxConcurrentPerOwner
	}
	if c.MaxPendingPerOwner <= 0 {
		c.MaxPendingPerOwner = DefaultMaxPendingPerOwner
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.ExpiredGrace <= 0 {
		c.ExpiredGrace = DefaultExpiredGrace
	}
	if c.Owner == nil {
		c.Owner = DefaultOwner
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// ConfigFromEnv returns base with every field that has an environment
// variable set overridden by it. It reports malformed values instead of
// ignoring them.
func ConfigFromEnv(base Config) (Config, error) {
	durations := []struct {
		env string
		dst *time.Duration
	}{
		{EnvPollInterval, &base.PollInterval},
		{EnvDefaultTTL, &base.DefaultTTL},
		{EnvMaxTTL, &base.MaxTTL},
		{EnvTaskTimeout, &base.TaskTimeout},
		{EnvSweepInterval, &base.SweepInterval},
	}
	for _, d := range durations {
		v, ok := os.LookupEnv(d.env)
		if !ok || v == "" {
			continue
		}
		parsed, err := parseDuration(v)
		if err != nil {
			return base, fmt.Errorf("taskrouter: %s=%q: %w", d.env, v, err)
		}
		*d.dst = parsed
	}
	ints := []struct {
		env string
		dst *int
	}{
		{EnvMaxConcurrent, &base.MaxConcurrent},
		{EnvMaxConcurrentPerOwner, &base.MaxConcurrentPerOwner},
	}
	for _, i := range ints {
		v, ok := os.LookupEnv(i.env)
		if !ok || v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return base, fmt.Errorf("taskrouter: %s=%q: want a non-negative integer", i.env, v)
		}
		*i.dst = n
	}
	return base, nil
}

func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("negative duration")
		}
		return time.Duration(n) * time.Millisecond, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration")
	}
	return d, nil
}

// LocalOwner is the owner of requests that carry neither an authenticated
// user nor a session (stdio, in-memory, stateless HTTP).
const LocalOwner = "local"

// DefaultOwner is the default owner policy:
//
//  1. an authenticated request (go-sdk TokenInfo) acts for "user:<UserID>";
//     a token without a UserID is refused, because tasks could not be kept
//     apart;
//  2. otherwise a request on a session with an id (stateful Streamable HTTP)
//     acts for "session:<id>";
//  3. otherwise (stdio, in-memory, stateless HTTP) it acts for LocalOwner.
func DefaultOwner(_ context.Context, req mcp.Request) (string, error) {
	if req == nil {
		return LocalOwner, nil
	}
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil {
		if extra.TokenInfo.UserID == "" {
			return "", fmt.Errorf("authenticated request has no user id; set taskrouter.Config.Owner")
		}
		return "user:" + extra.TokenInfo.UserID, nil
	}
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
		if id := ss.ID(); id != "" {
			return "session:" + id, nil
		}
	}
	return LocalOwner, nil
}
