package builder

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// The builder's own environment variables. Build reads them, and has the
// engine's (taskrouter.OptionsFromEnv) and the workflow bridge's
// (workflow.OptionsFromEnv) read theirs, unless WithoutEnv.
const (
	// EnvDB names the environment variable that sets the store: a bbolt
	// file path or a URL of a registered backend (see WithDB). Set, it
	// overrides WithDB (Build logs that at Warn); with WithStore, Build
	// refuses it, since it cannot take effect.
	EnvDB = "TASKBRIDGE_DB"
	// EnvBboltPrefault names the environment variable that opens a bbolt
	// store with its file prefaulted (bboltstore.Options.Prefault): "1"
	// or "true" turns it on, "0" or "false" off.
	EnvBboltPrefault = "TASKBRIDGE_BBOLT_PREFAULT"
	// EnvBboltCommitWindow names the environment variable that sets a
	// bbolt store's commit window (bboltstore.Options.CommitWindow), a Go
	// duration such as "2ms"; "0" turns it off.
	EnvBboltCommitWindow = "TASKBRIDGE_BBOLT_COMMIT_WINDOW"
)

// environment is the builder's one reading of its environment (Build
// reads it once, unless WithoutEnv): the store spec (EnvDB; "" when
// unset), the bbolt settings that override WithBboltOptions' (nil when
// unset), and the engine's replica id (taskrouter.EnvReplicaID), which
// the builder warns about on a store that is not shared.
type environment struct {
	db           string
	prefault     *bool
	commitWindow *time.Duration
	replicaID    string
}

// readEnvironment reads the environment, naming a variable whose value
// cannot work.
func readEnvironment() (environment, error) {
	e := environment{db: os.Getenv(EnvDB), replicaID: os.Getenv(taskrouter.EnvReplicaID)}
	if v := os.Getenv(EnvBboltPrefault); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return e, fmt.Errorf("builder: %s=%q: want 1, true, 0 or false", EnvBboltPrefault, v)
		}
		e.prefault = &on
	}
	if v := os.Getenv(EnvBboltCommitWindow); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return e, fmt.Errorf("builder: %s=%q: want a duration such as 2ms (0: off)", EnvBboltCommitWindow, v)
		}
		e.commitWindow = &d
	}
	return e, nil
}

// bbolt returns o with the bbolt settings the environment sets.
func (e environment) bbolt(o bboltstore.Options) bboltstore.Options {
	if e.prefault != nil {
		o.Prefault = *e.prefault
	}
	if e.commitWindow != nil {
		o.CommitWindow = *e.commitWindow
	}
	return o
}
