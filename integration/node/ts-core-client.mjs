// ts-core-client.mjs drives a taskbridge server over Streamable HTTP with the
// official TypeScript SDK 1.x client (client.experimental.tasks), which speaks
// the MCP 2025-11-25 "core tasks" dialect.
//
// Usage: node ts-core-client.mjs <server-url>
//
// Every step prints exactly one JSON line on stdout:
//   {"step":"<name>","ok":true,...details}
//   {"step":"<name>","ok":false,"error":"...","code":<json-rpc code>,...}
// A failed step does not stop the run unless later steps depend on it.
// With TS_WIRE_LOG=1 every HTTP request and response body is written to
// stderr (wire evidence for discrepancies).
//
// Used by integration/ts_interop_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
    CallToolResultSchema,
    CreateTaskResultSchema,
    ElicitRequestSchema,
    McpError
} from '@modelcontextprotocol/sdk/types.js';

const url = process.argv[2];
if (!url) {
    console.error('usage: node ts-core-client.mjs <server-url>');
    process.exit(2);
}

// Whole-run watchdog: a hang must fail fast, not wait for the Go timeout.
const watchdog = setTimeout(() => {
    emit('watchdog', { ok: false, error: 'script did not finish within 100s' });
    process.exit(3);
}, 100_000);

function emit(step, details) {
    process.stdout.write(JSON.stringify({ step, ...details }) + '\n');
}

function errDetails(e) {
    const d = { ok: false, error: e instanceof Error ? e.message : String(e) };
    if (e && typeof e === 'object') {
        if (e.code !== undefined) d.code = e.code;
        if (e.data !== undefined) d.data = e.data;
        if (e.name) d.errorName = e.name;
        if (Array.isArray(e.issues)) d.issues = e.issues; // zod schema rejection
        if (e.cause) d.cause = String(e.cause?.message ?? e.cause); // e.g. "fetch failed"
    }
    return d;
}

// step runs fn and prints its details; a thrown error becomes ok:false.
async function step(name, fn) {
    try {
        const details = await fn();
        emit(name, { ok: true, ...details });
        return details;
    } catch (e) {
        emit(name, errDetails(e));
        return undefined;
    }
}

function errorInfo(err) {
    if (!err) return undefined;
    return {
        message: err.message,
        code: err.code,
        data: err.data,
        isMcpError: err instanceof McpError
    };
}

function textOf(result) {
    return (result?.content ?? [])
        .filter(c => c.type === 'text')
        .map(c => c.text)
        .join('\n');
}

// streamCall runs callToolStream to its end and summarises the messages.
async function streamCall(client, params, options) {
    const types = [];
    const statuses = [];
    let taskId;
    let createdTask;
    let last;
    for await (const msg of client.experimental.tasks.callToolStream(params, CallToolResultSchema, options)) {
        types.push(msg.type);
        if (msg.type === 'taskCreated') {
            taskId = msg.task.taskId;
            createdTask = msg.task;
        }
        if (msg.type === 'taskStatus') statuses.push(msg.task.status);
        last = msg;
    }
    const out = { types, statuses, taskId, createdTask, finalType: last?.type };
    if (last?.type === 'result') {
        out.isError = last.result.isError === true;
        out.text = textOf(last.result);
        out.result = last.result;
    } else if (last?.type === 'error') {
        out.finalError = errorInfo(last.error);
    }
    return out;
}

