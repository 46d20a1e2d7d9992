package wire

import (
	"bytes"
	"encoding/json"

	"github.com/taskbridge/taskbridge/mcptask"
)

var metaKey = []byte(`"_meta"`)

// MergeMeta returns the JSON object raw with add merged into its _meta
// (keys in add win). A raw value that is not an object becomes {}.
func MergeMeta(raw json.RawMessage, add map[string]any) (json.RawMessage, error) {
	// Fast path, the common case: an object with no "_meta" anywhere gets
	// the new member spliced in, without decoding the (possibly large)
	// result.
	if t := bytes.TrimSpace(raw); len(add) > 0 && len(t) >= 2 && t[0] == '{' && !bytes.Contains(t, metaKey) {
		mb, err := marshalMeta(add)
		if err != nil {
			return nil, err
		}
		rest := bytes.TrimSpace(t[1:])
		out := make([]byte, 0, len(t)+len(mb)+len(metaKey)+2)
		out = append(append(append(append(out, '{'), metaKey...), ':'), mb...)
		if rest[0] != '}' {
			out = append(out, ',')
		}
		return append(out, rest...), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		m = map[string]json.RawMessage{}
	}
	meta := map[string]any{}
	if old, ok := m["_meta"]; ok {
		_ = json.Unmarshal(old, &meta)
	}
	for k, v := range add {
		meta[k] = v
	}
	if len(meta) > 0 {
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, err
		}
		m["_meta"] = b
	}
	return json.Marshal(m)
}

// relatedTaskHead and relatedTaskTail frame json.Marshal of a _meta that
// only names the related task, around the task id.
const (
	relatedTaskHead = `{"` + mcptask.MetaRelatedTask + `":{"taskId":"`
	relatedTaskTail = `"}}`
)

// marshalMeta is json.Marshal(add). The _meta of a task's result, which
// only names the task (mcptask.RelatedTaskMeta), is written directly when
// the id needs no escaping (as json.Marshal would write it, without
// sorting one key and reflecting on the struct).
func marshalMeta(add map[string]any) ([]byte, error) {
	if rt, ok := add[mcptask.MetaRelatedTask].(mcptask.RelatedTask); ok && len(add) == 1 && plainString(rt.TaskID) {
		b := make([]byte, 0, len(relatedTaskHead)+len(rt.TaskID)+len(relatedTaskTail))
		return append(append(append(b, relatedTaskHead...), rt.TaskID...), relatedTaskTail...), nil
	}
	return json.Marshal(add)
}

// plainString reports whether json.Marshal writes s as it is between
// quotes: printable ASCII without a quote, a backslash or a character
// it escapes for HTML.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// CompactValid returns valid JSON b as encoding/json without HTML
// escaping writes the output of a MarshalJSON (compacted): b itself when
// it holds no whitespace outside its strings, which needs no second scan
// by encoding/json's validating scanner and no copy.
func CompactValid(b []byte) ([]byte, error) {
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			var buf bytes.Buffer
			if err := json.Compact(&buf, b); err != nil {
				return nil, err
			}
			return buf.Bytes(), nil
		}
	}
	return b, nil
}
