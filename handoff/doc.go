// Package handoff defines the handoff document: what a taskbridge server
// hands back to the client when a workflow prompt becomes a task and pauses
// at steps the client must perform.
//
// # Format
//
// A handoff is delivered twice in a prompts/get result:
//
//   - as the final assistant message, whose text is prose an LLM can follow
//     followed by exactly one fenced ```json block holding the document
//     (see [Render] and [Parse]); and
//   - as the same document under the key [MetaKey] ("taskbridge/handoff")
//     of the result's _meta (see [Document.Meta] and [FromPromptResult]).
//
// The prose opens with a sentence naming the workflow and the task id, then
// gives the status and pause reason, the completed steps with a one-line
// result each, the remaining steps (numbered; client steps show their tool,
// exact arguments, the placeholders to fill in and the guidance; server
// steps are marked as run automatically), any errors, and finally how to
// continue: call the client steps' tools with "_meta": {"_task_id": "<id>"}
// and follow the task with tasks/get (and tasks/result where available).
//
// The JSON block is a [Document], indented with two spaces. Its shape is
// published as a JSON Schema ([Schema], [SchemaJSON]); schemaVersion is 1.
// Readers ignore unknown fields, so later revisions of version 1 may add
// optional fields; an incompatible change bumps schemaVersion, which
// [Parse] rejects with a message naming the supported version.
//
// Argument values of remaining steps are the resolved JSON values where the
// server knows them, or a placeholder: a JSON string of the form
// "<description>" ([Placeholder], [IsPlaceholder]) that the client replaces
// with a real value before calling the tool.
//
// The package is pure data: it does not talk to a server or a store.
package handoff