// Optional wire log: tee every request and response body to stderr.
function loggingFetch() {
    if (process.env.TS_WIRE_LOG !== '1') return undefined;
    let n = 0;
    return async (input, init) => {
        const id = ++n;
        const method = init?.method ?? 'GET';
        process.stderr.write(`>> #${id} ${method} ${input} ${init?.body ?? ''}\n`);
        const res = await fetch(input, init);
        const ct = res.headers.get('content-type') ?? '';
        process.stderr.write(`<< #${id} ${res.status} ${ct} mcp-session-id=${res.headers.get('mcp-session-id') ?? ''}\n`);
        if (res.body) {
            const copy = res.clone();
            (async () => {
                try {
                    const reader = copy.body.getReader();
                    const dec = new TextDecoder();
                    for (;;) {
                        const { done, value } = await reader.read();
                        if (done) break;
                        process.stderr.write(`<< #${id} ${dec.decode(value, { stream: true })}\n`);
                    }
                } catch (e) {
                    process.stderr.write(`<< #${id} (body read failed: ${e})\n`);
                }
            })();
        }
        return res;
    };
}

const client = new Client(
    { name: 'taskbridge-ts-core-interop', version: '0.1.0' },
    { capabilities: { elicitation: { form: {} } } }
);
const elicitations = [];
client.setRequestHandler(ElicitRequestSchema, async req => {
    elicitations.push({ message: req.params.message, meta: req.params._meta ?? null });
    return { action: 'accept', content: { confirm: true } };
});

const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: loggingFetch() });
const REQ = { timeout: 20_000 }; // per-request bound

const connected = await step('connect', async () => {
    await client.connect(transport, REQ);
    return {
        protocolVersion: transport.protocolVersion ?? null,
        sessionId: transport.sessionId ?? null,
        serverCapabilities: client.getServerCapabilities() ?? null
    };
});
if (!connected) {
    process.exit(1);
}

// a. tools/list: the task support each tool has as the TS client sees it.
await step('listTools', async () => {
    const { tools } = await client.listTools(undefined, REQ);
    const taskSupport = {};
    const isToolTask = {};
    for (const t of tools) {
        taskSupport[t.name] = t.execution?.taskSupport ?? null;
        isToolTask[t.name] = client.isToolTask(t.name);
    }
    return { taskSupport, isToolTask };
});

// b. a task-augmented call of an optional tool, streamed.
const b = await step('streamOptional', async () =>
    streamCall(client, { name: 'slow_compute', arguments: { seconds: 1, label: 'ts' } }, { ...REQ, task: { ttl: 60_000 } })
);

// c. a required tool whose result has isError: callToolStream adds task: {}.
const c = await step('streamFailing', async () => {
    const out = await streamCall(client, { name: 'failing_job', arguments: {} }, REQ);
    if (out.taskId) {
        // What the TS client can see beyond the stream's summary.
        try {
            const t = await client.experimental.tasks.getTask(out.taskId, REQ);
            out.taskAfter = t;
        } catch (e) {
            out.getTaskError = errDetails(e);
        }
        try {
            const r = await client.experimental.tasks.getTaskResult(out.taskId, CallToolResultSchema, REQ);
            out.taskResult = { isError: r.isError === true, text: textOf(r), meta: r._meta ?? null };
        } catch (e) {
            out.taskResultError = errDetails(e);
        }
    }
    return out;
});

// d. a required tool that ends with a JSON-RPC error.
await step('streamProtocolError', async () => {
    const out = await streamCall(client, { name: 'protocol_error_job', arguments: {} }, REQ);
    if (out.taskId) {
        try {
            out.taskAfter = await client.experimental.tasks.getTask(out.taskId, REQ);
        } catch (e) {
            out.getTaskError = errDetails(e);
        }
        try {
            const r = await client.experimental.tasks.getTaskResult(out.taskId, CallToolResultSchema, REQ);
            out.taskResult = r; // unexpected: should be a JSON-RPC error
        } catch (e) {
            out.taskResultError = errDetails(e);
        }
    }
    return out;
});

// d2. arguments the tool's schema refuses, on a task-augmented call: a
// JSON-RPC error the SDK reports as such (not a zod error about "task").
await step('streamBadArguments', async () => streamCall(client, { name: 'slow_compute', arguments: { seconds: 'soon' } }, REQ));

