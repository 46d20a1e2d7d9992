package taskrouter

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by OptionsFromEnv. Durations accept Go syntax
// ("1.5s", "10m") or a plain integer number of milliseconds.
const (
	EnvPollInterval          = "TASKBRIDGE_POLL_INTERVAL"
	EnvDefaultTTL            = "TASKBRIDGE_DEFAULT_TTL"
	EnvMaxTTL                = "TASKBRIDGE_MAX_TTL"
	EnvTaskTimeout           = "TASKBRIDGE_TASK_TIMEOUT"
	EnvMaxConcurrent         = "TASKBRIDGE_MAX_CONCURRENT"
	EnvMaxConcurrentPerOwner = "TASKBRIDGE_MAX_CONCURRENT_PER_OWNER"
	EnvMaxConcurrentSteps    = "TASKBRIDGE_MAX_CONCURRENT_STEPS"
	EnvSweepInterval         = "TASKBRIDGE_SWEEP_INTERVAL"
	EnvMaxPendingPerOwner    = "TASKBRIDGE_MAX_PENDING_PER_OWNER"
	EnvMaxPendingPerSource   = "TASKBRIDGE_MAX_PENDING_PER_SOURCE"
	EnvMaxPending            = "TASKBRIDGE_MAX_PENDING"
	EnvSessionBound          = "TASKBRIDGE_SESSION_BOUND"
	EnvReplicaID             = "TASKBRIDGE_REPLICA_ID"
	EnvLeaseDuration         = "TASKBRIDGE_LEASE_DURATION"
	EnvChangePollInterval    = "TASKBRIDGE_CHANGE_POLL_INTERVAL"
	EnvInstantWindow         = "TASKBRIDGE_INSTANT_WINDOW" // a duration, or "off"
	EnvHostDeadline          = "TASKBRIDGE_HOST_DEADLINE"  // a duration, or "off"
	EnvFastPath              = "TASKBRIDGE_FAST_PATH"      // "on" (the default) or "off"
)

// OptionsFromEnv returns a copy of base (nil: the defaults) with every
// field that has an environment variable set (TASKBRIDGE_*, the Env*
// constants) overridden by it. It reports malformed values, naming the
// variable, instead of ignoring them. It is the one place the package
// reads the environment for its settings.
func OptionsFromEnv(base *Options) (*Options, error) {
	var o Options
	if base != nil {
		o = *base
	}
	if err := o.fromEnv(); err != nil {
		return nil, err
	}
	return &o, nil
}

// fromEnv overrides o's fields from the environment.
func (o *Options) fromEnv() error {
	durations := []struct {
		env string
		dst *time.Duration
	}{
		{EnvPollInterval, &o.PollInterval},
		{EnvDefaultTTL, &o.DefaultTTL},
		{EnvMaxTTL, &o.MaxTTL},
		{EnvTaskTimeout, &o.TaskTimeout},
		{EnvSweepInterval, &o.SweepInterval},
		{EnvLeaseDuration, &o.LeaseDuration},
		{EnvChangePollInterval, &o.ChangePollInterval},
	}
	for _, d := range durations {
		if err := envDuration(d.env, d.dst, false); err != nil {
			return err
		}
	}
	ints := []struct {
		env string
		dst *int
	}{
		{EnvMaxConcurrent, &o.MaxConcurrent},
		{EnvMaxConcurrentPerOwner, &o.MaxConcurrentPerOwner},
		{EnvMaxConcurrentSteps, &o.MaxConcurrentSteps},
		{EnvMaxPendingPerOwner, &o.MaxPendingPerOwner},
		{EnvMaxPendingPerSource, &o.MaxPendingPerSource},
		{EnvMaxPending, &o.MaxPending},
	}
	for _, i := range ints {
		if err := envInt(i.env, i.dst); err != nil {
			return err
		}
	}
	if err := envDuration(EnvInstantWindow, &o.InstantWindow, true); err != nil {
		return err
	}
	if err := envDuration(EnvHostDeadline, &o.HostDeadline, true); err != nil {
		return err
	}
	if err := o.Push.fromEnv(); err != nil {
		return err
	}
	return o.switchesFromEnv()
}

// envDuration sets *dst from the variable env when it is set; with
// offOK, "off" sets -1 (the setting's "off").
func envDuration(env string, dst *time.Duration, offOK bool) error {
	v := os.Getenv(env)
	switch {
	case v == "":
		return nil
	case offOK && v == "off":
		*dst = -1
		return nil
	}
	d, err := parseDuration(v)
	if err != nil {
		if offOK {
			return fmt.Errorf("taskrouter: %s=%q: want a duration or off: %w", env, v, err)
		}
		return fmt.Errorf("taskrouter: %s=%q: %w", env, v, err)
	}
	*dst = d
	return nil
}

