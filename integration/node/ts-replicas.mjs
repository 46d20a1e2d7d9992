// ts-replicas.mjs drives taskbridge replicas behind a round-robin proxy with
// the official TypeScript SDK 1.x client in the core dialect. Every step
// opens a new session (a new initialize, which the proxy sends to the next
// replica), so the steps of one task land on different replicas: a task
// created on one is awaited on another; a workflow started on one is
// continued on another and read back on a third; a task started on one is
// cancelled from another.
//
// Usage: node ts-replicas.mjs <proxy-url>
// Prints one JSON line per step with the session id it used. Used by
// integration/replicas_proxy_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { emit, startWatchdog } from './lib.mjs';

const [url] = process.argv.slice(2);
const watchdog = startWatchdog(60);

const REQ = { timeout: 50_000 };

// session runs fn with a client on a new session and closes it.
async function session(name, fn) {
    const client = new Client({ name: 'ts-replicas', version: '1.0.0' }, { capabilities: {} });
    const transport = new StreamableHTTPClientTransport(new URL(url));
    try {
        await client.connect(transport);
        const d = await fn(client);
        emit(name, { ok: true, sessionId: transport.sessionId, ...d });
        return d;
    } catch (e) {
        emit(name, { ok: false, sessionId: transport.sessionId, error: e?.message ?? String(e), code: e?.code });
        throw e;
    } finally {
        // No terminateSession: the proxy keeps remembering which replica
        // held the session, for the test to check.
        await client.close();
    }
}

function handoff(result) {
    const last = result.messages[result.messages.length - 1];
    const text = last?.content?.type === 'text' ? last.content.text : '';
    const blocks = [...text.matchAll(/```json\s*\n([\s\S]*?)\n```/g)];
    if (blocks.length === 0) throw new Error('no json block in the final message');
    return JSON.parse(blocks[blocks.length - 1][1]);
}

const createHold = (client, label, ms) =>
    client.request(
        { method: 'tools/call', params: { name: 'hold', arguments: { label, ms } } },
        CreateTaskResultSchema,
        { ...REQ, task: { ttl: 600_000 } }
    );

try {
    const created = await session('create', async (c) => {
        const r = await createHold(c, 'ts-round-trip', 300);
        return { taskId: r.task.taskId, status: r.task.status };
    });
    await session('result', async (c) => {
        const r = await c.experimental.tasks.getTaskResult(created.taskId, CallToolResultSchema, REQ);
        return { text: (r.content ?? []).map((x) => x.text).join('\n') };
    });

    const doc = await session('getPrompt', async (c) => {
        const d = handoff(await c.getPrompt({ name: 'relay', arguments: { text: 'from ts' } }));
        return { taskId: d.taskId, next: d.remainingSteps[0]?.name };
    });
    await session('continue', async (c) => {
        const r = await c.callTool({ name: 'note', arguments: { text: 'ts middle' }, _meta: { _task_id: doc.taskId } }, CallToolResultSchema, REQ);
        return { text: (r.content ?? []).map((x) => x.text).join('\n'), workflow: r._meta?.['taskbridge/workflow'] };
    });
    await session('workflowResult', async (c) => {
        const t = await c.experimental.tasks.getTask(doc.taskId, REQ);
        return { status: t.status };
    });

    const long = await session('createLong', async (c) => {
        const r = await createHold(c, 'ts-cancel', 0);
        return { taskId: r.task.taskId };
    });
    await session('cancel', async (c) => {
        const t = await c.experimental.tasks.cancelTask(long.taskId, REQ);
        return { status: t.status };
    });
} catch {
    // the failing step was reported
} finally {
    clearTimeout(watchdog);
}
