// ts-canary.mjs drives example 62's workflows that wait on the clock or on
// a person (canary_release, release_notes) with the official TypeScript
// SDK 1.x client over Streamable HTTP (core dialect): it gets the prompt
// (or names a task that already exists), re-reads the handoff with
// prompts/get and _meta._task_id until the server offers a client step
// (a parallel group and a durable sleep come first), performs it with
// _meta._task_id (a client step's tool, or for an event such as
// canary_release's go_live the event tool workflow_event with the payload),
// follows the workflow to its end, and reads the task back with
// client.experimental.tasks.
//
// Usage: node ts-canary.mjs <server-url> <json-options>
//   options: {
//     "prompt": "canary_release",
//     "args": {...},            prompt arguments (to start a new task)
//     "taskId": "...",          or an existing task to follow (after a restart)
//     "fill": {...},            values for what a step's call leaves to the client
//                               (an event's payload fields too)
//     "action": "perform"       perform client steps until the workflow ends (default)
//             | "offer"         stop once a client step is offered, print it
//             | "wait"          wait for the task to end (someone else performs the steps)
//   }
// Prints one JSON line per step. Used by integration/canary_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { parseHandoff, startWatchdog, step } from './lib.mjs';

const [url, optsJSON] = process.argv.slice(2);
const opts = JSON.parse(optsJSON || '{}');
const action = opts.action ?? 'perform';
const fill = opts.fill ?? {};
const watchdog = startWatchdog(75);

const terminal = (s) => s === 'completed' || s === 'failed' || s === 'cancelled';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const textOf = (r) => (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
// summary is what the Go test reads of a handoff.
const summary = (doc) => ({
    taskId: doc.taskId,
    status: doc.status,
    pauseReason: doc.pauseReason,
    completed: doc.completedSteps.map((s) => s.name),
    completedBy: Object.fromEntries(doc.completedSteps.map((s) => [s.name, s.by ?? ''])),
    remaining: doc.remainingSteps.map((s) => ({ name: s.name, status: s.status, kind: s.kind, group: s.group, until: s.until, execution: s.execution })),
    skipped: doc.skippedSteps ?? [],
});
// offered is the step the handoff asks the client to perform now: the
// one with a call (a client step's tool, or the event tool).
const offered = (doc) => doc.remainingSteps.find((s) => s.call);
// callArgs are the arguments of a step's call: the values it gives, and
// each value to fill in (an event's payload fields under "payload"); the
// server adds the values it resolved itself. The task id travels in
// _meta._task_id instead of the argument.
const callArgs = (call) => {
    const args = { ...call.arguments };
    for (const f of call.fill ?? []) {
        if (!(f.name in fill)) continue;
        if (f.under) args[f.under] = { ...(args[f.under] ?? {}), [f.name]: fill[f.name] };
        else args[f.name] = fill[f.name];
    }
    delete args._task_id;
    return args;
};

const client = new Client({ name: 'ts-canary', version: '1.0.0' }, { capabilities: {} });
try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    const reread = async (taskId) => {
        const res = await client.getPrompt({ name: opts.prompt, _meta: { _task_id: taskId } });
        return parseHandoff(res).doc;
    };

    let doc;
    if (opts.taskId) {
        doc = (await step('resume', async () => ({ doc: await reread(opts.taskId) }))).doc;
    } else {
        doc = (await step('getPrompt', async () => {
            const res = await client.getPrompt({ name: opts.prompt, arguments: opts.args ?? {} });
            const h = parseHandoff(res);
            if (JSON.stringify(res._meta?.['taskbridge/handoff']) !== JSON.stringify(h.doc)) {
                throw new Error('the handoff in _meta differs from the json block of the last message');
            }
            return { doc: h.doc, ...summary(h.doc) };
        })).doc;
    }
    const taskId = doc.taskId;

    if (action === 'wait') {
        await step('waited', async () => {
            for (let i = 0; i < 600; i++) {
                const t = await client.experimental.tasks.getTask(taskId);
                if (terminal(t.status)) return { status: t.status, polls: i + 1 };
                await sleep(100);
            }
            throw new Error('the task did not end');
        });
    } else {
        // Follow the handoff: re-read it until a client step is offered,
        // perform it, and repeat until the workflow ends.
        let rereads = 0;
        const seen = new Set(); // every remaining-step status seen, as "name:status"
        const note = (d) => d.remainingSteps.forEach((s) => seen.add(`${s.name}:${s.status}`));
        note(doc);
        // A re-read answers at once while the workflow rests on a sleep
        // that ends later than the server's prompt wait: pause between
        // such re-reads.
        const until = Date.now() + 60_000;
        while (!terminal(doc.status) && Date.now() < until) {
            const s = offered(doc);
            if (!s) {
                const asked = Date.now();
                doc = await reread(taskId);
                rereads++;
                note(doc);
                if (Date.now() - asked < 200) await sleep(200);
                continue;
            }
            if (action === 'offer') {
                await step('offered', async () => ({ ...summary(doc), stepName: s.name, tool: s.call.tool, webhook: s.webhook ?? null, arguments: s.call.arguments, kind: s.kind ?? null, rereads }));
                break;
            }
            await step('perform:' + s.name, async () => {
                const res = await client.callTool({ name: s.call.tool, arguments: callArgs(s.call), _meta: { _task_id: taskId } });
                return { isError: Boolean(res.isError), text: textOf(res), status: parseHandoff(res).doc.status, before: summary(doc), rereads };
            });
            doc = await reread(taskId);
            note(doc);
        }
        if (action === 'offer') {
            if (!offered(doc)) await step('offered', async () => { throw new Error(`no client step was offered: ${JSON.stringify(summary(doc))}`); });
        } else {
            await step('followed', async () => ({ ...summary(doc), rereads, seen: [...seen] }));
        }
    }
    if (action !== 'offer') {
        await step('taskAfter', async () => {
            const t = await client.experimental.tasks.getTask(taskId);
            return { status: t.status, statusMessage: t.statusMessage };
        });
        await step('taskResult', async () => {
            const r = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
            const h = parseHandoff(r);
            if (!r.structuredContent || r.structuredContent.taskId !== taskId) throw new Error('the handoff is not the structured content of the result');
            return { ...summary(h.doc), text: textOf(r), isError: Boolean(r.isError), relatedTask: r._meta?.['io.modelcontextprotocol/related-task']?.taskId };
        });
    }
} catch {
    // the failing step was already printed (ok:false); the Go test reports it
} finally {
    clearTimeout(watchdog);
    await client.close().catch(() => {});
}