// switchesFromEnv reads the settings that are not numbers.
func (o *Options) switchesFromEnv() error {
	if v := os.Getenv(EnvReplicaID); v != "" {
		o.ReplicaID = v
	}
	if err := envBool(EnvSessionBound, &o.SessionBound); err != nil {
		return err
	}
	return envOff(EnvFastPath, &o.DisableFastPath)
}

// envInt sets *dst from the variable env, a non-negative integer, when
// it is set.
func envInt(env string, dst *int) error {
	v := os.Getenv(env)
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("taskrouter: %s=%q: want a non-negative integer", env, v)
	}
	*dst = n
	return nil
}

// envBool sets *dst from the variable env, true or false, when it is set.
func envBool(env string, dst *bool) error {
	v := os.Getenv(env)
	if v == "" {
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("taskrouter: %s=%q: want true or false", env, v)
	}
	*dst = b
	return nil
}

// envOff sets *off when the variable env is "off"; "on" (or unset)
// leaves it.
func envOff(env string, off *bool) error {
	switch v := os.Getenv(env); v {
	case "", "on":
	case "off":
		*off = true
	default:
		return fmt.Errorf("taskrouter: %s=%q: want on or off", env, v)
	}
	return nil
}

// Environment variables of push (read by OptionsFromEnv).
const (
	// EnvPush: "off" turns push off (PushOptions.Disabled).
	EnvPush = "TASKBRIDGE_PUSH"
	// EnvPushURL, EnvPushSecret, EnvPushEvents declare one static webhook
	// for every owner's tasks (PushOptions.Hooks); the secret is required
	// with the URL, the events are comma-separated.
	EnvPushURL    = "TASKBRIDGE_PUSH_URL"
	EnvPushSecret = "TASKBRIDGE_PUSH_SECRET"
	EnvPushEvents = "TASKBRIDGE_PUSH_EVENTS"
	// EnvPushAdmins: comma-separated owners (PushOptions.Admins).
	EnvPushAdmins = "TASKBRIDGE_PUSH_ADMINS"
	// EnvPushAllowHTTP, EnvPushAllowPrivate, EnvPushDenyLoopback: true or
	// false.
	EnvPushAllowHTTP    = "TASKBRIDGE_PUSH_ALLOW_HTTP"
	EnvPushAllowPrivate = "TASKBRIDGE_PUSH_ALLOW_PRIVATE"
	EnvPushDenyLoopback = "TASKBRIDGE_PUSH_DENY_LOOPBACK"
	// EnvPushMaxAttempts (an integer) and EnvPushMaxAge (a duration)
	// bound a delivery's retries.
	EnvPushMaxAttempts = "TASKBRIDGE_PUSH_MAX_ATTEMPTS"
	EnvPushMaxAge      = "TASKBRIDGE_PUSH_MAX_AGE"
)

// fromEnv overrides push's fields from the environment.
func (o *PushOptions) fromEnv() error {
	if err := envOff(EnvPush, &o.Disabled); err != nil {
		return err
	}
	if u := os.Getenv(EnvPushURL); u != "" {
		secret := os.Getenv(EnvPushSecret)
		if secret == "" {
			return fmt.Errorf("taskrouter: %s is set without %s (the deliveries' signing secret)", EnvPushURL, EnvPushSecret)
		}
		o.Hooks = append(o.Hooks, StaticWebhook{URL: u, Secret: secret, Events: splitEvents(os.Getenv(EnvPushEvents))})
	}
	if v := os.Getenv(EnvPushAdmins); v != "" {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				o.Admins = append(o.Admins, a)
			}
		}
	}
	for _, b := range []struct {
		env string
		dst *bool
	}{{EnvPushAllowHTTP, &o.AllowHTTP}, {EnvPushAllowPrivate, &o.AllowPrivate}, {EnvPushDenyLoopback, &o.DenyLoopback}} {
		if err := envBool(b.env, b.dst); err != nil {
			return err
		}
	}
	if err := envInt(EnvPushMaxAttempts, &o.MaxAttempts); err != nil {
		return err
	}
	return envDuration(EnvPushMaxAge, &o.MaxAge, false)
}

// parseDuration is ParseEnvDuration, refusing negative values.
func parseDuration(v string) (time.Duration, error) {
	d, err := ParseEnvDuration(v)
	if err == nil && d < 0 {
		return 0, fmt.Errorf("negative duration")
	}
	return d, err
}

// ParseEnvDuration reads a duration as the TASKBRIDGE_* environment
// variables give it: Go syntax ("90s", "10m") or a plain number of
// milliseconds. It may be negative; the settings that refuse negative
// values say so themselves.
func ParseEnvDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Millisecond, nil
	}
	return time.ParseDuration(v)
}

// sdkCompatSettings reports whether go-sdk's MCPGODEBUG variable asks it
// for compatibility behaviours, which the fast path does not reproduce
// (it is off then). It is go-sdk's setting, not one of Options: it is
// read here so that the package reads the environment in this file only.
func sdkCompatSettings() bool { return os.Getenv("MCPGODEBUG") != "" }
