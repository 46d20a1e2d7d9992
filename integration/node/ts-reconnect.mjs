// ts-reconnect.mjs checks that a task outlives the session that created it,
// with the official TypeScript SDK 1.x client in the core dialect and no
// authentication (the SDK's default): one invocation creates tasks and
// closes its session; a later invocation (a new session, possibly against a
// restarted server) reads them back by id.
//
// Usage:
//   node ts-reconnect.mjs <url> create <seconds>   creates one slow_compute task
//   node ts-reconnect.mjs <url> read <taskId>      getTask, getTaskResult, listTasks
// Prints one JSON line per step. Used by integration/owners_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { startWatchdog, step as printStep } from './lib.mjs';

const [url, mode, arg] = process.argv.slice(2);
const watchdog = startWatchdog(60);
// A failed step is printed and the script goes on to the next.
const step = (name, fn) => printStep(name, fn, { rethrow: false });

const REQ = { timeout: 50_000 };
const client = new Client({ name: 'ts-reconnect', version: '1.0.0' }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(url));
try {
    await client.connect(transport);
    if (mode === 'create') {
        await step('create', async () => {
            const created = await client.request(
                { method: 'tools/call', params: { name: 'slow_compute', arguments: { seconds: Number(arg), label: 'reconnect' } } },
                CreateTaskResultSchema,
                { ...REQ, task: { ttl: 600_000 } }
            );
            return { taskId: created.task.taskId, status: created.task.status, sessionId: transport.sessionId };
        });
    } else {
        await step('getTask', async () => {
            const t = await client.experimental.tasks.getTask(arg, REQ);
            return { status: t.status, sessionId: transport.sessionId };
        });
        await step('getTaskResult', async () => {
            const r = await client.experimental.tasks.getTaskResult(arg, CallToolResultSchema, REQ);
            return { text: (r.content ?? []).map((c) => c.text).join('\n'), relatedTask: r._meta?.['io.modelcontextprotocol/related-task']?.taskId };
        });
        await step('listTasks', async () => {
            const res = await client.experimental.tasks.listTasks(undefined, REQ);
            return { ids: res.tasks.map((t) => t.taskId) };
        });
    }
} finally {
    clearTimeout(watchdog);
    await client.close().catch(() => {});
}
