// ts-sampling-client.mjs runs a taskbridge workflow whose middle step the
// client's own model performs (a sampling step) with the official
// TypeScript SDK 1.x client, in the core dialect, over Streamable HTTP.
// The client's sampling handler is the "model": it answers every prompt
// with "TS-MODEL: " and the prompt.
//
// Usage: node ts-sampling-client.mjs <server-url> <mode> <prompt> <json-args>
//   mode "task":  the client declares tasks.requests.sampling.createMessage
//                 and a task store: the server's request is task-augmented,
//                 the handler answers with a task of the client's, and the
//                 server follows it with tasks/get and tasks/result;
//   mode "plain": the client declares sampling only: a plain request.
// Prints one JSON line per step, like the other scripts (lib.mjs).
// Used by integration/ts_sampling_test.go.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';
import { CallToolResultSchema, CreateMessageRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { emit, parseHandoff, startWatchdog, step } from './lib.mjs';

const [url, mode, prompt, argsJSON] = process.argv.slice(2);
if (!url || !mode || !prompt) {
    console.error('usage: node ts-sampling-client.mjs <url> <task|plain> <prompt> <json-args>');
    process.exit(2);
}
const watchdog = startWatchdog(60);

const capabilities = { sampling: {} };
const options = { capabilities };
if (mode === 'task') {
    capabilities.tasks = { list: {}, cancel: {}, requests: { sampling: { createMessage: {} } } };
    // No task message queue: the server's request names the workflow task
    // it belongs to (related-task), which is not one of the client's.
    options.taskStore = new InMemoryTaskStore();
}
const client = new Client({ name: 'ts-sampling-client', version: '1.0.0' }, options);

const sampled = [];
const answer = (request) => {
    const text = request.params.messages[0].content.text;
    sampled.push({ text, task: Boolean(request.params.task), maxTokens: request.params.maxTokens, relatedTask: request.params._meta?.['io.modelcontextprotocol/related-task']?.taskId });
    return { role: 'assistant', model: 'ts-model', stopReason: 'endTurn', content: { type: 'text', text: 'TS-MODEL: ' + text } };
};
client.setRequestHandler(CreateMessageRequestSchema, async (request, extra) => {
    if (!request.params.task) return answer(request);
    // Task-augmented: answer with a task at once, and its result a moment
    // later, as a client whose model takes its time.
    const task = await extra.taskStore.createTask({ ttl: request.params.task.ttl });
    setTimeout(async () => {
        try {
            await extra.taskStore.storeTaskResult(task.taskId, 'completed', answer(request));
        } catch (e) {
            emit('storeTaskResult', { ok: false, error: e?.message ?? String(e) });
        }
    }, 100);
    return { task };
});

try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));

    const { doc } = await step('getPrompt', async () => {
        const res = await client.getPrompt({ name: prompt, arguments: JSON.parse(argsJSON || '{}') });
        const h = parseHandoff(res);
        return { doc: h.doc, taskId: h.doc.taskId, status: h.doc.status };
    });

    await step('taskResult', async () => {
        // A workflow task's result is the handoff: its document is the
        // structured content (the text, for a model, is prose only).
        const r = await client.experimental.tasks.getTaskResult(doc.taskId, CallToolResultSchema);
        const d = r.structuredContent;
        if (!d || d.taskId !== doc.taskId) throw new Error('the result carries no handoff document');
        return { status: d.status, completed: d.completedSteps.map((s) => s.name), summary: d.completedSteps.find((s) => s.name === 'summary')?.result };
    });

    await step('sampled', async () => ({ sampled }));
} catch {
    // the failing step was already printed
} finally {
    clearTimeout(watchdog);
    await client.close().catch(() => {});
    options.taskStore?.cleanup(); // its tasks' ttl timers would keep the process alive
}
