// ts-task-server.mjs is an MCP task server built only from the official
// TypeScript SDK 1.x (@modelcontextprotocol/sdk 1.32.2, its experimental
// tasks API: McpServer + InMemoryTaskStore + registerToolTask), served over
// Streamable HTTP with sessions. It speaks the MCP 2025-11-25 core tasks
// dialect, so taskbridge's Go client can be proven on a server we did not
// write.
//
// Usage: node ts-task-server.mjs
// It listens on 127.0.0.1 with an ephemeral port and prints one JSON line
// on stdout: {"port": <n>}. With TS_WIRE_LOG=1 every HTTP request body and
// response chunk is written to stderr (wire evidence for the report).
//
// Tools:
//   slow     (taskSupport optional)  {ms, label?}: completes after ms
//   fail     (taskSupport required)  {}: fails with an isError result
//   confirm  (taskSupport required)  {filename}: asks the client to confirm
//            with an elicitation queued for the tasks/result stream
//   echo     (no task support)       {text}
//
// Used by integration/client_ts_server_test.go.

import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import * as z from 'zod/v4';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const POLL_MS = Number(process.env.TS_POLL_MS ?? 200);
const wireLog = process.env.TS_WIRE_LOG === '1';

// One task store for every session; it binds each task to its session.
const taskStore = new InMemoryTaskStore();
const taskMessageQueue = new InMemoryTaskMessageQueue();

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

function log(line) {
    process.stderr.write(line + '\n');
}

// finish stores a task's outcome. The SDK does not stop a task's work when
// the task is cancelled; storing a result afterwards throws, which we log
// (as evidence) instead of letting it crash the process.
async function finish(store, taskId, status, result) {
    try {
        await store.storeTaskResult(taskId, status, result);
    } catch (e) {
        log(`task ${taskId}: work ended after the task was already terminal: ${e?.message ?? e}`);
    }
}

function newServer() {
    const server = new McpServer(
        { name: 'ts-task-server', version: '1.0.0' },
        {
            capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
            taskStore,
            taskMessageQueue
        }
    );

    server.experimental.tasks.registerToolTask(
        'slow',
        {
            description: 'Completes after ms milliseconds.',
            inputSchema: { ms: z.number(), label: z.string().optional() },
            execution: { taskSupport: 'optional' }
        },
        {
            async createTask({ ms, label }, { taskStore: store, taskRequestedTtl }) {
                const task = await store.createTask({ ttl: taskRequestedTtl, pollInterval: POLL_MS });
                (async () => {
                    await sleep(ms);
                    await finish(store, task.taskId, 'completed', {
                        content: [{ type: 'text', text: `slow ${label ?? 'task'} done after ${ms}ms` }]
                    });
                })();
                return { task };
            },
            async getTask(_args, { taskId, taskStore: store }) {
                return await store.getTask(taskId);
            },
            async getTaskResult(_args, { taskId, taskStore: store }) {
                return await store.getTaskResult(taskId);
            }
        }
    );

    server.experimental.tasks.registerToolTask(
        'fail',
        {
            description: 'Fails with a tool error.',
            execution: { taskSupport: 'required' }
        },
        {
            async createTask({ taskStore: store, taskRequestedTtl }) {
                const task = await store.createTask({ ttl: taskRequestedTtl, pollInterval: POLL_MS });
                (async () => {
                    await sleep(100);
                    await finish(store, task.taskId, 'failed', {
                        content: [{ type: 'text', text: 'it broke' }],
                        isError: true
                    });
                })();
                return { task };
            },
            async getTask({ taskId, taskStore: store }) {
                return await store.getTask(taskId);
            },
            async getTaskResult({ taskId, taskStore: store }) {
                return await store.getTaskResult(taskId);
            }
        }
    );

    server.experimental.tasks.registerToolTask(
        'confirm',
        {
            description: 'Asks the client to confirm a deletion.',
            inputSchema: { filename: z.string() },
            execution: { taskSupport: 'required' }
        },
        {
            async createTask({ filename }, { taskStore: store, taskRequestedTtl }) {
                const task = await store.createTask({ ttl: taskRequestedTtl, pollInterval: POLL_MS });
                (async () => {
                    try {
                        await store.updateTaskStatus(task.taskId, 'input_required', 'waiting for confirmation');
                        const res = await server.server.elicitInput(
                            {
                                mode: 'form',
                                message: `Delete '${filename}'?`,
                                requestedSchema: {
                                    type: 'object',
                                    properties: { confirm: { type: 'boolean' } },
                                    required: ['confirm']
                                }
                            },
                            { relatedTask: { taskId: task.taskId } }
                        );
                        await store.updateTaskStatus(task.taskId, 'working');
                        const yes = res.action === 'accept' && res.content?.confirm === true;
                        await finish(store, task.taskId, 'completed', {
                            content: [{ type: 'text', text: yes ? `deleted '${filename}'` : `kept '${filename}'` }]
                        });
                    } catch (e) {
                        await finish(store, task.taskId, 'failed', {
                            content: [{ type: 'text', text: `confirm failed: ${e?.message ?? e}` }],
                            isError: true
                        });
                    }
                })();
                return { task };
            },
            async getTask(_args, { taskId, taskStore: store }) {
                return await store.getTask(taskId);
            },
            async getTaskResult(_args, { taskId, taskStore: store }) {
                return await store.getTaskResult(taskId);
            }
        }
    );

    server.registerTool(
        'echo',
        { description: 'Echoes its input.', inputSchema: { text: z.string() } },
        async ({ text }) => ({ content: [{ type: 'text', text }] })
    );
    return server;
}

