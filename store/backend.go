package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"time"
)

// The validation and update logic shared by every backend, so that all of
// them enforce exactly the same rules, is split by the call it serves:
// this file holds the limits and the small checks every call uses,
// backend_create.go Create's, backend_update.go Update's,
// backend_lease.go Claim's and Renew's, backend_query.go Query's.

// Identifier limits. They keep index keys bounded (and cursors short).
const (
	// MaxIDBytes bounds a task id.
	MaxIDBytes = 256
	// MaxOwnerBytes bounds an owner string.
	MaxOwnerBytes = 1024
	// MaxVariableNameBytes bounds a variable name.
	MaxVariableNameBytes = 1024
	// MaxNameBytes bounds Request.Name (it is an index key for Query).
	MaxNameBytes = 1024
	// MaxHolderBytes bounds a lease holder.
	MaxHolderBytes = 256
)

// WithDefaults returns l with every zero (or negative) field replaced by its
// default, MaxEventBytes raised to MinEventBytes and MaxEventLogBytes to
// MaxEventBytes when they are smaller.
func (l Limits) WithDefaults() Limits {
	if l.MaxVariableBytes <= 0 {
		l.MaxVariableBytes = DefaultMaxVariableBytes
	}
	if l.MaxVariablesBytes <= 0 {
		l.MaxVariablesBytes = DefaultMaxVariablesBytes
	}
	if l.MaxResultBytes <= 0 {
		l.MaxResultBytes = DefaultMaxResultBytes
	}
	if l.MaxArgumentsBytes <= 0 {
		l.MaxArgumentsBytes = DefaultMaxArgumentsBytes
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultMaxEventBytes
	}
	// The store's own status event must fit, and the log must hold one
	// event of the largest size.
	l.MaxEventBytes = max(l.MaxEventBytes, MinEventBytes)
	if l.MaxEvents <= 0 {
		l.MaxEvents = DefaultMaxEvents
	}
	if l.MaxEventLogBytes <= 0 {
		l.MaxEventLogBytes = DefaultMaxEventLogBytes
	}
	l.MaxEventLogBytes = max(l.MaxEventLogBytes, l.MaxEventBytes)
	return l
}

// PageLimit turns a requested page size into the one to use: zero or less
// means DefaultPageSize, and anything above MaxPageSize is capped.
func PageLimit(n int) int {
	if n <= 0 {
		return DefaultPageSize
	}
	if n > MaxPageSize {
		return MaxPageSize
	}
	return n
}

// ValidTime reports whether t can be represented as int64 Unix nanoseconds
// (roughly years 1678 to 2262), which is how backends index times.
func ValidTime(t time.Time) bool {
	n := t.UnixNano()
	return time.Unix(0, n).Equal(t)
}

// IsJSONNull reports whether v is the JSON literal null, ignoring
// surrounding whitespace.
func IsJSONNull(v json.RawMessage) bool {
	return string(bytes.TrimSpace(v)) == "null"
}

// VariablesSize is the size of a variable set as counted against
// Limits.MaxVariablesBytes: the sum of len(name)+len(value).
func VariablesSize(vars map[string]json.RawMessage) int {
	n := 0
	for k, v := range vars {
		n += len(k) + len(v)
	}
	return n
}

func tooLarge(what string, size, limit int) error {
	return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, what, size, limit)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// checkJSON checks a JSON value against a size limit and for validity.
func checkJSON(what string, v []byte, limit int) error {
	if len(v) > limit {
		return tooLarge(what, len(v), limit)
	}
	if !json.Valid(v) {
		return invalid("%s is not valid JSON", what)
	}
	return nil
}

func checkVarName(name string) error {
	if name == "" {
		return invalid("empty variable name")
	}
	if len(name) > MaxVariableNameBytes {
		return tooLarge(fmt.Sprintf("variable name %.32q...", name), len(name), MaxVariableNameBytes)
	}
	return nil
}

func checkError(e *mcptask.ErrorInfo, lim Limits) error {
	if e == nil || len(e.Data) == 0 {
		return nil
	}
	return checkJSON("error data", e.Data, lim.MaxResultBytes)
}

func cloneError(e *mcptask.ErrorInfo) *mcptask.ErrorInfo {
	if e == nil {
		return nil
	}
	c := *e
	c.Data = cloneRaw(e.Data)
	if len(c.Data) == 0 {
		c.Data = nil
	}
	return &c
}
