// Package handoff defines the handoff document: what a taskbridge server
// hands back to the client when a workflow prompt becomes a task and pauses
// at steps the client must perform.
//
// # Format
//
// A handoff is prose a model follows and a [Document] a program reads.
// Where each goes depends on the reader:
//
//   - a prompts/get result: the final assistant message is the prose
//     followed by exactly one fenced ```json block holding the document
//     ([Render], [Parse]), and the document is under the key [mcptask.MetaHandoff]
//     ("taskbridge/handoff") of the result's _meta ([Document.Meta],
//     [FromPromptResult]);
//   - a tool result (a workflow tool, a continuation, a task's result): the
//     text is the prose only ([RenderWith] with NoJSON), read by a model in
//     an LLM host; the document is the structured content and in _meta
//     ([FromToolResult]). A request may ask for the block in the text too.
//
// The prose leads with the one thing to do next. It opens with a sentence
// naming the workflow, the task id and where it stands ("is waiting for
// you", "is running on the server", "is complete"), and the goal. Then
// "Next:": for each step the client may perform now (a [RemainingStep]
// with a [Call]), the call that performs it: the tool, the values to send
// as they are (the task id as _task_id among them), each value to fill in
// as <type> ([Fill.Placeholder]) with a line giving its type, allowed
// values and meaning, the values the server adds itself, the step's last
// error when it is one to correct, and "Ask the user, then ..." for a
// person's decision; or that there is nothing to call while the server
// works. Then "Done:" (each completed step with a one-line result),
// "Skipped" (with the reason), "Then:" (what happens to each step that is
// not the client's now, with its condition), and how to go on: the tool
// or method that waits for the task, or that the workflow has finished.
//
// The JSON block is a [Document], indented with two spaces. Its shape is
// published as a JSON Schema ([Schema], [SchemaJSON]); schemaVersion is
// [SchemaVersion], and [Parse] reads versions [MinSchemaVersion] and up.
// Readers ignore unknown fields, so later revisions may add optional
// fields; an incompatible change bumps schemaVersion.
//
// Argument values of remaining steps are the resolved JSON values where the
// server knows them, or a placeholder: a JSON string of the form
// "<description>" ([Placeholder], [IsPlaceholder]) that the client replaces
// with a real value before calling the tool. A server refuses a call that
// sends a placeholder back unchanged, in either form.
//
// The package is pure data: it does not talk to a server or a store.
package handoff
