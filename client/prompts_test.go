package client_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPrompts(t *testing.T) {
	f := newFlowServer(t)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			c := f.dial(t, m, nil)
			prompts, err := c.Prompts(testCtx(t))
			require.NoError(t, err)
			byName := map[string]int{}
			for i, p := range prompts {
				byName[p.Name] = i
			}
			require.Contains(t, byName, "hello")
			require.Contains(t, byName, "flow")
			flow := prompts[byName["flow"]]
			require.Equal(t, "prepare, approve, stamp, sign, finish", flow.Description)
			require.Len(t, flow.Arguments, 1)
			require.Equal(t, "topic", flow.Arguments[0].Name)
			require.True(t, flow.Arguments[0].Required)
		})
	}
}