// Sessions: one transport and McpServer per session, created on initialize.
const sessions = new Map();

async function readBody(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const text = Buffer.concat(chunks).toString('utf8');
    return text ? JSON.parse(text) : undefined;
}

function chunkText(chunk) {
    if (typeof chunk === 'string') return chunk.trim();
    return Buffer.from(chunk).toString('utf8').trim();
}

function teeResponse(res, id) {
    const write = res.write.bind(res);
    const end = res.end.bind(res);
    res.write = (chunk, ...rest) => {
        if (chunk) log(`<< #${id} ${chunkText(chunk)}`);
        return write(chunk, ...rest);
    };
    res.end = (chunk, ...rest) => {
        if (chunk && typeof chunk !== 'function') log(`<< #${id} ${chunkText(chunk)}`);
        log(`<< #${id} end ${res.statusCode}`);
        return end(chunk, ...rest);
    };
}

function jsonError(res, status, message) {
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

let requestCount = 0;
const httpServer = createServer(async (req, res) => {
    const id = ++requestCount;
    try {
        const sessionId = req.headers['mcp-session-id'];
        const body = req.method === 'POST' ? await readBody(req) : undefined;
        if (wireLog) {
            const hdrs = ['mcp-session-id', 'mcp-protocol-version', 'mcp-method', 'mcp-name']
                .filter(h => req.headers[h])
                .map(h => `${h}=${req.headers[h]}`)
                .join(' ');
            log(`>> #${id} ${req.method} ${hdrs} ${body ? JSON.stringify(body) : ''}`);
            teeResponse(res, id);
        }
        let transport = sessionId ? sessions.get(sessionId) : undefined;
        if (!transport) {
            if (sessionId) {
                return jsonError(res, 404, 'Session not found');
            }
            if (req.method !== 'POST' || !isInitializeRequest(body)) {
                return jsonError(res, 400, 'Bad Request: No valid session ID provided');
            }
            transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                onsessioninitialized: sid => sessions.set(sid, transport)
            });
            transport.onclose = () => {
                if (transport.sessionId) sessions.delete(transport.sessionId);
            };
            await newServer().connect(transport);
        }
        await transport.handleRequest(req, res, body);
    } catch (e) {
        log(`request #${id} failed: ${e?.stack ?? e}`);
        if (!res.headersSent) jsonError(res, 500, String(e?.message ?? e));
    }
});

process.on('unhandledRejection', e => log(`unhandled rejection: ${e?.stack ?? e}`));

httpServer.listen(0, '127.0.0.1', () => {
    process.stdout.write(JSON.stringify({ port: httpServer.address().port }) + '\n');
});

for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => {
        taskStore.cleanup();
        httpServer.close();
        process.exit(0);
    });
}
