package handoff

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// SchemaID is the $id of the handoff JSON Schema.
const SchemaID = "https://taskbridge.dev/schemas/handoff-v1.json"

// Schema returns the JSON Schema (draft 2020-12) of the document's JSON
// form, inferred from [Document] and its jsonschema field tags, with enums
// for status and execution, const values for schemaVersion and
// continuation.metaKey, and minLength 1 on the strings [Document.Validate]
// requires to be non-empty. Additional properties are allowed, as [Parse]
// ignores unknown fields. Each call returns a new copy.
func Schema() *jsonschema.Schema {
	return schemaOnce().CloneSchemas()
}

// SchemaJSON returns [Schema] encoded as indented JSON. Each call returns
// a new slice.
func SchemaJSON() []byte {
	b, err := json.MarshalIndent(schemaOnce(), "", "  ")
	if err != nil {
		panic(fmt.Sprintf("handoff: encoding the schema: %v", err)) // a bug
	}
	return b
}

var schemaOnce = sync.OnceValue(func() *jsonschema.Schema {
	s, err := buildSchema()
	if err != nil {
		panic(err) // a bug: the types are fixed
	}
	return s
})

func buildSchema() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[Document](&jsonschema.ForOptions{
		TypeSchemas: map[reflect.Type]*jsonschema.Schema{
			// Any JSON value, not an array of bytes.
			reflect.TypeFor[json.RawMessage](): {},
			reflect.TypeFor[Execution](): {
				Type: "string",
				Enum: []any{string(ExecServer), string(ExecClient)},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("handoff: inferring the schema: %w", err)
	}
	s.Schema = "https://json-schema.org/draft/2020-12/schema"
	s.ID = SchemaID
	s.Title = "taskbridge handoff"
	s.Description = "A paused workflow task and what the client must do next: the JSON block at the end of the final assistant message of a workflow prompt, also found in the prompt result's _meta[\"taskbridge/handoff\"]."
	relax(s)

	one := 1
	var version any = SchemaVersion
	s.Properties["schemaVersion"].Const = &version
	s.Properties["status"].Enum = []any{StatusWorking, StatusInputRequired, StatusCompleted, StatusFailed, StatusCancelled}
	for _, p := range []string{"taskId", "workflow"} {
		s.Properties[p].MinLength = &one
	}
	for _, p := range []string{"completedSteps", "remainingSteps"} {
		item := s.Properties[p].Items
		item.Properties["name"].MinLength = &one
		item.Properties["tool"].MinLength = &one
	}
	errItem := s.Properties["errors"].Items
	errItem.Properties["step"].MinLength = &one
	errItem.Properties["message"].MinLength = &one
	cont := s.Properties["continuation"]
	var metaKey any = TaskIDMetaKey
	cont.Properties["metaKey"].Const = &metaKey
	cont.Properties["taskId"].MinLength = &one
	cont.Properties["statusMethod"].MinLength = &one
	return s, nil
}

// relax walks the inferred schema: arrays are never null in the document
// (they are [] or omitted), and objects accept unknown properties for
// forward compatibility.
func relax(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && s.Types[0] == "null" && s.Types[1] == "array" {
		s.Types = nil
		s.Type = "array"
	}
	if s.Type == "object" && s.Properties != nil {
		s.AdditionalProperties = nil
	}
	for _, p := range s.Properties {
		relax(p)
	}
	relax(s.Items)
	relax(s.AdditionalProperties)
}
