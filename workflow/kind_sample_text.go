// The texts of sampling and ask steps: the prompt template a step's
// text is ({{name}} for its bound values), and the model's reply read
// back as text or as the JSON object it holds.

package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// sampledText joins the text blocks of a sampling result's content.
func sampledText(content json.RawMessage) (string, error) {
	type block struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	var blocks []block
	if len(content) == 0 || string(content) == "null" {
		return "", errors.New("it holds no content")
	}
	if content[0] == '[' {
		if err := json.Unmarshal(content, &blocks); err != nil {
			return "", fmt.Errorf("its content is not a list of blocks: %v", err)
		}
	} else {
		var b block
		if err := json.Unmarshal(content, &b); err != nil {
			return "", fmt.Errorf("its content is not a content block: %v", err)
		}
		blocks = []block{b}
	}
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	if len(parts) == 0 {
		return "", errors.New("it holds no text")
	}
	return strings.Join(parts, "\n"), nil
}

// jsonReply reads the JSON object a model's reply holds (alone, or in a
// ```json fence, or between its first "{" and last "}"), checked against
// schema.
func jsonReply(text string, schema any) (json.RawMessage, error) {
	t := strings.TrimSpace(text)
	if i := strings.Index(t, "```"); i >= 0 {
		rest := t[i+3:]
		rest = strings.TrimPrefix(rest, "json")
		if j := strings.Index(rest, "```"); j >= 0 {
			t = strings.TrimSpace(rest[:j])
		}
	}
	if i, j := strings.Index(t, "{"), strings.LastIndex(t, "}"); i >= 0 && j > i {
		t = t[i : j+1]
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(t), &v); err != nil || v == nil {
		return nil, fmt.Errorf("the reply holds no JSON object: %s", truncate(oneLine(text), 200))
	}
	if err := matchSchema(schema, v); err != nil {
		return nil, fmt.Errorf("the reply's JSON object does not match the schema: %v", err)
	}
	return marshal(v), nil
}

// templateNames lists the names a text's {{name}} placeholders use, in
// order of first use.
func templateNames(text string) ([]string, error) {
	var out []string
	for rest := text; ; {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if strings.Contains(rest, "}}") {
				return out, errors.New(`has "}}" without "{{"`)
			}
			return out, nil
		}
		if strings.Contains(rest[:i], "}}") {
			return out, errors.New(`has "}}" without "{{"`)
		}
		j := strings.Index(rest[i+2:], "}}")
		if j < 0 {
			return out, errors.New(`has "{{" without "}}"`)
		}
		name := strings.TrimSpace(rest[i+2 : i+2+j])
		if name == "" || strings.ContainsAny(name, "{} \t\n") {
			return out, fmt.Errorf("has the placeholder {{%s}}: a placeholder is {{name}} of a bound value", rest[i+2:i+2+j])
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
		rest = rest[i+2+j+2:]
	}
}

// fillTemplate replaces each {{name}} of text with the value of name
// (a JSON string as its text, anything else as compact JSON).
func fillTemplate(text string, args map[string]json.RawMessage) string {
	var b strings.Builder
	for rest := text; ; {
		i := strings.Index(rest, "{{")
		j := strings.Index(rest[max(i, 0):], "}}")
		if i < 0 || j < 0 {
			b.WriteString(rest)
			return b.String()
		}
		j += i
		b.WriteString(rest[:i])
		name := strings.TrimSpace(rest[i+2 : j])
		v, ok := args[name]
		var s string
		switch {
		case !ok:
			s = "<" + name + ">"
		case json.Unmarshal(v, &s) == nil:
		default:
			s = string(compact(v))
		}
		b.WriteString(s)
		rest = rest[j+2:]
	}
}

// checkObjectSchema refuses a schema that is not a JSON object schema.
func checkObjectSchema(schema any) error {
	raw, err := json.Marshal(schema)
	if err != nil {
		return fmt.Errorf("cannot be encoded: %v", err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("is not a JSON Schema: %v", err)
	}
	if s.Type != "object" {
		return errors.New(`must be an object schema ("type": "object")`)
	}
	if _, err := s.Resolve(nil); err != nil {
		return fmt.Errorf("does not resolve: %v", err)
	}
	return nil
}

// quotePrompt quotes a prompt on one line for the handoff's prose.
func quotePrompt(text string) string {
	q := string(marshal(text))
	if r := []rune(q); len(r) > maxPromptRunes {
		q = string(r[:maxPromptRunes]) + `…" (cut here; the whole prompt is in the task's input request and in the structured content)`
	}
	return q
}
