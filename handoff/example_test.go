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
		Status:        handoff.StatusInputRequired,
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
				Execution: handoff.ExecClient,
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
				Execution: handoff.ExecServer,
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
	// Workflow "publish-summary" (task "task-7f3a") is paused, waiting for the client (status: input_required).
	// Goal: Summarize a web page and publish the reviewed summary.
	// Paused because: step "review" must be performed by the client.
	//
	// Completed steps:
	// - "fetch" (tool "fetch_url"): Example Domain. This domain is for use in documentation examples.
	// - "summarize" (tool "summarize"): {"summary":"A placeholder domain for documentation.","words":6}
	//
	// Remaining steps:
	// 1. "review" (tool "review_draft"): YOU (the client) must perform this step by calling tool "review_draft".
	//    Arguments: {"_task_id":"task-7f3a","comments":"<what to change, if rejected>","draft":"A placeholder domain for documentation.","verdict":"<approve or reject>"}
	//    Placeholders you must replace with real values: "comments", "verdict".
	//    Guidance: Read the draft and decide whether it is accurate.
	//    Needs the output of: "summarize".
	// 2. "publish" (tool "publish_post"): the server runs this step automatically once its inputs exist; do not call it yourself.
	//    Needs the output of: "review".
	//
	// How to continue: call the tool of each client step above with the arguments shown, replacing the placeholders. The arguments include "_task_id": "task-7f3a", which records the call on this task; the server then runs the steps that follow. (A program may send the id as "_meta": {"_task_id": "task-7f3a"} instead.) Then call tasks/get with {"taskId": "task-7f3a"} to follow the task, or tasks/result with {"taskId": "task-7f3a"} to wait for its final result.
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
