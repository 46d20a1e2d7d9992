// ts-compose.mjs follows workflows made of issue 29's step kinds
// (for-each, loops, child workflows, timeouts, compensation) to their end
// with the official TypeScript SDK 1.x client over Streamable HTTP, in one
// of three ways a client drives them:
//
//   host  a client that sends no task calls (as a desktop host's model):
//         plain prompts/get or the workflow's tool, then each step's tool
//         with _task_id among its arguments; while the server works, the
//         built-in tool task_result.
//   core  the 2025-11-25 core tasks dialect: the workflow's tool as a
//         task-augmented call (params.task, then tasks/result through
//         client.experimental.tasks.callToolStream), each step's tool with
//         the task id in _meta._task_id (plainly: a continuation is
//         answered, never made a task, in this dialect); the end read with
//         tasks/get and tasks/result.
//   ext   the 2026-07-28 tasks extension (lib.mjs connectExtension): every
//         request declares the extension, the server makes the calls
//         tasks, the client polls tasks/get at pollIntervalMs for each
//         one's result; _task_id among the arguments.
//
// Every step the handoff offers (an entry with a call: a client step, an
// item of a for-each "step[i]" performed with "TASK#step[i]", a run of a
// loop, a step of a child workflow "step/child's step" performed with the
// child's id) is performed in order, its placeholders filled from fill
// (or fillFor[entry name]), until the workflow ends.
//
// Usage: node ts-compose.mjs <server-url> <json-options>
//   options: {"mode": "host"|"core"|"ext", "runs": [{"label", "workflow",
//             "start": "prompt"|"tool", "args": {...}, "fill": {...},
//             "fillFor": {"entry": {...}}}, ...]}
//   The runs go at once, on one client.
// Prints one JSON line per run ("run:<label>"). Used by
// integration/compose_ts_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { connectExtension, parseHandoff, startWatchdog, step } from './lib.mjs';

const [url, optsJSON] = process.argv.slice(2);
const opts = JSON.parse(optsJSON || '{}');
const mode = opts.mode ?? 'host';
const watchdog = startWatchdog(110);

