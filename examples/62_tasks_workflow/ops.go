package main

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Operating the example's workflows (issue 34): release_train's deploys
// wait for their repository's place on the queue "deploys" (one deploy
// per repository at a time, whatever train runs it: two trains of one
// repository take turns, two of different repositories deploy at once),
// -schedule starts scheduled_report at the times of a cron expression,
// and -schedule-approval starts nightly_release, which waits for a
// person's decision (both off by default).

// deploysQueue is one deploy per repository at a time, whoever starts
// the train: a repository is one resource for every owner (SharedKeys).
var deploysQueue = &workflow.Queue{Name: "deploys", PerKey: 1, SharedKeys: true}

// scheduleName is the schedule -schedule registers.
const scheduleName = "report"

// scheduledReport is the workflow the schedule starts: a report on the
// time it was scheduled for.
func scheduledReport() *workflow.Definition {
	return workflow.New("scheduled_report", "A report on the time it was scheduled for").
		Arg(workflow.DefaultTimeArgument, "the time the schedule fired for (RFC 3339)", true).
		Step(workflow.Server("report", "generate_report").Bind("topic", workflow.PromptArg(workflow.DefaultTimeArgument)))
}

// addSchedule registers scheduled_report and its schedule when o asks for
// one (-schedule).
func addSchedule(b *builder.Builder, o options) {
	if o.Schedule == "" {
		return
	}
	b.TaskWorkflow(scheduledReport())
	b.Schedule(workflow.Schedule{Name: scheduleName, Workflow: "scheduled_report", Cron: o.Schedule, TimeZone: o.ScheduleTZ,
		Missed: taskrouter.MissedRunOnce, Description: "a report on the time it fired for", Owner: scheduleOwner(o)})
}

// nightlyName is the schedule -schedule-approval registers.
const nightlyName = "nightly"

type shipBuildIn struct {
	Build    string `json:"build" jsonschema:"the build to ship"`
	Approved bool   `json:"approved" jsonschema:"the person's decision"`
	Reason   string `json:"reason,omitempty" jsonschema:"why"`
}

type shipBuildOut struct {
	Shipped string `json:"shipped"`
}

// shipBuild ships a nightly build a person approved; a rejection is its
// failure, which fails nightly_release.
func shipBuild(_ context.Context, _ *mcp.CallToolRequest, in shipBuildIn) (*mcp.CallToolResult, shipBuildOut, error) {
	if !in.Approved {
		return nil, shipBuildOut{}, fmt.Errorf("not approved (%s): build %s is not shipped", in.Reason, in.Build)
	}
	return nil, shipBuildOut{Shipped: in.Build}, nil
}

// nightlyRelease is what -schedule-approval starts: the checks of the
// night's build, then a person's decision (the event approve: a push
// tells the operator, who answers with the CLI, the event tool, the
// webhook or tasks/update), then the server ships it; a rejection fails
// the workflow.
func nightlyRelease() *workflow.Definition {
	return workflow.New("nightly_release", "Check the night's build, ask a person, ship it if approved").
		Arg(workflow.DefaultTimeArgument, "the time the schedule fired for (RFC 3339)", true).
		Step(
			workflow.Server("checks", "run_suite").
				Bind("repo", workflow.Const("nightly")).
				Bind("version", workflow.PromptArg(workflow.DefaultTimeArgument)).
				Bind("suite", workflow.Const("unit")),
			workflow.Event("approve", "whether the night's build may ship").WithPayload(goLivePayload),
			workflow.Server("ship", "ship_build").
				Bind("build", workflow.PromptArg(workflow.DefaultTimeArgument)).
				Bind("approved", workflow.StepOutput("approve", "approved")).
				Bind("reason", workflow.StepOutput("approve", "reason")).
				FailsWorkflow(),
		)
}

// addApprovalSchedule registers nightly_release and its schedule when o
// asks for one (-schedule-approval).
func addApprovalSchedule(b *builder.Builder, o options) {
	if o.ApprovalSchedule == "" {
		return
	}
	builder.Tool(b, &mcp.Tool{Name: "ship_build", Description: "Ship a nightly build a person approved."}, shipBuild,
		&taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	b.TaskWorkflow(nightlyRelease())
	b.Schedule(workflow.Schedule{Name: nightlyName, Workflow: "nightly_release", Cron: o.ApprovalSchedule, TimeZone: o.ScheduleTZ,
		Missed: taskrouter.MissedRunOnce, Description: "the night's build, shipped on a person's approval", Owner: scheduleOwner(o)})
}

// scheduleOwner is the owner of the example's schedules: -schedule-owner's
// user as an authenticated request names it, or "" (the local owner).
func scheduleOwner(o options) string {
	if o.ScheduleOwner == "" {
		return ""
	}
	return "user:" + o.ScheduleOwner
}
