package main

import (
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Operating the example's workflows (issue 34): release_train's deploys
// wait for their repository's place on the queue "deploys" (one deploy
// per repository at a time, whatever train runs it: two trains of one
// repository take turns, two of different repositories deploy at once),
// and -schedule starts scheduled_report at the times of a cron
// expression (off by default).

// deploysQueue is one deploy per repository at a time.
var deploysQueue = &workflow.Queue{Name: "deploys", PerKey: 1}

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
		Missed: taskrouter.MissedRunOnce, Description: "a report on the time it fired for"})
}
