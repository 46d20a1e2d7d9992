package taskrouter

import (
	"bytes"
	"encoding/json"
)

// A byte-level view of a JSON object, so the shims can move a member or
// drop a _meta key without decoding and re-encoding the whole params.

// member is one member of a JSON object: b[start:end] is `"key":value`,
// key the raw key with its quotes, b[vstart:end] the value.
type member struct {
	key                []byte
	start, vstart, end int
}

// objectMembers returns the top-level members of b, which must be valid
// JSON (json.Valid). ok is false when b is not an object, or when a key
// holds an escape (which could spell any key: the caller decodes then).
func objectMembers(b []byte) (ms []member, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if b[i] == '}' {
		return nil, true
	}
	for {
		start := i
		kend := skipValue(b, i)
		key := b[start:kend]
		if bytes.IndexByte(key, '\\') >= 0 {
			return nil, false
		}
		i = skipSpace(b, kend)
		i = skipSpace(b, i+1) // the colon
		vstart := i
		i = skipValue(b, i)
		ms = append(ms, member{key: key, start: start, vstart: vstart, end: i})
		i = skipSpace(b, i)
		if b[i] == '}' {
			return ms, true
		}
		i = skipSpace(b, i+1) // the comma
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the valid JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// skipString returns the end of the string starting at b[i] (a quote).
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// quotedKey is a member key as it appears in JSON.
func quotedKey(k string) []byte {
	b, _ := json.Marshal(k)
	return b
}
