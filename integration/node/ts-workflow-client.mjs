// ts-workflow-client.mjs follows a taskbridge task-aware workflow prompt with
// the official TypeScript SDK 1.x client, in the core dialect: getPrompt, read
// the handoff's JSON block from the final assistant message, perform each
// client step with callTool and _meta._task_id, then watch the workflow task
// with client.experimental.tasks (getTask, getTaskResult).
//
// Usage: node ts-workflow-client.mjs <server-url> <prompt> <json-args> <json-fill>
//   json-fill maps argument names to the values the "client" supplies for
//   placeholders.
// Prints one JSON line per step, like ts-core-client.mjs.
// Used by integration/ts_interop_test.go (TestTypeScriptWorkflow).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { isPlaceholder, parseHandoff, startWatchdog, step } from './lib.mjs';

const [url, prompt, argsJSON, fillJSON] = process.argv.slice(2);
if (!url || !prompt) {
    console.error('usage: node ts-workflow-client.mjs <url> <prompt> <json-args> <json-fill>');
    process.exit(2);
}
const watchdog = startWatchdog(60);

const client = new Client({ name: 'ts-workflow-client', version: '1.0.0' }, { capabilities: {} });
try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    const fill = JSON.parse(fillJSON || '{}');

    const { doc } = await step('getPrompt', async () => {
        const res = await client.getPrompt({ name: prompt, arguments: JSON.parse(argsJSON || '{}') });
        const h = parseHandoff(res);
        return {
            doc: h.doc,
            taskId: h.doc.taskId,
            status: h.doc.status,
            proseNamesTask: h.prose.includes(h.doc.taskId),
            completed: h.doc.completedSteps.map((s) => s.name),
            clientSteps: h.doc.remainingSteps.filter((s) => s.execution === 'client').map((s) => s.name),
            metaHasHandoff: Boolean(res._meta?.['taskbridge/handoff']),
        };
    });

    await step('taskWhilePaused', async () => {
        const t = await client.experimental.tasks.getTask(doc.taskId);
        return { status: t.status, ttl: t.ttl };
    });

    for (const s of doc.remainingSteps.filter((s) => s.execution === 'client')) {
        await step('continue:' + s.name, async () => {
            const args = {};
            for (const [k, v] of Object.entries(s.arguments)) args[k] = isPlaceholder(v) ? fill[k] : v;
            const res = await client.callTool({ name: s.tool, arguments: args, _meta: { _task_id: doc.taskId } });
            return { isError: Boolean(res.isError), workflow: res._meta?.['taskbridge/workflow'] };
        });
    }

    await step('taskAfter', async () => {
        const t = await client.experimental.tasks.getTask(doc.taskId);
        return { status: t.status };
    });

    await step('taskResult', async () => {
        const r = await client.experimental.tasks.getTaskResult(doc.taskId, CallToolResultSchema);
        const h = parseHandoff(r);
        if (!r.structuredContent || r.structuredContent.taskId !== h.doc.taskId) throw new Error('the handoff is not the structured content of the result');
        return { status: h.doc.status, completed: h.doc.completedSteps.map((s) => s.name), relatedTask: r._meta?.['io.modelcontextprotocol/related-task']?.taskId };
    });

    await step('badTaskId', async () => {
        try {
            await client.callTool({ name: doc.remainingSteps[0].tool, arguments: {}, _meta: { _task_id: 'not-a-task' } });
            return { rejected: false };
        } catch (e) {
            return { rejected: true, code: e.code, message: e.message };
        }
    });
} catch {
    // the failing step was already printed
} finally {
    clearTimeout(watchdog);
    await client.close().catch(() => {});
}
