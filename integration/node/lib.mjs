// lib.mjs: what the TypeScript SDK client scripts of the integration tests
// share. Each script prints one JSON line per step for its Go test to read.

import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

// emit prints one step's outcome as a JSON line.
export function emit(step, details) {
    process.stdout.write(JSON.stringify({ step, ...details }) + '\n');
}

// startWatchdog ends the process (exit 3, after a "watchdog" line) if the
// script is still running after seconds: a hang must fail fast, not wait
// for the Go test's timeout. clearTimeout the result when done.
export function startWatchdog(seconds) {
    return setTimeout(() => {
        emit('watchdog', { ok: false, error: `script did not finish within ${seconds}s` });
        process.exit(3);
    }, seconds * 1000);
}

// step runs fn and prints its details; a thrown error is printed as
// ok:false and rethrown unless rethrow is false.
export async function step(name, fn, { rethrow = true } = {}) {
    try {
        const d = await fn();
        emit(name, { ok: true, ...d });
        return d;
    } catch (e) {
        emit(name, { ok: false, error: e?.message ?? String(e), code: e?.code });
        if (rethrow) throw e;
        return undefined;
    }
}

// parseHandoff returns the handoff of a task-aware workflow: the document
// and the prose. A prompt result carries the handoff in its final
// assistant message, prose then a ```json block (and in _meta). A tool
// result (a workflow task's tasks/result, a workflow tool's result, a
// continuation's) carries the prose only, in its last text content (what
// a model reads), and the document as its structuredContent and in
// _meta["taskbridge/handoff"] (what a program reads); its text has the
// json block only when the call asked for it (_meta["taskbridge/handoff-json"]).
export function parseHandoff(result) {
    let text = '';
    if (Array.isArray(result.messages)) {
        const last = result.messages[result.messages.length - 1];
        text = last?.content?.type === 'text' ? last.content.text : '';
    } else {
        const texts = (result.content ?? []).filter((c) => c.type === 'text');
        text = texts.length > 0 ? texts[texts.length - 1].text : '';
        const doc = isHandoff(result.structuredContent) ? result.structuredContent : result._meta?.['taskbridge/handoff'];
        if (isHandoff(doc)) return { doc, prose: text };
    }
    const blocks = [...text.matchAll(/```json\s*\n([\s\S]*?)\n```/g)];
    if (blocks.length === 0) throw new Error('no json block in the result');
    return { doc: JSON.parse(blocks[blocks.length - 1][1]), prose: text };
}

// isHandoff reports a handoff document.
const isHandoff = (v) => v !== null && typeof v === 'object' && typeof v.schemaVersion === 'number' && typeof v.taskId === 'string';

// isPlaceholder reports a handoff argument the client must fill ("<...>").
export const isPlaceholder = (v) => typeof v === 'string' && v.startsWith('<') && v.endsWith('>');

// The tasks extension (2026-07-28) over the TypeScript SDK 1.x client,
// which knows only the core dialect: the client is connected without
// initialize (an empty session id is "already initialized" to it), and
// every request it posts is rewritten as a 2026-07-28 client sends it:
// the protocol version, the client's capabilities declaring the tasks
// extension and its info in the request's _meta, the same version in the
// Mcp-Protocol-Version header, and the Mcp-Method / Mcp-Name headers.
// Everything else (JSON-RPC ids, SSE or JSON answers, errors) is the
// SDK's own.
export const EXTENSION_VERSION = '2026-07-28';
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

// extensionFetch is a fetch that rewrites the SDK client's POSTs as above.
export function extensionFetch(clientInfo) {
    return async (url, init) => {
        if (init?.method !== 'POST' || typeof init.body !== 'string') return fetch(url, init);
        const msg = JSON.parse(init.body);
        const headers = new Headers(init.headers);
        headers.set('mcp-protocol-version', EXTENSION_VERSION);
        headers.delete('mcp-session-id');
        if (msg.method) {
            headers.set('mcp-method', msg.method);
            const p = msg.params ?? {};
            const name = msg.method === 'tools/call' || msg.method === 'prompts/get' ? p.name : p.taskId;
            if (typeof name === 'string') headers.set('mcp-name', name);
            if (msg.id !== undefined) {
                msg.params = {
                    ...p,
                    _meta: {
                        ...(p._meta ?? {}),
                        'io.modelcontextprotocol/protocolVersion': EXTENSION_VERSION,
                        'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS_EXTENSION]: {} } },
                        'io.modelcontextprotocol/clientInfo': clientInfo,
                    },
                };
            }
        }
        return fetch(url, { ...init, headers, body: JSON.stringify(msg) });
    };
}

// connectExtension connects client to url in the tasks extension's
// dialect (see extensionFetch).
export async function connectExtension(client, url, clientInfo) {
    const transport = new StreamableHTTPClientTransport(new URL(url), { sessionId: '', fetch: extensionFetch(clientInfo) });
    transport.setProtocolVersion(EXTENSION_VERSION);
    await client.connect(transport);
    return transport;
}
