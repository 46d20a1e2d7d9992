package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/workflow"
)

// TestTrainsTakeTurnsPerRepository: two release trains of one repository
// and one of another run at once. The two of one repository never run
// deploy_service at the same time (each deploy's result says when it
// started and ended); the other repository's deploys run beside them.
func TestTrainsTakeTurnsPerRepository(t *testing.T) {
	cs, _, srv := exampleServer(t)
	repos := []string{"acme/shop", "acme/shop", "acme/web"}
	docs := make([]*handoff.Document, len(repos))
	var wg sync.WaitGroup
	for i, repo := range repos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			docs[i] = promptDoc(t, cs, "release_train", map[string]string{"repo": repo, "services": "api, web, worker"})
		}()
	}
	wg.Wait()
	for _, doc := range docs { // at once: each answer waits for its train to rest
		wg.Add(1)
		go func() {
			defer wg.Done()
			reviewTrainNotes(t, cs, doc)
		}()
	}
	wg.Wait()
	byRepo := map[string][]deployOut{}
	for i, doc := range docs {
		tk, p := endOf(t, srv, doc.TaskID, time.Minute)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		var deploys []deployOut
		require.NoError(t, json.Unmarshal(p.Outputs["deploy"], &deploys))
		require.Len(t, deploys, 3)
		byRepo[repos[i]] = append(byRepo[repos[i]], deploys...)
	}
	shop := byRepo["acme/shop"]
	sort.Slice(shop, func(i, j int) bool { return shop[i].Started.Before(shop[j].Started) })
	for i := 1; i < len(shop); i++ {
		require.False(t, shop[i].Started.Before(shop[i-1].Ended),
			"two deploys of acme/shop at once: %s (%s to %s) and %s (%s to %s)", shop[i-1].Deployed, shop[i-1].Started, shop[i-1].Ended, shop[i].Deployed, shop[i].Started, shop[i].Ended)
	}
	overlaps := false
	for _, w := range byRepo["acme/web"] {
		for _, s := range shop {
			overlaps = overlaps || w.Started.Before(s.Ended) && s.Started.Before(w.Ended)
		}
	}
	require.True(t, overlaps, "acme/web deployed beside acme/shop's trains, not after them")
	es, err := srv.Store.QueueEntries(context.Background(), "deploys")
	require.NoError(t, err)
	require.Empty(t, es, "every place was given back")
}

// TestScheduleFlag: serve's -schedule registers the schedule "report",
// which starts scheduled_report with the time it fired for; without it
// there is neither.
func TestScheduleFlag(t *testing.T) {
	dir := t.TempDir()
	b, err := newBuilder(options{DB: filepath.Join(dir, "tasks.db"), Schedule: "@every 1s", ScheduleTZ: "Europe/Berlin"})
	require.NoError(t, err)
	srv, err := b.WithoutEnv().Build(context.Background())
	require.NoError(t, err)
	defer srv.Close()
	var fire store.Fire
	require.Eventually(t, func() bool {
		fires, err := srv.Store.Fires(context.Background(), scheduleName, 1)
		require.NoError(t, err)
		if len(fires) == 0 || !fires[0].Started {
			return false
		}
		fire = fires[0]
		return true
	}, 15*time.Second, 50*time.Millisecond, "the schedule fired")
	tk, p := endOf(t, srv, fire.TaskID, 15*time.Second)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, "scheduled_report", tk.Request.Name)
	require.Equal(t, fire.At.UTC().Format(time.RFC3339), p.Arguments[workflow.DefaultTimeArgument])
	require.Equal(t, scheduleName, tk.Labels[workflow.LabelSchedule])

	tr, err := srv.Connect(context.Background())
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "schedule_list", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.Contains(t, res.Content[0].(*mcp.TextContent).Text, `report: "@every 1s" (Europe/Berlin)`)

	off, _, _ := exampleServer(t)
	prompts, err := off.ListPrompts(context.Background(), nil)
	require.NoError(t, err)
	for _, pr := range prompts.Prompts {
		require.NotEqual(t, "scheduled_report", pr.Name, "off by default")
	}
	tools, err := off.ListTools(context.Background(), nil)
	require.NoError(t, err)
	for _, tool := range tools.Tools {
		require.NotEqual(t, "schedule_list", tool.Name)
	}
}
