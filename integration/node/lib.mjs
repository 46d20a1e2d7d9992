// lib.mjs: what the TypeScript SDK client scripts of the integration tests
// share. Each script prints one JSON line per step for its Go test to read.

// emit prints one step's outcome as a JSON line.
export function emit(step, details) {
    process.stdout.write(JSON.stringify({ step, ...details }) + '\n');
}

// startWatchdog ends the process (exit 3, after a "watchdog" line) if the
// script is still running after seconds: a hang must fail fast, not wait
// for the Go test's timeout. clearTimeout the result when done.
export function startWatchdog(seconds) {
    return setTimeout(() => {
        emit('watchdog', { ok: false, error: `script did not finish within ${seconds}s` });
        process.exit(3);
    }, seconds * 1000);
}

// step runs fn and prints its details; a thrown error is printed as
// ok:false and rethrown unless rethrow is false.
export async function step(name, fn, { rethrow = true } = {}) {
    try {
        const d = await fn();
        emit(name, { ok: true, ...d });
        return d;
    } catch (e) {
        emit(name, { ok: false, error: e?.message ?? String(e), code: e?.code });
        if (rethrow) throw e;
        return undefined;
    }
}

// parseHandoff returns the handoff of a task-aware workflow prompt result:
// the last ```json block of the final assistant message, and the prose.
// A prompt result carries the handoff in its final message; a tool result
// (a workflow task's tasks/result, a workflow tool's result, a
// continuation's) in its last text content.
export function parseHandoff(result) {
    let text = '';
    if (Array.isArray(result.messages)) {
        const last = result.messages[result.messages.length - 1];
        text = last?.content?.type === 'text' ? last.content.text : '';
    } else {
        const texts = (result.content ?? []).filter((c) => c.type === 'text');
        text = texts.length > 0 ? texts[texts.length - 1].text : '';
    }
    const blocks = [...text.matchAll(/```json\s*\n([\s\S]*?)\n```/g)];
    if (blocks.length === 0) throw new Error('no json block in the result');
    return { doc: JSON.parse(blocks[blocks.length - 1][1]), prose: text };
}

// isPlaceholder reports a handoff argument the client must fill ("<...>").
export const isPlaceholder = (v) => typeof v === 'string' && v.startsWith('<') && v.endsWith('>');
