package wire

import (
	"bytes"
	"encoding/json"
	"strings"
)

// A byte-level view of a JSON object, so the shims can move a member or
// drop a _meta key without decoding and re-encoding the whole params.

// Member is one member of a JSON object: b[Start:End] is `"key":value`,
// Key the raw key with its quotes, b[VStart:End] the value.
type Member struct {
	Key                []byte
	Start, VStart, End int
}

// ObjectMembers returns the top-level members of b, which must be valid
// JSON (json.Valid). ok is false when b is not an object, or when a key
// holds an escape (which could spell any key: the caller decodes then).
func ObjectMembers(b []byte) (ms []Member, ok bool) {
	ok = scanMembers(b, func(m Member) bool {
		ms = append(ms, m)
		return true
	})
	if !ok {
		return nil, false
	}
	return ms, true
}

// scanMembers calls f with each top-level member of b (valid JSON), in
// order, until f returns false; it reports false when b is not an object
// or a key holds an escape (see ObjectMembers). It allocates nothing.
func scanMembers(b []byte, f func(Member) bool) bool {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = SkipSpace(b, i+1)
	if b[i] == '}' {
		return true
	}
	for {
		start := i
		kend := skipValue(b, i)
		key := b[start:kend]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		i = SkipSpace(b, kend)
		i = SkipSpace(b, i+1) // the colon
		vstart := i
		i = skipValue(b, i)
		if !f(Member{Key: key, Start: start, VStart: vstart, End: i}) {
			return true
		}
		i = SkipSpace(b, i)
		if b[i] == '}' {
			return true
		}
		i = SkipSpace(b, i+1) // the comma
	}
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int {
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

// QuotedKey is a member key as it appears in JSON.
func QuotedKey(k string) []byte {
	b, _ := json.Marshal(k)
	return b
}

// KeyCount counts the top-level members of the JSON object b whose key,
// unescaped, equals key but for case: 0 when b is not an object. A count
// over 1 is a body that readers disagree on (encoding/json takes the
// last such member, go-sdk's decoder the exact key).
func KeyCount(b []byte, key string) int {
	n := 0
	eachMember(b, func(k string, _ json.RawMessage) {
		if strings.EqualFold(k, key) {
			n++
		}
	})
	return n
}

// eachMember calls f with every top-level member of the JSON object b,
// in order, its key unescaped (nothing when b is not an object; up to
// where it stops being valid JSON).
func eachMember(b []byte, f func(key string, value json.RawMessage)) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return
		}
		if k, ok := tok.(string); ok {
			f(k, v)
		}
	}
}
