package builder

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/taskbridge/taskbridge/store/bboltstore"
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
	// store with its file prefaulted (bboltstore.WithPrefault): "1" or
	// "true" turns it on, "0" or "false" off.
	EnvBboltPrefault = "TASKBRIDGE_BBOLT_PREFAULT"
	// EnvBboltCommitWindow names the environment variable that sets a
	// bbolt store's commit window (bboltstore.WithCommitWindow), a Go
	// duration such as "2ms"; "0" turns it off.
	EnvBboltCommitWindow = "TASKBRIDGE_BBOLT_COMMIT_WINDOW"
)

// storeFromEnv is the builder's reading of its environment: the store
// spec (EnvDB; "" when unset) and the bbolt options EnvBboltPrefault and
// EnvBboltCommitWindow add.
func storeFromEnv() (spec string, bolt []bboltstore.Option, err error) {
	spec = os.Getenv(EnvDB)
	if v := os.Getenv(EnvBboltPrefault); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return "", nil, fmt.Errorf("builder: %s=%q: want 1, true, 0 or false", EnvBboltPrefault, v)
		}
		bolt = append(bolt, bboltstore.WithPrefault(on))
	}
	if v := os.Getenv(EnvBboltCommitWindow); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return "", nil, fmt.Errorf("builder: %s=%q: want a duration such as 2ms (0: off)", EnvBboltCommitWindow, v)
		}
		bolt = append(bolt, bboltstore.WithCommitWindow(d))
	}
	return spec, bolt, nil
}
