package mcptask

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// JSON-RPC error codes used with tasks. The standard JSON-RPC 2.0 codes
// are go-sdk's (package jsonrpc), named here too so that one import serves.
const (
	CodeParseError     = jsonrpc.CodeParseError     // -32700
	CodeInvalidRequest = jsonrpc.CodeInvalidRequest // -32600
	// CodeMethodNotFound (-32601): go-sdk replaces the message of every
	// -32601 it sends with `method not found: "<method>"`, so taskbridge
	// uses it only where the method really is absent; refusals that need a
	// reason use CodeInvalidRequest.
	CodeMethodNotFound = jsonrpc.CodeMethodNotFound
	CodeInvalidParams  = jsonrpc.CodeInvalidParams // -32602
	CodeInternalError  = jsonrpc.CodeInternalError // -32603
	// CodeTooManyTasks refuses a task when a requestor has too many queued
	// and running tasks.
	CodeTooManyTasks = -32000
	// CodeHeaderMismatch: an Mcp-Name header that does not match the
	// request's taskId (extension, Streamable HTTP).
	CodeHeaderMismatch = -32020
	// CodeMissingCapability: the request did not declare the tasks
	// extension (2026-07-28).
	CodeMissingCapability = -32021
)

// Errorf returns a JSON-RPC error with code and a formatted message. go-sdk
// sends a *jsonrpc.Error with its own code; any other error becomes -32603.
func Errorf(code int64, format string, args ...any) *jsonrpc.Error {
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidParams returns a -32602 error.
func InvalidParams(format string, args ...any) *jsonrpc.Error {
	return Errorf(CodeInvalidParams, format, args...)
}

// InvalidRequest returns a -32600 error.
func InvalidRequest(format string, args ...any) *jsonrpc.Error {
	return Errorf(CodeInvalidRequest, format, args...)
}

// InternalError returns a -32603 error.
func InternalError(format string, args ...any) *jsonrpc.Error {
	return Errorf(CodeInternalError, format, args...)
}

// MethodNotFound returns a -32601 error.
func MethodNotFound(format string, args ...any) *jsonrpc.Error {
	return Errorf(CodeMethodNotFound, format, args...)
}

// MissingExtension returns the -32021 error for a request that needs the
// tasks extension but did not declare it; data names the capability, as the
// extension requires.
func MissingExtension(what string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]any{
		"requiredCapabilities": map[string]any{
			"extensions": map[string]any{ExtensionID: map[string]any{}},
		},
	})
	return &jsonrpc.Error{
		Code:    CodeMissingCapability,
		Message: fmt.Sprintf("%s requires the %s extension; declare it in the request's client capabilities", what, ExtensionID),
		Data:    data,
	}
}

// ErrorInfo is a JSON-RPC error as a value: how a failed task stores the
// error that ended it, and how the extension's tasks/get carries it.
type ErrorInfo struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error implements error.
func (e *ErrorInfo) Error() string { return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message) }

// RPC returns the error as a *jsonrpc.Error, ready to send.
func (e *ErrorInfo) RPC() *jsonrpc.Error {
	return &jsonrpc.Error{Code: e.Code, Message: e.Message, Data: e.Data}
}
