// ts-truth.mjs drives every path of every example-62 workflow with the
// official TypeScript SDK 1.x client, which checks each tool result's
// structuredContent against the tool's outputSchema (even on isError
// results): a reply that breaks the schema throws here, as it does in a
// host. It plays a model in a tool-only host (plain callTool, no _meta
// unless a path asks for it): the approved and rejected reviews, a review
// sent with a wrong type then corrected, a step the server hands over and
// that fails again before it is corrected, the canary's decision both
// ways, release_train's child step with the documented _meta form (the
// workflow's id in _meta._task_id, the child's in the arguments) both
// healthy and failed, and a long tool with an outputSchema that turns into
// a task. Then, as a core-dialect program, it reads the failed and the
// completed train with client.experimental.tasks (getTask, getTaskResult).
//
// Usage: node ts-truth.mjs <url>
// Prints one JSON line per path. Used by integration/ts_truth_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { parseHandoff, startWatchdog, step } from './lib.mjs';

const [url] = process.argv.slice(2);
const watchdog = startWatchdog(150);
const terminal = (s) => s === 'completed' || s === 'failed' || s === 'cancelled';
const textOf = (r) => (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

const client = new Client({ name: 'ts-truth', version: '1.0.0' }, { capabilities: {} });

// docOf reads the handoff a result carries.
const docOf = (r) => parseHandoff(r).doc;

// follow performs the handoff's calls until the workflow ends. answers
// fills the values a call lists (by name; an event's payload fields too);
// fix, when set, is asked for new answers after a call failed (it returns
// false to give up). metaForm sends the workflow's id in _meta._task_id
// besides the arguments the handoff gives.
async function follow(doc, answers, { fix, metaForm } = {}) {
    const performed = [];
    const failed = [];
    let last;
    for (let round = 0; round < 20 && !terminal(doc.status); round++) {
        const s = doc.remainingSteps.find((s) => s.call);
        if (!s) {
            last = await client.callTool({ name: 'task_result', arguments: { task_id: doc.taskId } });
            doc = docOf(last);
            continue;
        }
        const args = { ...s.call.arguments };
        for (const f of s.call.fill ?? []) {
            if (f.under) args[f.under] = { ...(args[f.under] ?? {}), [f.name]: answers[f.name] };
            else args[f.name] = answers[f.name];
        }
        if (s.call.fix) for (const k of Object.keys(args)) if (k in answers) args[k] = answers[k];
        const params = { name: s.call.tool, arguments: args };
        if (metaForm) params._meta = { _task_id: doc.taskId };
        last = await client.callTool(params); // throws if the reply breaks the tool's outputSchema
        if (last.isError) {
            failed.push({ step: s.name, tool: s.call.tool, text: textOf(last), structured: last.structuredContent !== undefined });
            const next = docOf(last);
            if (terminal(next.status)) { doc = next; break; }
            if (!fix || !fix(s, answers)) throw new Error(`step ${s.name} failed: ${textOf(last)}`);
            continue;
        }
        performed.push(s.name);
        doc = docOf(last);
    }
    if (!terminal(doc.status)) throw new Error(`the workflow did not end: ${doc.status} ${doc.pauseReason}`);
    // What task_result (the model's way to read a workflow) says of the end.
    const end = await client.callTool({ name: 'task_result', arguments: { task_id: doc.taskId } });
    return {
        status: doc.status, taskId: doc.taskId, performed, failed,
        lastIsError: last?.isError === true, endIsError: end.isError === true,
        completed: doc.completedSteps.map((s) => s.name),
        skipped: (doc.skippedSteps ?? []).map((s) => s.name),
        reason: doc.pauseReason,
    };
}

async function start(tool, args) {
    const r = await client.callTool({ name: tool, arguments: args });
    if (r.isError) throw new Error(`${tool}: ${textOf(r)}`);
    return docOf(r);
}

try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    // Listing the tools arms the SDK's outputSchema checks.
    await step('listTools', async () => {
        const { tools } = await client.listTools();
        return { withOutputSchema: tools.filter((t) => t.outputSchema).map((t) => t.name).sort() };
    });
    await step('notesApproved', async () =>
        follow(await start('release_notes', { repo: 'acme' }), { approved: true, feedback: 'Looks good.' }));
    await step('notesRejected', async () =>
        follow(await start('release_notes', { repo: 'acme' }), { approved: false, feedback: 'reject: wrong version' }));
    await step('notesWrongType', async () =>
        follow(await start('release_notes', { repo: 'acme' }), { approved: 'true', feedback: 'ok' },
            { fix: (s, a) => { if (a.approved !== 'true') return false; a.approved = true; return true; } }));
    await step('shipHandedFailsAgain', async () => {
        const first = await start('ship_release', { repo: 'widgets' });
        const handed = first.remainingSteps.find((s) => s.handedToClient);
        const out = await follow(first, { version: 'next', message: '1.4 is out' },
            { fix: (s, a) => { if (a.version !== 'next') return false; a.version = 'v1.4.0'; return true; } });
        return { ...out, handedOver: handed?.name };
    });
    for (const approved of [true, false]) {
        await step(approved ? 'canaryApproved' : 'canaryRejected', async () =>
            follow(await start('canary_release', { repo: 'shop', version: 'v2.0.0', soak_seconds: 1 }),
                { approved, reason: approved ? 'error rate flat' : 'p99 doubled' }));
    }
    const trains = {};
    for (const [name, services] of [['trainHealthy', 'api,web'], ['trainFlaky', 'api,flaky-web']]) {
        trains[name] = await step(name, async () =>
            follow(await start('release_train', { repo: 'acme/' + name, services }), { approved: true, feedback: 'ship it' }, { metaForm: true }));
    }
    await step('longToolWithSchema', async () => {
        const r = await client.callTool({ name: 'run_suite', arguments: { repo: 'shop', version: 'v1', suite: 'integration' } });
        const id = r._meta?.['io.modelcontextprotocol/related-task']?.taskId;
        if (!id) throw new Error(`no task named in ${JSON.stringify(r)}`);
        let res;
        for (let i = 0; i < 30; i++) {
            res = await client.callTool({ name: 'task_result', arguments: { task_id: id } });
            if (res.structuredContent?.status !== 'working') break;
        }
        return { isError: r.isError === true, structured: r.structuredContent !== undefined, text: textOf(r), result: res.structuredContent, resultIsError: res.isError === true };
    });
    // A core-dialect program reads the trains' workflow tasks.
    for (const name of ['trainHealthy', 'trainFlaky']) {
        await step(name + 'Tasks', async () => {
            const id = trains[name].taskId;
            const t = await client.experimental.tasks.getTask(id);
            const r = await client.experimental.tasks.getTaskResult(id, CallToolResultSchema);
            return { status: t.status, statusMessage: t.statusMessage, isError: r.isError === true, resultStatus: docOf(r).status };
        });
    }
} catch {
    // the failing step was already printed
} finally {
    clearTimeout(watchdog);
    await client.close().catch(() => {});
}
