// Package wire is the task engine's JSON-RPC codec for MCP tasks: the
// shims' rewriting of a request on its way to go-sdk (params.task moved
// into a private _meta key, private keys a client sent dropped), and the
// fast path's decoding, framing, replies and session bookkeeping, each
// doing exactly what go-sdk v1.8 does for the same bytes, and the few
// refusals the shims own where go-sdk's answer is no usable one
// (guard.go).
//
// It is pure: it knows go-sdk's types and the mcptask vocabulary, and
// nothing of the engine (package taskrouter imports it, never the
// reverse). Nothing here reads a store, owns a task or runs a handler;
// what a request means is the engine's business. Every dialect question
// is asked of mcptask.Dialect (NegotiatesPerRequest: the 2026-07-28
// protocol, which go-sdk serves statelessly, with the server named in
// every result's _meta and protocol errors given HTTP statuses).
//
// # Files
//
// scan.go (a byte-level view of a JSON object), decode.go (decoding a
// body or a message as go-sdk would: which requests the fast path takes),
// params.go (the params of the tasks/* methods, the private _meta keys,
// the core params.task), rewrite.go (the shims' rewriting of params and
// of HTTP bodies), meta.go (merging _meta into a stored result, and
// compacting it for a reply only when it holds whitespace),
// listen.go (a subscriptions/listen request for task notifications),
// reply.go (the replies go-sdk's jsonrpc2 layer and Streamable HTTP
// handler write, and the request checks that handler makes), guard.go
// (what the shims refuse themselves where go-sdk's answer is none a
// client can use: ids it would echo altered, stream lines it would end
// the connection on, core calls over HTTP without a session), frame.go
// (framing newline-delimited JSON-RPC, one line at a time), inflight.go (the calls in flight
// on a connection or session, and the live stateful HTTP sessions),
// standin.go (stand-in sessions for 2026-07-28 requests).
//
// The fuzz targets (FuzzRewriteParams, FuzzTakeTaskParam, FuzzMergeMeta,
// FuzzCompactValid, FuzzParseFastBody, FuzzFrame) and taskrouter's
// differential tests, which send the same requests through the fast path
// and through go-sdk and compare the bytes, hold the codec to go-sdk's
// behaviour.
package wire
