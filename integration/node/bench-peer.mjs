// The benchmark's peer: the official TypeScript SDK's task server (McpServer
// with its InMemoryTaskStore), serving the same tools as taskbridge's bench
// server over Streamable HTTP on 127.0.0.1 with one session per client.
//
//   node bench-peer.mjs [port]    -> prints {"port": N} on stdout when ready
//
// Tools: echo {text} (plain) and work {ms} (task-capable: sleeps ms, then
// returns {"finishedAt": <epoch ms, sub-ms precision>} as text).
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';

const taskStore = new InMemoryTaskStore();
const now = () => performance.timeOrigin + performance.now();

function newServer() {
  const server = new McpServer(
    { name: 'ts-bench-peer', version: '1.0.0' },
    { capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } }, taskStore },
  );
  server.registerTool('echo', { description: 'echo', inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: 'text', text }] }));
  server.experimental.tasks.registerToolTask('work', {
    description: 'sleeps ms then reports when it finished',
    inputSchema: { ms: z.number().default(0) },
    execution: { taskSupport: 'optional' },
  }, {
    async createTask({ ms }, { taskStore, taskRequestedTtl }) {
      const task = await taskStore.createTask({ ttl: taskRequestedTtl ?? 60000 });
      (async () => {
        if (ms > 0) await new Promise((r) => setTimeout(r, ms));
        await taskStore.storeTaskResult(task.taskId, 'completed', {
          content: [{ type: 'text', text: JSON.stringify({ finishedAt: now() }) }],
        });
      })();
      return { task };
    },
    async getTask(_args, { taskId, taskStore }) { return await taskStore.getTask(taskId); },
    async getTaskResult(_args, { taskId, taskStore }) { return await taskStore.getTaskResult(taskId); },
  });
  return server;
}

const transports = new Map();

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const s = Buffer.concat(chunks).toString('utf8');
  return s ? JSON.parse(s) : undefined;
}

const httpServer = http.createServer(async (req, res) => {
  try {
    const sid = req.headers['mcp-session-id'];
    if (req.method === 'POST') {
      const body = await readBody(req);
      let transport = sid ? transports.get(sid) : undefined;
      if (!transport) {
        if (sid || !body || body.method !== 'initialize') {
          res.writeHead(400, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'bad session' } }));
          return;
        }
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => transports.set(id, transport),
        });
        transport.onclose = () => { if (transport.sessionId) transports.delete(transport.sessionId); };
        await newServer().connect(transport);
      }
      await transport.handleRequest(req, res, body);
      return;
    }
    const transport = sid && transports.get(sid);
    if (!transport) { res.writeHead(400); res.end('bad session'); return; }
    await transport.handleRequest(req, res);
  } catch (e) {
    if (!res.headersSent) { res.writeHead(500); res.end(String(e)); }
  }
});

const port = Number(process.argv[2] || 0);
httpServer.listen(port, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: httpServer.address().port }) + '\n');
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
