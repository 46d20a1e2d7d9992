package handoff_test

import (
	"encoding/json"
	"fmt"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A workflow "publish-summary" ran its first two steps on the server and
// paused at "review", which the client must perform. The rendered text is
// the final assistant message of the prompt result.
func Example() {
	doc := &handoff.Document{
		SchemaVersion: handoff.SchemaVersion,
		TaskID:        "task-7f3a",
		Workflow:      "publish-summary",
		Goal:          "Summarize a web page and publish the reviewed summary.",
		Status:        string(mcptask.StatusInputRequired),
		PauseReason:   `step "review" must be performed by the client`,
		CompletedSteps: []handoff.CompletedStep{
			{
				Name:   "fetch",
				Tool:   "fetch_url",
				Result: json.RawMessage(`{"content":[{"type":"text","text":"Example Domain. This domain is for use in documentation examples."}]}`),
			},
			{
				Name:   "summarize",
				Tool:   "summarize",
				Result: json.RawMessage(`{"summary":"A placeholder domain for documentation.","words":6}`),
			},
		},
		RemainingSteps: []handoff.RemainingStep{
			{
				Name:      "review",
				Tool:      "review_draft",
				Execution: mcptask.ExecClient,
				Arguments: map[string]json.RawMessage{
					"draft":    json.RawMessage(`"A placeholder domain for documentation."`),
					"verdict":  handoff.Placeholder("approve or reject"),
					"comments": handoff.Placeholder("what to change, if rejected"),
					"_task_id": json.RawMessage(`"task-7f3a"`),
				},
				Guidance:  "Read the draft and decide whether it is accurate.",
				DependsOn: []string{"summarize"},
			},
			{
				Name:      "publish",
				Tool:      "publish_post",
				Execution: mcptask.ExecServer,
				Arguments: map[string]json.RawMessage{
					"body": handoff.Placeholder("the approved draft from step review"),
				},
				DependsOn: []string{"review"},
			},
		},
		Continuation: handoff.NewContinuation("task-7f3a", mcptask.Core),
	}
	text, err := handoff.Render(doc)
	if err != nil {
		panic(err)
	}
	fmt.Print(text)
	// Output:
	// Workflow "publish-summary" (task "task-7f3a") is waiting for you (status: input_required).
	// Goal: Summarize a web page and publish the reviewed summary.
	//
	// Next: step "review". Call tool "review_draft" with {"_task_id":"task-7f3a","draft":"A placeholder domain for documentation.","comments":<value>,"verdict":<value>}, where:
	// - "comments" (value): what to change, if rejected
	// - "verdict" (value): approve or reject
	// Guidance: Read the draft and decide whether it is accurate.
	//
	// Done:
	// - "fetch" (tool "fetch_url"): Example Domain. This domain is for use in documentation examples.
	// - "summarize" (tool "summarize"): {"summary":"A placeholder domain for documentation.","words":6}
	//
	// Then:
	// - "publish" (tool "publish_post"): the server runs it by itself.
	//
	// After your call the server runs the steps that follow and answers with where the workflow stands. (A program may send the task id as "_meta": {"_task_id": "task-7f3a"} instead of the argument "_task_id".)
	// The same handoff follows as JSON (schemaVersion 4) for programs.
	//
	// ```json
	// {
	//   "schemaVersion": 4,
	//   "taskId": "task-7f3a",
	//   "workflow": "publish-summary",
	//   "goal": "Summarize a web page and publish the reviewed summary.",
	//   "status": "input_required",
	//   "pauseReason": "step \"review\" must be performed by the client",
	//   "completedSteps": [
	//     {
	//       "name": "fetch",
	//       "tool": "fetch_url",
	//       "result": {
	//         "content": [
	//           {
	//             "type": "text",
	//             "text": "Example Domain. This domain is for use in documentation examples."
	//           }
	//         ]
	//       }
	//     },
	//     {
	//       "name": "summarize",
	//       "tool": "summarize",
	//       "result": {
	//         "summary": "A placeholder domain for documentation.",
	//         "words": 6
	//       }
	//     }
	//   ],
	//   "remainingSteps": [
	//     {
	//       "name": "review",
	//       "tool": "review_draft",
	//       "execution": "client",
	//       "arguments": {
	//         "_task_id": "task-7f3a",
	//         "comments": "<what to change, if rejected>",
	//         "draft": "A placeholder domain for documentation.",
	//         "verdict": "<approve or reject>"
	//       },
	//       "guidance": "Read the draft and decide whether it is accurate.",
	//       "dependsOn": [
	//         "summarize"
	//       ]
	//     },
	//     {
	//       "name": "publish",
	//       "tool": "publish_post",
	//       "execution": "server",
	//       "arguments": {
	//         "body": "<the approved draft from step review>"
	//       },
	//       "dependsOn": [
	//         "review"
	//       ]
	//     }
	//   ],
	//   "continuation": {
	//     "argument": "_task_id",
	//     "metaKey": "_task_id",
	//     "taskId": "task-7f3a",
	//     "statusMethod": "tasks/get",
	//     "resultMethod": "tasks/result",
	//     "resumeMethod": "prompts/get",
	//     "instructions": "Call each client step's tool with the arguments shown, which include \"_task_id\": \"task-7f3a\" (a program may set \"_meta\": {\"_task_id\": \"task-7f3a\"} instead), then poll tasks/get with {\"taskId\": \"task-7f3a\"} until the task is completed, failed or cancelled (or wait on tasks/result with {\"taskId\": \"task-7f3a\"})."
	//   }
	// }
	// ```
}
