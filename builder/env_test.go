package builder_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/workflow"
)

// TestWorkflowOptionsFromEnv: workflow.OptionsFromEnv, which Build calls
// unless WithoutEnv. Each variable overrides its field of the base, which
// is not changed; "off" and "0" mean what the field's off is; a malformed
// duration is refused with the variable's name.
func TestWorkflowOptionsFromEnv(t *testing.T) {
	base := &workflow.Options{TTL: time.Hour, OrphanTimeout: time.Minute, ProgressInterval: time.Second}
	t.Setenv(workflow.EnvTTL, "2h")
	t.Setenv(workflow.EnvOrphanTimeout, "off")
	t.Setenv(workflow.EnvPromptWait, "1500")
	t.Setenv(workflow.EnvVersionGrace, "90s")
	t.Setenv(workflow.EnvWebhookURL, "https://hooks.example/in")
	t.Setenv(workflow.EnvMaxInterruptions, "5")
	o, err := workflow.OptionsFromEnv(base)
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, o.TTL)
	require.Negative(t, o.OrphanTimeout, "off disables the orphan timeout")
	require.Equal(t, time.Second, o.ProgressInterval, "a variable not set leaves the field alone")
	require.Equal(t, 1500*time.Millisecond, o.PromptWait)
	require.Equal(t, 90*time.Second, o.VersionGrace)
	require.Equal(t, "https://hooks.example/in", o.WebhookURL)
	require.Equal(t, 5, o.MaxInterruptions)
	require.Equal(t, time.Hour, base.TTL, "base is not changed")

	t.Setenv(workflow.EnvPromptWait, "0")
	o, err = workflow.OptionsFromEnv(nil)
	require.NoError(t, err)
	require.Negative(t, o.PromptWait, "0 waits until the workflow rests")
	t.Setenv(workflow.EnvVersionGrace, "off")
	o, err = workflow.OptionsFromEnv(nil)
	require.NoError(t, err)
	require.Negative(t, o.VersionGrace, "off fails a task whose version is gone at once")

	t.Setenv(workflow.EnvMaxInterruptions, "many")
	_, err = workflow.OptionsFromEnv(nil)
	require.ErrorContains(t, err, workflow.EnvMaxInterruptions)
	t.Setenv(workflow.EnvMaxInterruptions, "")

	t.Setenv(workflow.EnvProgressInterval, "often")
	_, err = workflow.OptionsFromEnv(nil)
	require.ErrorContains(t, err, workflow.EnvProgressInterval)
}
