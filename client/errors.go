package client

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/taskbridge/taskbridge/mcptask"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Sentinel errors. Test for them with errors.Is; the error returned is
// usually an *RPCError carrying the server's own code, message and data
// (use errors.As to get it).
var (
	// ErrNotFound means the server does not know the task: it never
	// existed, belongs to someone else, or expired. Servers answer -32602
	// (invalid params) for this in both dialects.
	ErrNotFound = errors.New("client: task not found")
	// ErrTerminal means the task had already ended, so it cannot be
	// cancelled. Core-dialect servers answer -32602 for this, the same code
	// as for an unknown task; CancelTask tells the two apart (see
	// [Client.CancelTask]).
	ErrTerminal = errors.New("client: task already in a terminal status")
	// ErrCapability means the server (or the tool) cannot do what was
	// asked: it was refused before anything was sent, or the server
	// answered -32601 (method not found) to a task method or a
	// task-augmented call, or -32021 (missing required client capability).
	ErrCapability = errors.New("client: not supported by the server")
	// ErrCancelled means the task ended cancelled, so it has no result.
	ErrCancelled = errors.New("client: task was cancelled")
	// ErrUnknownTool means the tool is not in the server's tools/list.
	ErrUnknownTool = errors.New("client: unknown tool")
	// ErrNoInputHandler means a task asked for client input (elicitation or
	// sampling) and Options.InputHandler is nil.
	ErrNoInputHandler = errors.New("client: the task needs input and no InputHandler is set")
	// ErrMalformed means a server reply did not have the shape the protocol
	// requires.
	ErrMalformed = errors.New("client: malformed server reply")
)

// RPCError is a JSON-RPC error returned by the server, unchanged: a tool's
// own protocol error, a failed task's error, or the server's answer to a
// bad request.
//
// errors.Is maps it onto the sentinels as follows (Method is the request
// that failed):
//
//   - -32602 on tasks/get, tasks/result or tasks/update: [ErrNotFound]
//     (an unknown, foreign or expired task).
//   - -32602 on tasks/cancel: [ErrTerminal] when a follow-up tasks/get shows
//     the task exists and has ended, [ErrNotFound] otherwise (see
//     [Client.CancelTask]).
//   - -32601 on tasks/* or on a task-augmented tools/call, and -32021 on
//     any request: [ErrCapability].
//
// Every other error maps to no sentinel. An error that a task failed with
// (a tool's JSON-RPC error, in either dialect) never maps to a sentinel:
// it is the tool's error, not a statement about the task.
type RPCError struct {
	// Code is the JSON-RPC error code.
	Code int64
	// Message is the server's error message.
	Message string
	// Data is the error's data member, if any.
	Data json.RawMessage
	// Method is the request that failed; empty for a failed task's error.
	Method string

	kind error // the sentinel errors.Is matches, if any
}

// Error implements error.
func (e *RPCError) Error() string {
	if e.Method != "" {
		return fmt.Sprintf("%s: %s (code %d)", e.Method, e.Message, e.Code)
	}
	return fmt.Sprintf("%s (code %d)", e.Message, e.Code)
}

// Is reports whether target is the sentinel this error maps to.
func (e *RPCError) Is(target error) bool {
	return e.kind != nil && target == e.kind
}

// Kind returns the sentinel error this error maps to, or nil.
func (e *RPCError) Kind() error { return e.kind }

// rpcError converts an error from the connection into an *RPCError when it
// is a JSON-RPC error, classifying it for method. Other errors (transport
// failures, context ends) are returned unchanged.
func rpcError(method string, err error) error {
	return classify(method, false, err)
}

// classify is rpcError; taskCall marks a task-augmented tools/call, whose
// -32601 means the tool or server cannot run it as a task.
func classify(method string, taskCall bool, err error) error {
	if err == nil {
		return nil
	}
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		return err
	}
	e := &RPCError{Code: je.Code, Message: je.Message, Data: je.Data, Method: method}
	switch {
	case je.Code == mcptask.CodeMissingCapability:
		e.kind = ErrCapability
	case je.Code == mcptask.CodeInvalidParams && (method == mcptask.MethodTasksGet || method == mcptask.MethodTasksResult || method == mcptask.MethodTasksUpdate || method == mcptask.MethodTasksCancel || method == mcptask.MethodTasksStream):
		e.kind = ErrNotFound
	case je.Code == mcptask.CodeMethodNotFound && (mcptask.IsTaskMethod(method) || method == mcptask.MethodTasksStream || taskCall):
		e.kind = ErrCapability
	}
	return e
}

// errorInfo is the wire form of a JSON-RPC error inside a result (the
// extension's failed task).
type errorInfo struct {
	Code    *int64          `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (ei *errorInfo) toRPCError() *RPCError {
	code := int64(mcptask.CodeInternalError)
	if ei.Code != nil {
		code = *ei.Code
	}
	return &RPCError{Code: code, Message: ei.Message, Data: ei.Data}
}

// capabilityError builds an ErrCapability error with an explanation.
func capabilityError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCapability}, args...)...)
}

// malformed builds an ErrMalformed error.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}
