// ts-core-host.mjs plays a core-dialect (2025-11-25) host that runs tasks,
// as VS Code's chat may: the official TypeScript SDK 1.x client declares
// elicitation forms (a person answers them), calls every tool whose
// execution.taskSupport allows it as a task (callToolStream), and shows
// its model only final results. A person's decision reaches the user as
// the task's elicitation (on the tasks/result stream), which the script
// answers as the user would. The model's side is a few lines: it reads
// the call a handoff asks for from the prose and makes it with the values
// it knows.
//
// Usage: node ts-core-host.mjs <url>
// Prints one JSON line per step. Used by integration/hosts_core_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { startWatchdog, step } from './lib.mjs';

const [url] = process.argv.slice(2);
const watchdog = startWatchdog(75);
const textOf = (r) => (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

// The user's answers to the questions a task asks.
const user = { approved: true, reason: 'error rate flat during the soak' };
const questions = [];

const client = new Client({ name: 'ts-core-host', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
client.setRequestHandler(ElicitRequestSchema, async (req) => {
    questions.push(req.params.message);
    const content = {};
    for (const field of Object.keys(req.params.requestedSchema?.properties ?? {})) content[field] = user[field];
    return { action: 'accept', content };
});

let taskSupport = {};
// call is a host's tool call: a task when the tool allows one (the model
// then sees only the task's final result), a plain call otherwise.
async function call(name, args) {
    if (taskSupport[name] === 'optional' || taskSupport[name] === 'required') {
        let last;
        let taskId;
        for await (const msg of client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, { task: { ttl: 600_000 }, timeout: 60_000 })) {
            if (msg.type === 'taskCreated') taskId = msg.task.taskId;
            last = msg;
        }
        if (last?.type !== 'result') throw new Error(`${name}: the task ended with ${JSON.stringify(last)}`);
        return { text: textOf(last.result), isError: last.result.isError === true, asTask: Boolean(taskId) };
    }
    const r = await client.callTool({ name, arguments: args });
    return { text: textOf(r), isError: r.isError === true, asTask: false };
}

try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    const { tools } = await client.listTools();
    taskSupport = Object.fromEntries(tools.map((t) => [t.name, t.execution?.taskSupport ?? 'forbidden']));
    await step('canary', async () => {
        const r = await call('canary_release', { repo: 'shop', version: 'v2.0.0', soak_seconds: 1 });
        return { ...r, questions: questions.slice() };
    });
    await step('release', async () => {
        const first = await call('release_notes', { repo: 'acme' });
        // The model reads the call the prose asks for and fills it in.
        const m = first.text.match(/Call tool "([^"]+)" with \{"_task_id":"([^"]+)"/);
        if (!m) throw new Error(`no call in: ${first.text}`);
        const second = await call(m[1], { _task_id: m[2], approved: true, feedback: 'Looks good.' });
        return { first, second, tool: m[1] };
    });
} catch {
    // the failing step was already printed
} finally {
    clearTimeout(watchdog);
    await client.close().catch(() => {});
}
