package taskrouter_test

import (
	"context"
	"os"
	"regexp"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// sdkVersion is the go-sdk version whose behaviour the shims, the fast
// path and package internal/wire reproduce (see doc.go, "Upgrading
// go-sdk").
const sdkVersion = "v1.8.0"

// TestGoSDKVersionPinned fails when go-sdk is upgraded: go through the
// list in doc.go ("Upgrading go-sdk"), then move sdkVersion.
func TestGoSDKVersionPinned(t *testing.T) {
	gomod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/modelcontextprotocol/go-sdk\s+(\S+)`).FindSubmatch(gomod)
	require.NotNil(t, m, "go.mod requires go-sdk")
	require.NotRegexp(t, `(?m)^\s*replace\s.*modelcontextprotocol/go-sdk`, string(gomod), "go-sdk is replaced: check the replacement as an upgrade")
	require.Equal(t, sdkVersion, string(m[1]), "go-sdk changed: re-check what taskrouter/doc.go lists under \"Upgrading go-sdk\", then update sdkVersion")
}

// TestMiddlewareAfterInstallSeesFastPath: receiving middleware added to
// the server after Install (the outermost, as go-sdk composes it) sees
// the requests the fast path answers, exactly as it sees the SDK's, over
// HTTP and over a framed stream alike; the fast path stays on.
func TestMiddlewareAfterInstallSeesFastPath(t *testing.T) {
	for _, k := range []transportKind{overHTTP, inMemory} {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			var mu sync.Mutex
			seen := map[string]int{}
			h.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					mu.Lock()
					seen[method]++
					mu.Unlock()
					return next(ctx, method, req)
				}
			})
			p := h.dial(k, core, nil)
			created := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"label": "mw", "ms": 1}, "task": map[string]any{}})
			id := created["task"].(map[string]any)["taskId"].(string)
			require.Equal(t, "slept mw", p.mustCall("tasks/result", map[string]any{"taskId": id})["content"].([]any)[0].(map[string]any)["text"])
			require.Equal(t, "completed", p.mustCall("tasks/get", map[string]any{"taskId": id})["status"])
			require.True(t, taskrouter.FastPathUsable(h.r))
			require.NotZero(t, taskrouter.FastServed(h.r), "the fast path served the task methods")
			mu.Lock()
			defer mu.Unlock()
			for _, m := range []string{"tools/call", "tasks/result", "tasks/get"} {
				require.Equal(t, 1, seen[m], "the middleware saw %s once", m)
			}
		})
	}
}
