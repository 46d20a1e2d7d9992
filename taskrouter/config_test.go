package taskrouter_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

func TestOptionsFromEnv(t *testing.T) {
	t.Setenv(taskrouter.EnvPollInterval, "250")
	t.Setenv(taskrouter.EnvDefaultTTL, "10m")
	t.Setenv(taskrouter.EnvMaxTTL, "2h")
	t.Setenv(taskrouter.EnvTaskTimeout, "1.5s")
	t.Setenv(taskrouter.EnvMaxConcurrent, "7")
	t.Setenv(taskrouter.EnvMaxConcurrentPerOwner, "3")
	t.Setenv(taskrouter.EnvSweepInterval, "")
	base := &taskrouter.Options{SweepInterval: time.Minute, MaxConcurrent: 99}
	cfg, err := taskrouter.OptionsFromEnv(base)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, cfg.PollInterval)
	require.Equal(t, 10*time.Minute, cfg.DefaultTTL)
	require.Equal(t, 2*time.Hour, cfg.MaxTTL)
	require.Equal(t, 1500*time.Millisecond, cfg.TaskTimeout)
	require.Equal(t, 7, cfg.MaxConcurrent)
	require.Equal(t, 3, cfg.MaxConcurrentPerOwner)
	require.Equal(t, time.Minute, cfg.SweepInterval, "an empty variable leaves the field alone")
	require.Equal(t, 99, base.MaxConcurrent, "base is not changed")

	t.Setenv(taskrouter.EnvInstantWindow, "5ms")
	cfg, err = taskrouter.OptionsFromEnv(nil)
	require.NoError(t, err)
	require.Equal(t, 5*time.Millisecond, cfg.InstantWindow)
	t.Setenv(taskrouter.EnvInstantWindow, "off")
	cfg, err = taskrouter.OptionsFromEnv(nil)
	require.NoError(t, err)
	require.Negative(t, cfg.InstantWindow)
	r, err := taskrouter.NewRouter(newMemoryWithClock(time.Now), cfg)
	require.NoError(t, err, "a negative InstantWindow turns folding off; it is not refused")
	require.Negative(t, r.Options().InstantWindow)

	for env, bad := range map[string]string{
		taskrouter.EnvPollInterval:  "soon",
		taskrouter.EnvMaxTTL:        "-5s",
		taskrouter.EnvMaxConcurrent: "many",
		taskrouter.EnvInstantWindow: "never",
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, bad)
			_, err := taskrouter.OptionsFromEnv(nil)
			require.ErrorContains(t, err, env)
		})
	}
}

func TestDefaultsApplied(t *testing.T) {
	r, err := taskrouter.NewRouter(newMemoryWithClock(time.Now), &taskrouter.Options{MaxTTL: 30 * time.Minute})
	require.NoError(t, err)
	cfg := r.Options()
	require.Equal(t, 30*time.Minute, cfg.MaxTTL)
	require.Equal(t, 30*time.Minute, cfg.DefaultTTL, "the default ttl is capped by a smaller maximum")
	require.Equal(t, taskrouter.DefaultPollInterval, cfg.PollInterval)
	require.Equal(t, taskrouter.DefaultMaxPendingPerSource, cfg.MaxPendingPerSource)
	require.Equal(t, taskrouter.DefaultInstantWindow, cfg.InstantWindow)
}

// TestOptionsValidate: values that cannot work are refused, each naming
// its field, instead of being replaced silently.
func TestOptionsValidate(t *testing.T) {
	_, err := taskrouter.NewRouter(nil, nil)
	require.ErrorContains(t, err, "the store is required")
	_, err = taskrouter.NewRouter(newMemoryWithClock(time.Now), &taskrouter.Options{DefaultTTL: 48 * time.Hour})
	require.ErrorContains(t, err, "Options.DefaultTTL: (48h0m0s) is longer than MaxTTL (24h0m0s)")
	_, err = taskrouter.NewRouter(newMemoryWithClock(time.Now), &taskrouter.Options{PollInterval: -time.Second, MaxConcurrent: -1})
	require.ErrorContains(t, err, "Options.PollInterval: is negative")
	require.ErrorContains(t, err, "Options.MaxConcurrent: is negative")
}

func TestDefaultOwner(t *testing.T) {
	ctx := context.Background()
	owner, err := taskrouter.DefaultOwner(ctx, &mcp.CallToolRequest{})
	require.NoError(t, err)
	require.Equal(t, taskrouter.LocalOwner, owner)
	owner, err = taskrouter.DefaultOwner(ctx, &mcp.CallToolRequest{Extra: &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: "alice"}}})
	require.NoError(t, err)
	require.Equal(t, "user:alice", owner)
	_, err = taskrouter.DefaultOwner(ctx, &mcp.CallToolRequest{Extra: &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{}}})
	require.ErrorContains(t, err, "no user id")
}

func TestImmediateResponse(t *testing.T) {
	h := newHarness(t, func(c *taskrouter.Options) {
		c.ImmediateResponse = func(tool string, task *store.Task) string {
			return "Started " + tool + "; check back with tasks/get " + task.ID
		}
	})
	p := h.dial(inMemory, core, nil)
	res := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": map[string]any{}})
	id := taskOf(t, res)["taskId"].(string)
	require.Equal(t, "Started sleepy; check back with tasks/get "+id, res["_meta"].(map[string]any)[mcptask.MetaModelImmediateResponse])
}
