// ts-host.mjs plays an LLM host against example 62 with the official
// TypeScript SDK 1.x client: it declares no capabilities and uses only
// getPrompt and callTool({name, arguments}) — no _meta, no params.task,
// no tasks/* — the way a desktop app or an IDE agent drives a model's tool
// calls. It follows each handoff by copying a client step's arguments
// (which carry _task_id) and filling the placeholders.
//
// Usage:
//   node ts-host.mjs http <url> run          every flow below
//   node ts-host.mjs stdio <cmd-json> run    the same over stdio, spawning the
//                                            server as a desktop host's config does:
//                                            {"command": ..., "args": [...], "env": {...}}
//   node ts-host.mjs http <url> start        start release_notes as a tool; print its task id
//   node ts-host.mjs http <url> finish <id>  continue that task to its end (after a restart)
// Prints one JSON line per step. Used by integration/host_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { isPlaceholder, parseHandoff, startWatchdog, step } from './lib.mjs';

const [mode, target, action, arg] = process.argv.slice(2);
const watchdog = startWatchdog(120);
const terminal = (s) => s === 'completed' || s === 'failed' || s === 'cancelled';
const textOf = (r) => (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

const client = new Client({ name: 'ts-host', version: '1.0.0' }, { capabilities: {} });
const transport = mode === 'stdio'
    ? (() => { const { command, args, env } = JSON.parse(target); return new StdioClientTransport({ command, args, env, stderr: 'ignore' }); })()
    : new StreamableHTTPClientTransport(new URL(target));

// values the "model" supplies for placeholders, and corrections of a
// step the server handed over.
const fill = { feedback: 'looks good', approved: true, message: 'shipped!', version: 'v1.4.0' };

// follow performs the client steps of a handoff until the workflow ends,
// reading each next handoff from the continuation's result (what a model
// sees), never from tasks/get.
async function follow(name, doc) {
    const seen = [];
    for (let round = 0; round < 12 && !terminal(doc.status); round++) {
        const s = doc.remainingSteps.find((s) => s.execution === 'client');
        if (!s) {
            // The server is working: a model calls task_result.
            const r = await client.callTool({ name: 'task_result', arguments: { task_id: doc.taskId } });
            doc = parseHandoff(r).doc;
            seen.push('task_result');
            continue;
        }
        if (s.arguments._task_id !== doc.taskId) throw new Error(`step ${s.name}: arguments carry no _task_id`);
        const args = {};
        for (const [k, v] of Object.entries(s.arguments)) args[k] = isPlaceholder(v) ? fill[k] : v;
        if (s.handedToClient) for (const k of Object.keys(args)) if (k in fill) args[k] = fill[k];
        const r = await client.callTool({ name: s.tool, arguments: args });
        if (r.isError) throw new Error(`step ${s.name}: ${textOf(r)}`);
        const h = parseHandoff(r); // the continuation's content carries the handoff
        if (h.doc.taskId !== doc.taskId) throw new Error('the continuation answered for another task');
        doc = h.doc;
        seen.push(s.name);
    }
    return { status: doc.status, performed: seen, completed: doc.completedSteps.map((s) => s.name), skipped: (doc.skippedSteps ?? []).map((s) => s.name), taskId: doc.taskId };
}

try {
    await client.connect(transport);
    if (action === 'run') {
        await step('listTools', async () => {
            const { tools } = await client.listTools();
            const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
            return {
                workflowTools: ['release_notes', 'ship_release'].filter((n) => n in byName),
                taskTools: ['task_result', 'task_cancel'].filter((n) => n in byName),
                reviewTakesTaskID: !!byName.review_notes?.inputSchema?.properties?._task_id,
            };
        });
        await step('promptRelease', async () => {
            const r = await client.getPrompt({ name: 'release_notes', arguments: { repo: 'taskbridge' } });
            return follow('release_notes', parseHandoff(r).doc);
        });
        await step('toolRelease', async () => {
            const r = await client.callTool({ name: 'release_notes', arguments: { repo: 'acme' } });
            return follow('release_notes', parseHandoff(r).doc);
        });
        await step('toolShip', async () => {
            const r = await client.callTool({ name: 'ship_release', arguments: { repo: 'acme' } });
            const first = parseHandoff(r).doc;
            const handed = first.remainingSteps.find((s) => s.handedToClient);
            const out = await follow('ship_release', first);
            return { ...out, handedOver: handed?.name, handedError: handed?.error };
        });
        await step('promptShip', async () => {
            const r = await client.getPrompt({ name: 'ship_release', arguments: { repo: 'globex' } });
            return follow('ship_release', parseHandoff(r).doc);
        });
        await step('longTool', async () => {
            const t0 = Date.now();
            const r = await client.callTool({ name: 'generate_report', arguments: { topic: 'q3', seconds: 3 } });
            const answeredMs = Date.now() - t0;
            const id = r.structuredContent?.taskId;
            if (!id) throw new Error(`no task id in ${JSON.stringify(r)}`);
            let res;
            for (let i = 0; i < 30; i++) {
                res = await client.callTool({ name: 'task_result', arguments: { task_id: id } });
                if (res.structuredContent?.status !== 'working') break;
            }
            return { answeredMs, taskId: id, text: textOf(r), result: textOf(res), isError: !!res.isError };
        });
        await step('cancelTool', async () => {
            const r = await client.callTool({ name: 'generate_report', arguments: { topic: 'never', seconds: 600 } });
            const id = r.structuredContent?.taskId;
            const c = await client.callTool({ name: 'task_cancel', arguments: { task_id: id } });
            const after = await client.callTool({ name: 'task_result', arguments: { task_id: id } });
            return { taskId: id, cancel: textOf(c), after: textOf(after), afterIsError: !!after.isError };
        });
        await step('unknownTask', async () => {
            const r = await client.callTool({ name: 'task_result', arguments: { task_id: 'no-such-task' } });
            return { isError: !!r.isError, text: textOf(r) };
        });
    } else if (action === 'start') {
        await step('start', async () => {
            const r = await client.callTool({ name: 'release_notes', arguments: { repo: 'restart' } });
            const doc = parseHandoff(r).doc;
            return { taskId: doc.taskId, status: doc.status, next: doc.remainingSteps.find((s) => s.execution === 'client')?.name };
        });
    } else if (action === 'finish') {
        await step('finish', async () => {
            // After the restart: the model calls task_result with the id it
            // kept, reads the handoff, and goes on.
            const r = await client.callTool({ name: 'task_result', arguments: { task_id: arg } });
            return follow('release_notes', parseHandoff(r).doc);
        });
    }
} catch {
    // the failing step was already printed
} finally {
    clearTimeout(watchdog);
    await client.close().catch(() => {});
}
