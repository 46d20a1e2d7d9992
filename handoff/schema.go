package handoff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/invopop/jsonschema"
	"github.com/taskbridge/taskbridge/mcptask"
)

// SchemaID is the $id of the handoff JSON Schema.
const SchemaID = "https://taskbridge.dev/schemas/handoff-v2.json"

// Schema returns the JSON Schema (draft 2020-12) of the document's JSON
// form, generated with github.com/invopop/jsonschema from [Document] and
// its field tags: descriptions on every field, enums for status and
// execution, const values for schemaVersion and continuation.metaKey,
// minLength 1 on the strings [Document.Validate] requires to be non-empty,
// and the required fields. Additional properties are allowed everywhere,
// as [Parse] ignores unknown fields. Each call returns a new schema.
func Schema() *jsonschema.Schema {
	r := &jsonschema.Reflector{
		Anonymous:                 true, // $id is set below
		DoNotReference:            true,
		ExpandedStruct:            true,
		AllowAdditionalProperties: true,
	}
	s := r.Reflect(&Document{})
	s.Version = jsonschema.Version
	s.ID = SchemaID
	s.Title = "taskbridge handoff"
	s.Description = "A workflow task and what the client must do next: the JSON block at the end of the final assistant message of a workflow prompt, also found in the prompt result's _meta[\"taskbridge/handoff\"]."

	// Keywords the tags cannot express.
	versions := []any{}
	for v := MinSchemaVersion; v <= SchemaVersion; v++ {
		versions = append(versions, v)
	}
	prop(s, "schemaVersion").Enum = versions
	prop(prop(s, "continuation"), "metaKey").Const = mcptask.MetaTaskID
	return s
}

// prop returns the schema of property name of s; the property must exist.
func prop(s *jsonschema.Schema, name string) *jsonschema.Schema {
	p, ok := s.Properties.Get(name)
	if !ok {
		panic(fmt.Sprintf("handoff: schema has no property %q", name)) // a bug
	}
	return p
}

// SchemaJSON returns [Schema] encoded as indented JSON. Each call returns
// a new slice.
func SchemaJSON() []byte {
	return bytes.Clone(schemaJSON())
}

var schemaJSON = sync.OnceValue(func() []byte {
	b, err := json.MarshalIndent(Schema(), "", "  ")
	if err != nil {
		panic(fmt.Sprintf("handoff: encoding the schema: %v", err)) // a bug
	}
	return b
})