const terminal = (s) => s === 'completed' || s === 'failed' || s === 'cancelled';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const textOf = (r) => (r?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const Loose = z.looseObject({});

const info = { name: 'ts-compose-' + mode, version: '1.0.0' };
const client = new Client(info, { capabilities: {} });

// extCall sends one request in the extension dialect; a task answer is
// polled to its end and its result returned. It returns the result and
// whether the call was a task.
async function extCall(method, params) {
    const r = await client.request({ method, params }, Loose);
    if (r.resultType !== 'task') return { result: r, asTask: false };
    for (let i = 0; i < 2000; i++) {
        await sleep(Math.min(r.pollIntervalMs ?? 200, 200));
        const t = await client.request({ method: 'tasks/get', params: { taskId: r.taskId } }, Loose);
        if (t.status === 'completed') return { result: t.result, asTask: true };
        if (t.status === 'failed' || t.status === 'cancelled') {
            throw new Error(`task ${r.taskId} of ${params.name} ${t.status}: ${JSON.stringify(t.error ?? t.statusMessage)}`);
        }
        if (t.status === 'input_required') throw new Error(`task ${r.taskId} asks for input: ${JSON.stringify(t.inputRequests)}`);
    }
    throw new Error(`task ${r.taskId} of ${params.name} did not end`);
}

// coreCall makes a task-augmented tools/call (core dialect) and returns
// the task's result.
async function coreCall(params) {
    let last;
    let taskId;
    for await (const msg of client.experimental.tasks.callToolStream(params, CallToolResultSchema, { task: { ttl: 600_000 }, timeout: 90_000 })) {
        if (msg.type === 'taskCreated') taskId = msg.task.taskId;
        last = msg;
    }
    if (last?.type === 'error') throw last.error;
    if (last?.type !== 'result') throw new Error(`${params.name}: the call ended with ${JSON.stringify(last)}`);
    return { result: last.result, asTask: Boolean(taskId) };
}

// start starts a run's workflow and returns the first answer.
async function start(run) {
    if (run.start === 'prompt') {
        const args = Object.fromEntries(Object.entries(run.args ?? {}).map(([k, v]) => [k, String(v)]));
        if (mode === 'ext') return { result: (await extCall('prompts/get', { name: run.workflow, arguments: args })).result, asTask: false };
        return { result: await client.getPrompt({ name: run.workflow, arguments: args }), asTask: false };
    }
    const params = { name: run.workflow, arguments: run.args ?? {} };
    if (mode === 'core') return coreCall(params);
    if (mode === 'ext') return extCall('tools/call', params);
    return { result: await client.callTool(params), asTask: false };
}

// perform calls tool with args for the record ref names ("TASK",
// "TASK#step[i]", or a child's id).
async function perform(tool, args, ref) {
    if (mode === 'core') {
        const { _task_id, ...rest } = args; // a program sets _meta._task_id
        return { result: await client.callTool({ name: tool, arguments: rest, _meta: { _task_id: ref } }), asTask: false };
    }
    const params = { name: tool, arguments: { ...args, _task_id: ref } };
    if (mode === 'ext') return extCall('tools/call', params);
    return { result: await client.callTool(params), asTask: false };
}

// reread answers the workflow's handoff again once it rests (nothing is
// offered while its server steps run).
async function reread(run, taskId) {
    if (mode === 'host') return (await client.callTool({ name: 'task_result', arguments: { task_id: taskId } }));
    if (mode === 'ext') return (await extCall('tools/call', { name: run.workflow, arguments: { _task_id: taskId } })).result;
    return client.getPrompt({ name: run.workflow, _meta: { _task_id: taskId } });
}

// docOf is the handoff of a result, or, for task_result's answer about a
// workflow that failed (its status and message, no handoff), the last
// handoff seen with that status (stale: it is not the final handoff).
function docOf(result, last) {
    try {
        return parseHandoff(result).doc;
    } catch (e) {
        const st = result.structuredContent?.status;
        if (terminal(st)) return { ...last, status: st, pauseReason: result.structuredContent.statusMessage ?? last.pauseReason, stale: true };
        throw e;
    }
}

// finish reads the ended workflow task the way the mode reads tasks. A
// failed workflow's result may be an error without a handoff: the last
// handoff the run saw stands for it then.
async function finish(taskId) {
    if (mode === 'host') {
        const r = await client.callTool({ name: 'task_result', arguments: { task_id: taskId } });
        const out = { isError: Boolean(r.isError), text: textOf(r), status: r.structuredContent?.status, statusMessage: r.structuredContent?.statusMessage };
        try {
            out.doc = parseHandoff(r).doc;
            out.status = out.doc.status;
        } catch {
            // a failed workflow's task_result: its status and message only
        }
        return out;
    }
    if (mode === 'ext') {
        const t = await client.request({ method: 'tasks/get', params: { taskId } }, Loose);
        const out = { status: t.status, statusMessage: t.statusMessage, error: t.error };
        if (t.result) Object.assign(out, { isError: Boolean(t.result.isError), text: textOf(t.result), doc: parseHandoff(t.result).doc });
        return out;
    }
    const t = await client.experimental.tasks.getTask(taskId);
    const out = { status: t.status, statusMessage: t.statusMessage };
    try {
        const r = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
        Object.assign(out, { isError: Boolean(r.isError), text: textOf(r), doc: parseHandoff(r).doc, relatedTask: r._meta?.['io.modelcontextprotocol/related-task']?.taskId });
    } catch (e) {
        out.error = { code: e.code, message: e.message };
    }
    return out;
}

// callArgs are the arguments of an entry's call: those it gives (the
// task id among them) and each it leaves to the client, filled.
function callArgs(run, s) {
    const fill = { ...(run.fill ?? {}), ...(run.fillFor?.[s.name] ?? {}) };
    const args = { ...s.call.arguments };
    for (const f of s.call.fill ?? []) {
        if (!(f.name in fill)) throw new Error(`entry ${s.name} asks for ${f.name}, which the run does not fill`);
        if (f.under) args[f.under] = { ...(args[f.under] ?? {}), [f.name]: fill[f.name] };
        else args[f.name] = fill[f.name];
    }
    return args;
}

// follow runs one workflow to its end and summarises it.
async function follow(run) {
    const first = await start(run);
    let doc = parseHandoff(first.result).doc;
    const taskId = doc.taskId;
    const offered = []; // every entry offered: name, task ref, tool, kind
    const performed = [];
    let rereads = 0;
    const seen = new Set();
    const note = (d) => {
        for (const s of d.remainingSteps) {
            if (s.call && !seen.has(s.name)) {
                seen.add(s.name);
                offered.push({ name: s.name, ref: s.call.arguments._task_id, tool: s.call.tool, server: s.call.server ?? {} });
            }
        }
    };
    note(doc);
    const until = Date.now() + 90_000;
    while (!terminal(doc.status) && Date.now() < until) {
        const s = doc.remainingSteps.find((x) => x.call);
        if (!s) {
            const asked = Date.now();
            doc = docOf(await reread(run, taskId), doc);
            rereads++;
            note(doc);
            if (Date.now() - asked < 100) await sleep(100);
            continue;
        }
        const args = callArgs(run, s);
        const ref = args._task_id;
        const { result, asTask } = await perform(s.call.tool, args, ref);
        const h = parseHandoff(result);
        performed.push({ name: s.name, ref, tool: s.call.tool, isError: Boolean(result.isError), asTask, answeredFor: h.doc.taskId, text: textOf(result).slice(0, 400) });
        if (result.isError) throw new Error(`performing ${s.name}: ${textOf(result)}`);
        doc = h.doc;
        note(doc);
    }
    if (!terminal(doc.status)) throw new Error(`workflow ${run.workflow} (task ${taskId}) did not end: ${JSON.stringify(doc.remainingSteps.map((s) => [s.name, s.status]))}`);
    const end = await finish(taskId);
    const finalHandoff = Boolean(end.doc) || !doc.stale;
    end.doc ??= doc;
    return {
        taskId, startedAsTask: first.asTask, offered, performed, rereads, finalHandoff,
        status: end.status, statusMessage: end.statusMessage ?? '', isError: end.isError, text: end.text, error: end.error, relatedTask: end.relatedTask,
        completed: end.doc.completedSteps.map((s) => s.name),
        outputs: Object.fromEntries(end.doc.completedSteps.map((s) => [s.name, s.result])),
        undo: end.doc.undo ?? [],
        errors: (end.doc.errors ?? []).map((e) => ({ step: e.step, message: e.message })),
        pauseReason: end.doc.pauseReason ?? '',
    };
}

try {
    if (mode === 'ext') await connectExtension(client, url, info);
    else await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    await Promise.all((opts.runs ?? []).map((run) => step('run:' + run.label, () => follow(run), { rethrow: false })));
} catch (e) {
    await step('connect', () => { throw e; }, { rethrow: false });
} finally {
    clearTimeout(watchdog);
    await client.close().catch(() => {});
}