// e. tasks/get and tasks/result on the task of step b.
if (b?.taskId) {
    await step('getTask', async () => {
        const t = await client.experimental.tasks.getTask(b.taskId, REQ);
        return { task: t, hasTtl: Object.prototype.hasOwnProperty.call(t, 'ttl') };
    });
    await step('getTaskResult', async () => {
        const r = await client.experimental.tasks.getTaskResult(b.taskId, CallToolResultSchema, REQ);
        return { text: textOf(r), isError: r.isError === true, meta: r._meta ?? null };
    });
} else {
    emit('getTask', { ok: false, error: 'skipped: step streamOptional produced no task id' });
    emit('getTaskResult', { ok: false, error: 'skipped: step streamOptional produced no task id' });
}

// g. cancel a long task, then cancel it again.
await step('cancel', async () => {
    const created = await client.request(
        { method: 'tools/call', params: { name: 'slow_compute', arguments: { seconds: 60, label: 'long' } } },
        CreateTaskResultSchema,
        { ...REQ, task: { ttl: 60_000 } }
    );
    const id = created.task.taskId;
    const out = { taskId: id, createdStatus: created.task.status };
    const cancelled = await client.experimental.tasks.cancelTask(id, REQ);
    out.cancelStatus = cancelled.status;
    out.cancelled = cancelled;
    out.statusAfter = (await client.experimental.tasks.getTask(id, REQ)).status;
    try {
        out.secondCancel = await client.experimental.tasks.cancelTask(id, REQ);
    } catch (e) {
        out.secondCancelError = errDetails(e);
    }
    return out;
});

// h. tasks/get of an unknown id.
await step('getUnknown', async () => {
    const res = await client.experimental.tasks.getTask('ffffffffffffffffffffffffffffffff', REQ);
    return { unexpected: res };
});

// i. (extra) a required tool that asks for input: the TS client polls,
// sees input_required, and calls tasks/result, on whose stream the server's
// elicitation request must arrive.
await step('streamElicitation', async () => {
    const out = await streamCall(client, { name: 'confirm_delete', arguments: { filename: 'a.txt' } }, REQ);
    out.elicitations = elicitations.slice();
    return out;
});

// tasks/list runs last: the TypeScript client omits params on the first
// tasks/list, and a server that mishandles that must not hide the results
// of the other steps. The bad-cursor probe (params present) goes first.
// f'. an invalid cursor.
await step('listTasksBadCursor', async () => {
    const res = await client.experimental.tasks.listTasks('not-a-real-cursor', REQ);
    return { unexpected: res };
});

// f. enough tasks to force pagination, then tasks/list page by page.
await step('listTasks', async () => {
    const N = 60;
    const created = await Promise.all(
        Array.from({ length: N }, (_, i) =>
            client.request(
                { method: 'tools/call', params: { name: 'slow_compute', arguments: { seconds: 0, label: `page-${i}` } } },
                CreateTaskResultSchema,
                { ...REQ, task: { ttl: 60_000 } }
            )
        )
    );
    const createdIds = created.map(r => r.task.taskId);
    const seen = new Map();
    const pageSizes = [];
    let cursor;
    let duplicates = 0;
    for (let page = 0; page < 50; page++) {
        const res = await client.experimental.tasks.listTasks(cursor, REQ);
        pageSizes.push(res.tasks.length);
        for (const t of res.tasks) {
            if (seen.has(t.taskId)) duplicates++;
            seen.set(t.taskId, t);
        }
        cursor = res.nextCursor;
        if (!cursor) break;
    }
    const missing = createdIds.filter(id => !seen.has(id));
    return {
        created: createdIds.length,
        pages: pageSizes.length,
        pageSizes,
        total: seen.size,
        duplicates,
        endedWithoutCursor: !cursor,
        allCreatedSeen: missing.length === 0,
        missing
    };
});

clearTimeout(watchdog);
try {
    await client.close();
} catch {
    // ignore
}
process.exit(0);
