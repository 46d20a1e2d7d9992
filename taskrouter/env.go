package taskrouter

import (
	"fmt"
	"os"
	"strconv"
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
		{EnvMaxPendingPerOwner, &o.MaxPendingPerOwner},
		{EnvMaxPendingPerSource, &o.MaxPendingPerSource},
		{EnvMaxPending, &o.MaxPending},
	}
	for _, i := range ints {
		v, ok := os.LookupEnv(i.env)
		if !ok || v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("taskrouter: %s=%q: want a non-negative integer", i.env, v)
		}
		*i.dst = n
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
	if v, ok := os.LookupEnv(EnvSessionBound); ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("taskrouter: %s=%q: want true or false", EnvSessionBound, v)
		}
		o.SessionBound = b
	}
	switch v := os.Getenv(EnvFastPath); v {
	case "", "on":
	case "off":
		o.DisableFastPath = true
	default:
		return fmt.Errorf("taskrouter: %s=%q: want on or off", EnvFastPath, v)
	}
	return nil
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
