package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// release_train: the workflow of issue 29 that composes the kinds. Per
// service of a comma-separated list it builds (a for-each, two at once),
// has the repository's release notes written by a child workflow (the
// train's client reviews them), deploys each service in turn (each with
// its rollback as undo), then smoke-tests each (a bounded loop of at most 3
// tries, 1 s apart, each try timed out at 3 s). A service whose name
// contains "flaky" is never healthy; one containing "hang" hangs in its
// smoke test. Either fails the train, which rolls back every deployed
// service, last first.

// serviceIn names a service of a repository.
type serviceIn struct {
	Repo    string `json:"repo" jsonschema:"the repository"`
	Service string `json:"service" jsonschema:"the service"`
}

type buildOut struct {
	Service  string `json:"service"`
	Artifact string `json:"artifact"`
}

// deployOut says when a deploy ran, so that callers can see which deploys
// overlapped.
type deployOut struct {
	Service  string    `json:"service"`
	Deployed string    `json:"deployed"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended"`
}

type rollbackOut struct {
	Service    string `json:"service"`
	RolledBack string `json:"rolledBack"`
}

type smokeOut struct {
	Service string `json:"service"`
	Healthy bool   `json:"healthy"`
	Detail  string `json:"detail"`
}

// trainStep is how long building or deploying a service takes.
const trainStep = 200 * time.Millisecond

// wait waits d or until ctx ends.
func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func artifactOf(in serviceIn) string {
	sum := sha1.Sum([]byte(in.Repo + "/" + in.Service))
	return fmt.Sprintf("%s/%s@%s", in.Repo, in.Service, hex.EncodeToString(sum[:])[:7])
}

func buildService(ctx context.Context, _ *mcp.CallToolRequest, in serviceIn) (*mcp.CallToolResult, buildOut, error) {
	if err := wait(ctx, trainStep); err != nil {
		return nil, buildOut{}, err
	}
	taskrouter.Logger(ctx).Info("built", "service", in.Service)
	return nil, buildOut{Service: in.Service, Artifact: artifactOf(in)}, nil
}

func deployService(ctx context.Context, _ *mcp.CallToolRequest, in serviceIn) (*mcp.CallToolResult, deployOut, error) {
	started := time.Now().UTC()
	if err := wait(ctx, trainStep); err != nil {
		return nil, deployOut{}, err
	}
	return nil, deployOut{Service: in.Service, Deployed: artifactOf(in), Started: started, Ended: time.Now().UTC()}, nil
}

func rollbackService(ctx context.Context, _ *mcp.CallToolRequest, in serviceIn) (*mcp.CallToolResult, rollbackOut, error) {
	return nil, rollbackOut{Service: in.Service, RolledBack: artifactOf(in) + " is no longer served"}, nil
}

// smokeTest checks a deployed service: "flaky" services are never
// healthy, "hang" ones never answer.
func smokeTest(ctx context.Context, _ *mcp.CallToolRequest, in serviceIn) (*mcp.CallToolResult, smokeOut, error) {
	switch {
	case strings.Contains(in.Service, "hang"):
		<-ctx.Done() // the step's Timeout cuts it
		return nil, smokeOut{}, ctx.Err()
	case strings.Contains(in.Service, "flaky"):
		return nil, smokeOut{Service: in.Service, Detail: "5 of 20 requests failed"}, nil
	}
	return nil, smokeOut{Service: in.Service, Healthy: true, Detail: "20 of 20 requests answered"}, nil
}

// trainWorkflow is release_train.
func trainWorkflow() *workflow.Definition {
	services := workflow.PromptArg("services")
	repo := workflow.PromptArg("repo")
	return workflow.New("release_train", "Build, document, deploy and smoke-test every service of a repository, rolling back on failure").
		WithGoal("Every listed service runs the new build, healthy, with reviewed release notes; or none does").
		Arg("repo", "repository to release (any name)", true).
		Arg("services", `services to release, comma-separated (a name containing "flaky" fails its smoke test, one containing "hang" hangs in it)`, true).
		Step(
			workflow.ForEach("build", services,
				workflow.Server("build_service", "build_service").Bind("repo", repo).Bind("service", workflow.Item()).WithRetry()).
				Limit(2).
				WithGuidance("Builds every service, two at a time."),
			workflow.Child("notes", "release_notes").Bind("repo", repo).
				WithGuidance("The release notes are a workflow of their own: review its draft when asked."),
			workflow.ForEach("deploy", services,
				workflow.Server("deploy_service", "deploy_service").Bind("repo", repo).Bind("service", workflow.Item()).
					OnQueue(deploysQueue, workflow.QueueKey(repo)). // one deploy per repository at a time (ops.go)
					Undo(workflow.Server("rollback_service", "rollback_service").Bind("repo", repo).Bind("service", workflow.Item()).WithRetry())).
				InSequence().
				WithGuidance("Deploys the services one at a time, and one per repository across trains; a failure later rolls them all back, last first."),
			workflow.ForEach("smoke", services,
				workflow.Repeat("smoke_service",
					workflow.Server("smoke_test", "smoke_test").Bind("repo", repo).Bind("service", workflow.Item()).Timeout(3*time.Second)).
					Until(workflow.Truthy(workflow.StepOutput("smoke_test", "healthy"))).AtMost(3).Every(time.Second)).
				WithGuidance("Smoke-tests every service until it is healthy: at most 3 tries, 1 s apart, 3 s each."),
		)
}

// addTrain registers release_train's tools and workflow (after
// release_notes, the child it starts).
func addTrain(b *builder.Builder) {
	opts := &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional}
	builder.Tool(b, &mcp.Tool{Name: "build_service", Description: "Build one service of a repository."}, buildService, opts)
	builder.Tool(b, &mcp.Tool{Name: "deploy_service", Description: "Deploy one service's build; the result says when the deploy started and ended."}, deployService, opts)
	builder.Tool(b, &mcp.Tool{Name: "rollback_service", Description: "Take a service back to its previous build."}, rollbackService, opts)
	builder.Tool(b, &mcp.Tool{Name: "smoke_test", Description: "Send a deployed service a few requests and say whether it is healthy."}, smokeTest, opts)
	b.TaskWorkflow(trainWorkflow().AsTool())
}
