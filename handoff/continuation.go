package handoff

import (
	"fmt"

	"github.com/taskbridge/taskbridge/mcptask"
)

// Continuation says how the client continues a task.
type Continuation struct {
	// Argument is the tool argument that carries the task id on
	// continuation calls; always [mcptask.ArgTaskID] (version 2).
	Argument string `json:"argument,omitempty" jsonschema_description:"The tool argument that carries taskId on continuation tool calls (every client step's arguments already include it). Always _task_id."`
	// MetaKey is the _meta key a program may set instead, to the task id;
	// always [mcptask.MetaTaskID].
	MetaKey string `json:"metaKey" jsonschema_description:"The _meta key a program may set, to taskId, on continuation tool calls instead of the argument. Always _task_id."`
	// TaskID is the task id; equal to Document.TaskID.
	TaskID string `json:"taskId" jsonschema:"minLength=1" jsonschema_description:"The task id; equal to the document's taskId."`
	// StatusMethod is the request that reports the task's status
	// ([mcptask.MethodTasksGet]).
	StatusMethod string `json:"statusMethod" jsonschema:"minLength=1" jsonschema_description:"Request that reports the task status, called with {\"taskId\": ...}."`
	// ResultMethod is the request that waits for the task's result
	// ([mcptask.MethodTasksResult]); empty for clients on the tasks extension, which has
	// no such request.
	ResultMethod string `json:"resultMethod,omitempty" jsonschema_description:"Request that waits for the task result, called with {\"taskId\": ...}. Absent when the client has no such request."`
	// ResumeMethod is the request that resumes the workflow
	// ([mcptask.MethodPromptsGet], with _meta._task_id).
	ResumeMethod string `json:"resumeMethod,omitempty" jsonschema_description:"Request that resumes the workflow (prompts/get of the same prompt with _meta._task_id): the server retries failed server steps and answers with a fresh handoff."`
	// ResultTool, when the server offers it, is a tool that waits for the
	// task and returns its state or result, called with {"task_id": id}:
	// what a model uses instead of tasks/get and tasks/result.
	ResultTool string `json:"resultTool,omitempty" jsonschema_description:"A tool that waits for the task and returns its state or final result, called with {\"task_id\": taskId}; for clients that cannot send tasks/get or tasks/result."`
	// ResumeTool, when set, is the workflow's own tool: called with
	// {"_task_id": taskId} it resumes the workflow (what a model uses
	// instead of ResumeMethod).
	ResumeTool string `json:"resumeTool,omitempty" jsonschema_description:"The workflow's tool: called with {\"_task_id\": taskId} it resumes the workflow (the server retries failed server steps) and returns a fresh handoff; for clients that cannot send prompts/get."`
	// Instructions is one sentence on how to continue.
	Instructions string `json:"instructions" jsonschema_description:"One sentence on how to continue."`
}

// NewContinuation returns the continuation of taskID for a client that
// speaks dialect d: Argument [mcptask.ArgTaskID], MetaKey [mcptask.MetaTaskID],
// StatusMethod [mcptask.MethodTasksGet], ResumeMethod [mcptask.MethodPromptsGet], ResultMethod
// [mcptask.MethodTasksResult] only if the dialect has it, and a one-sentence
// instruction naming the task id and only methods the dialect has. Set
// ResultTool with [Continuation.WithResultTool].
func NewContinuation(taskID string, d mcptask.Dialect) Continuation {
	c := Continuation{
		Argument:     mcptask.ArgTaskID,
		MetaKey:      mcptask.MetaTaskID,
		TaskID:       taskID,
		StatusMethod: mcptask.MethodTasksGet,
		ResumeMethod: mcptask.MethodPromptsGet,
	}
	if d.HasMethod(mcptask.MethodTasksResult) {
		c.ResultMethod = mcptask.MethodTasksResult
	}
	c.Instructions = c.instructions()
	return c
}

// WithResumeTool returns c naming the workflow's own tool, which resumes
// it (see Continuation.ResumeTool).
func (c Continuation) WithResumeTool(tool string) Continuation {
	c.ResumeTool = tool
	return c
}

// WithResultTool returns c naming tool as the tool that waits for the task
// (see Continuation.ResultTool).
func (c Continuation) WithResultTool(tool string) Continuation {
	c.ResultTool = tool
	c.Instructions = c.instructions()
	return c
}

func (c Continuation) instructions() string {
	id := jsonString(c.TaskID)
	follow := fmt.Sprintf("poll %s with {\"taskId\": %s}", c.StatusMethod, id)
	if c.ResultTool != "" {
		follow = fmt.Sprintf("call tool %s with {\"task_id\": %s} (or poll %s)", jsonString(c.ResultTool), id, c.StatusMethod)
	}
	wait := ""
	if c.ResultMethod != "" {
		wait = fmt.Sprintf(" (or wait on %s with {\"taskId\": %s})", c.ResultMethod, id)
	}
	return fmt.Sprintf("Call each client step's tool with the arguments shown, which include %s: %s (a program may set \"_meta\": {%s: %s} instead), then %s until the task is completed, failed or cancelled%s.",
		jsonString(mcptask.ArgTaskID), id, jsonString(mcptask.MetaTaskID), id, follow, wait)
}
