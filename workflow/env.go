package workflow

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/taskbridge/taskbridge/taskrouter"
)

// Environment variables read by OptionsFromEnv. Durations take Go syntax
// ("90s", "10m") or a plain number of milliseconds.
const (
	// EnvTTL sets Options.TTL.
	EnvTTL = "TASKBRIDGE_WORKFLOW_TTL"
	// EnvOrphanTimeout sets Options.OrphanTimeout; "0" or "off" (or a
	// negative duration) disables it.
	EnvOrphanTimeout = "TASKBRIDGE_ORPHAN_TIMEOUT"
	// EnvProgressInterval sets Options.ProgressInterval; "0" or "off"
	// writes after every step.
	EnvProgressInterval = "TASKBRIDGE_PROGRESS_INTERVAL"
	// EnvPromptWait sets Options.PromptWait; "0" or "off" waits until
	// the workflow rests.
	EnvPromptWait = "TASKBRIDGE_PROMPT_WAIT"
	// EnvVersionGrace sets Options.VersionGrace; "0" or "off" fails a
	// task whose version no live process serves at once.
	EnvVersionGrace = "TASKBRIDGE_VERSION_GRACE"
	// EnvWebhookURL sets Options.WebhookURL.
	EnvWebhookURL = "TASKBRIDGE_WEBHOOK_URL"
	// EnvMaxInterruptions sets Options.MaxInterruptions (a count).
	EnvMaxInterruptions = "TASKBRIDGE_MAX_INTERRUPTIONS"
)

// OptionsFromEnv returns a copy of base (nil: the defaults) with every
// field that has an environment variable set (the Env* constants)
// overridden by it. It reports a malformed duration, naming the variable;
// the values themselves are checked by NewBridge, as any Options are. It
// is the one place the package reads the environment.
func OptionsFromEnv(base *Options) (*Options, error) {
	var o Options
	if base != nil {
		o = *base
	}
	for _, e := range []struct {
		name string
		dst  *time.Duration
		off  time.Duration // what "0" and "off" mean
	}{
		{EnvTTL, &o.TTL, 0},
		{EnvOrphanTimeout, &o.OrphanTimeout, -1},
		{EnvProgressInterval, &o.ProgressInterval, 0},
		{EnvPromptWait, &o.PromptWait, -1},
		{EnvVersionGrace, &o.VersionGrace, -1},
	} {
		v := os.Getenv(e.name)
		switch v {
		case "":
			continue
		case "off", "0":
			*e.dst = e.off
			continue
		}
		d, err := taskrouter.ParseEnvDuration(v)
		if err != nil {
			return nil, fmt.Errorf("workflow: %s=%q: %w", e.name, v, err)
		}
		*e.dst = d
	}
	if v := os.Getenv(EnvWebhookURL); v != "" {
		o.WebhookURL = v
	}
	if v := os.Getenv(EnvMaxInterruptions); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("workflow: %s=%q: not a count", EnvMaxInterruptions, v)
		}
		o.MaxInterruptions = n
	}
	return &o, nil
}
