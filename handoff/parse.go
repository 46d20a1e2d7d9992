package handoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// Parse extracts the handoff from text: it finds the last ```json fenced
// block (the fence may be written ```JSON, be indented, carry trailing
// blanks or longer backtick runs, and lines may end in \r\n), decodes it
// (unknown fields are ignored for forward compatibility) and validates it.
//
// Errors wrap [ErrNoHandoff] when the text has no ```json block, and
// [ErrInvalid] for an unterminated block, malformed JSON, input larger than
// [MaxSize] or a document that fails [Document.Validate]. Parse never
// panics.
//
// The returned document is in canonical form: results and argument values
// are compact JSON with sorted object keys (see [FromPromptResult]), and
// empty lists and maps are nil, so Parse(Render(d)) equals d for a d in
// that form.
func Parse(text string) (*Document, error) {
	if len(text) > MaxSize {
		return nil, invalidf("input is %d bytes, more than the %d-byte limit", len(text), MaxSize)
	}
	lines := strings.Split(text, "\n")
	open, ticks := -1, 0
	for i, l := range lines {
		if n, ok := openingFence(l); ok {
			open, ticks = i, n
		}
	}
	if open < 0 {
		return nil, noHandofff("no ```json block found in the text")
	}
	closing := -1
	for j := open + 1; j < len(lines); j++ {
		if closingFence(lines[j], ticks) {
			closing = j
			break
		}
	}
	if closing < 0 {
		return nil, invalidf("the ```json block opened on line %d is never closed", open+1)
	}
	body := lines[open+1 : closing]
	for i, l := range body {
		body[i] = strings.TrimSuffix(l, "\r")
	}
	return decodeDocument([]byte(strings.Join(body, "\n")), "the ```json block", open+2, "")
}

// openingFence reports whether line opens a ```json block and how many
// backticks the fence has.
func openingFence(line string) (int, bool) {
	t := strings.TrimSpace(line)
	n := 0
	for n < len(t) && t[n] == '`' {
		n++
	}
	if n < 3 {
		return 0, false
	}
	return n, strings.EqualFold(strings.TrimSpace(t[n:]), "json")
}

// closingFence reports whether line closes a block opened with ticks
// backticks.
func closingFence(line string, ticks int) bool {
	t := strings.TrimSpace(line)
	return len(t) >= ticks && strings.Trim(t, "`") == ""
}

// decodeDocument decodes, canonicalizes and validates a document. what
// names the source in decoding errors; firstLine is the line number of
// data's first line in the enclosing text, or 0 to report byte offsets;
// prefix is put before the message of a validation error.
func decodeDocument(data []byte, what string, firstLine int, prefix string) (*Document, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, invalidf("%s is empty", what)
	}
	if trimmed[0] != '{' {
		return nil, invalidf("%s does not hold a JSON object", what)
	}
	position := func(offset int64) string {
		if offset < 0 || offset > int64(len(data)) {
			offset = int64(len(data))
		}
		if firstLine > 0 {
			return fmt.Sprintf("line %d", firstLine+bytes.Count(data[:offset], []byte("\n")))
		}
		return fmt.Sprintf("byte %d", offset)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var d Document
	if err := dec.Decode(&d); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return nil, invalidf("%s: invalid JSON at %s: %v", what, position(syn.Offset), err)
		case errors.As(err, &typ):
			return nil, invalidf("%s: invalid JSON at %s: %v", what, position(typ.Offset), err)
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return nil, invalidf("%s: invalid JSON: unexpected end of input", what)
		default:
			return nil, invalidf("%s: invalid JSON: %v", what, err)
		}
	}
	rest := data[dec.InputOffset():]
	if extra := bytes.TrimLeft(rest, " \t\r\n"); len(extra) > 0 {
		return nil, invalidf("%s: unexpected data after the JSON object at %s", what, position(int64(len(data)-len(extra))))
	}
	canonicalize(&d)
	if err := d.Validate(); err != nil {
		return nil, withContext(err, prefix)
	}
	return &d, nil
}

// canonicalize re-encodes JSON values canonically (see canonicalJSON) and
// turns empty lists and maps into nil.
func canonicalize(d *Document) {
	if len(d.CompletedSteps) == 0 {
		d.CompletedSteps = nil
	}
	for i := range d.CompletedSteps {
		if d.CompletedSteps[i].Result != nil {
			d.CompletedSteps[i].Result = canonicalJSON(d.CompletedSteps[i].Result)
		}
	}
	if len(d.RemainingSteps) == 0 {
		d.RemainingSteps = nil
	}
	for i := range d.RemainingSteps {
		s := &d.RemainingSteps[i]
		if len(s.Arguments) == 0 {
			s.Arguments = nil
		}
		for k, v := range s.Arguments {
			s.Arguments[k] = canonicalJSON(v)
		}
		if len(s.DependsOn) == 0 {
			s.DependsOn = nil
		}
	}
	if len(d.Errors) == 0 {
		d.Errors = nil
	}
}

