// ts-workflow-follow.mjs follows a taskbridge task-aware workflow prompt to
// its end with the official TypeScript SDK 1.x client (core dialect), the
// way an LLM following the handoff would: get the prompt, perform the first
// step the handoff gives the client (a client step, or a server step the
// server could not perform and handed over), re-read the handoff with
// prompts/get and _meta._task_id, and repeat until the workflow ends; then
// read the task with client.experimental.tasks.
//
// Usage: node ts-workflow-follow.mjs <server-url> <prompt> <json-args> <json-fill>
//   json-fill maps argument names to values the client supplies: they fill
//   placeholders, and they correct the arguments of a handed-over step.
// Prints one JSON line per step. Used by integration/ts_workflow_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { isPlaceholder, parseHandoff, startWatchdog, step } from './lib.mjs';

const [url, prompt, argsJSON, fillJSON] = process.argv.slice(2);
const watchdog = startWatchdog(60);

const terminal = (s) => s === 'completed' || s === 'failed' || s === 'cancelled';

const client = new Client({ name: 'ts-workflow-follow', version: '1.0.0' }, { capabilities: {} });
try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    const fill = JSON.parse(fillJSON || '{}');
    let { doc, prose } = await step('getPrompt', async () => {
        const res = await client.getPrompt({ name: prompt, arguments: JSON.parse(argsJSON || '{}') });
        const h = parseHandoff(res);
        return { doc: h.doc, prose: h.prose, status: h.doc.status, pauseReason: h.doc.pauseReason };
    });
    const taskId = doc.taskId;
    for (let round = 0; round < 10 && !terminal(doc.status); round++) {
        const s = doc.remainingSteps.find((s) => s.execution === 'client');
        if (!s) break;
        await step('perform:' + s.name, async () => {
            const args = {};
            for (const [k, v] of Object.entries(s.arguments)) args[k] = isPlaceholder(v) ? fill[k] : v;
            if (s.handedToClient) {
                for (const k of Object.keys(args)) if (k in fill) args[k] = fill[k];
            }
            const res = await client.callTool({ name: s.tool, arguments: args, _meta: { _task_id: taskId } });
            return {
                handedToClient: Boolean(s.handedToClient), error: s.error, proseSaysCallIt: prose.includes('call it yourself'),
                isError: Boolean(res.isError), workflow: res._meta?.['taskbridge/workflow'],
            };
        });
        ({ doc, prose } = await step('reread:' + s.name, async () => {
            const res = await client.getPrompt({ name: prompt, _meta: { _task_id: taskId } });
            const h = parseHandoff(res);
            return { doc: h.doc, prose: h.prose, status: h.doc.status };
        }));
    }
    await step('taskAfter', async () => {
        const t = await client.experimental.tasks.getTask(taskId);
        return { status: t.status, statusMessage: t.statusMessage };
    });
    await step('taskResult', async () => {
        const r = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
        const h = parseHandoff(r);
        if (!r.structuredContent || r.structuredContent.taskId !== h.doc.taskId) throw new Error('the handoff is not the structured content of the result');
        return { status: h.doc.status, completed: h.doc.completedSteps.map((s) => s.name), resultMethod: h.doc.continuation.resultMethod };
    });
} catch {
    // the failing step was already printed
} finally {
    clearTimeout(watchdog);
    await client.close().catch(() => {});
}
