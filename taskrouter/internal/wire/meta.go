package wire

import (
	"bytes"
	"encoding/json"
)

var metaKey = []byte(`"_meta"`)

// MergeMeta returns the JSON object raw with add merged into its _meta
// (keys in add win). A raw value that is not an object becomes {}.
func MergeMeta(raw json.RawMessage, add map[string]any) (json.RawMessage, error) {
	// Fast path, the common case: an object with no "_meta" anywhere gets
	// the new member spliced in, without decoding the (possibly large)
	// result.
	if t := bytes.TrimSpace(raw); len(add) > 0 && len(t) >= 2 && t[0] == '{' && !bytes.Contains(t, metaKey) {
		mb, err := json.Marshal(add)
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