// FromPromptResult extracts the handoff from a prompts/get result. It
// prefers res.Meta[mcptask.MetaHandoff], which may be a *Document or Document (in
// process), or a map[string]any, json.RawMessage or []byte (after JSON
// transit); otherwise it parses the text of the last assistant message
// with text content. An invalid _meta entry is an error; it does not fall
// back to the text. Errors wrap [ErrNoHandoff] or [ErrInvalid]. Whatever
// the source, the document is validated and returned in the canonical form
// described at [Parse], so the same handoff compares equal whether it came
// from _meta or from the text.
func FromPromptResult(res *mcp.GetPromptResult) (*Document, error) {
	if res == nil {
		return nil, noHandofff("prompt result is nil")
	}
	if v, ok := res.Meta[mcptask.MetaHandoff]; ok && v != nil {
		return fromMeta(v)
	}
	for i := len(res.Messages) - 1; i >= 0; i-- {
		m := res.Messages[i]
		if m == nil || m.Role != "assistant" {
			continue
		}
		if tc, ok := m.Content.(*mcp.TextContent); ok && tc != nil {
			return Parse(tc.Text)
		}
	}
	return nil, noHandofff("prompt result has no _meta[%q] and no assistant message with text content", mcptask.MetaHandoff)
}

// FromToolResult extracts the handoff from a tool result: a workflow
// task's final result (its tasks/result), a workflow tool's result, or a
// continuation's. It prefers res.Meta[mcptask.MetaHandoff] (as FromPromptResult
// does), then the structured content when it is a handoff document, then
// the last text content holding a ```json block.
func FromToolResult(res *mcp.CallToolResult) (*Document, error) {
	if res == nil {
		return nil, noHandofff("tool result is nil")
	}
	if v, ok := res.Meta[mcptask.MetaHandoff]; ok && v != nil {
		return fromMeta(v)
	}
	if sc := res.StructuredContent; sc != nil {
		if d, err := fromMeta(sc); err == nil {
			return d, nil
		}
	}
	for i := len(res.Content) - 1; i >= 0; i-- {
		if tc, ok := res.Content[i].(*mcp.TextContent); ok && tc != nil {
			if d, err := Parse(tc.Text); !errors.Is(err, ErrNoHandoff) {
				return d, err
			}
		}
	}
	return nil, noHandofff("tool result has no _meta[%q], no handoff as structured content and no text with a ```json block", mcptask.MetaHandoff)
}

// FromResultJSON is FromPromptResult or FromToolResult for a result still
// in JSON (a finished workflow task's tasks/result, say): a prompt result
// (it has "messages") or a tool result. Malformed JSON, or a result that
// carries no handoff, is an error wrapping [ErrNoHandoff].
func FromResultJSON(raw []byte) (*Document, error) {
	var probe struct {
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, noHandofff("not a result: %v", err)
	}
	if probe.Messages != nil {
		var res mcp.GetPromptResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, noHandofff("not a prompt result: %v", err)
		}
		return FromPromptResult(&res)
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, noHandofff("not a tool result: %v", err)
	}
	return FromToolResult(&res)
}

func fromMeta(v any) (*Document, error) {
	what := fmt.Sprintf("_meta[%q]", mcptask.MetaHandoff)
	var data []byte
	switch v := v.(type) {
	case json.RawMessage:
		data = v
	case []byte:
		data = v
	case *Document:
		if v == nil {
			return nil, invalidf("%s is a nil *Document", what)
		}
		b, err := marshalNoEscape(v)
		if err != nil {
			return nil, invalidf("%s: encoding: %v", what, err)
		}
		data = b
	default:
		// Without HTML escaping, so that placeholders decoded into a map
		// come back as "<...>" rather than "\u003c...\u003e".
		b, err := marshalNoEscape(v)
		if err != nil {
			return nil, invalidf("%s: encoding %T: %v", what, v, err)
		}
		data = b
	}
	if len(data) > MaxSize {
		return nil, invalidf("%s is %d bytes, more than the %d-byte limit", what, len(data), MaxSize)
	}
	return decodeDocument(data, what, 0, what+": ")
}

// canonicalJSON re-encodes a JSON value compactly, with object keys sorted
// (the last of duplicate keys wins), strings re-escaped without HTML
// escaping and numbers kept as written. The form does not depend on how
// the value travelled (JSON text, a decoded map, a Go value), so documents
// from Parse and FromPromptResult compare equal. A value that cannot be
// decoded (e.g. nested too deeply) is only compacted.
func canonicalJSON(v json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return compactJSON(v)
	}
	b, err := marshalNoEscape(x)
	if err != nil {
		return compactJSON(v)
	}
	return b
}
