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

// parseHandoff returns the handoff of a task-aware workflow: the document
// and the prose. A prompt result carries the handoff in its final
// assistant message, prose then a ```json block (and in _meta). A tool
// result (a workflow task's tasks/result, a workflow tool's result, a
// continuation's) carries the prose only, in its last text content (what
// a model reads), and the document as its structuredContent and in
// _meta["taskbridge/handoff"] (what a program reads); its text has the
// json block only when the call asked for it (_meta["taskbridge/handoff-json"]).
export function parseHandoff(result) {
    let text = '';
    if (Array.isArray(result.messages)) {
        const last = result.messages[result.messages.length - 1];
        text = last?.content?.type === 'text' ? last.content.text : '';
    } else {
        const texts = (result.content ?? []).filter((c) => c.type === 'text');
        text = texts.length > 0 ? texts[texts.length - 1].text : '';
        const doc = isHandoff(result.structuredContent) ? result.structuredContent : result._meta?.['taskbridge/handoff'];
        if (isHandoff(doc)) return { doc, prose: text };
    }
    const blocks = [...text.matchAll(/```json\s*\n([\s\S]*?)\n```/g)];
    if (blocks.length === 0) throw new Error('no json block in the result');
    return { doc: JSON.parse(blocks[blocks.length - 1][1]), prose: text };
}

// isHandoff reports a handoff document.
const isHandoff = (v) => v !== null && typeof v === 'object' && typeof v.schemaVersion === 'number' && typeof v.taskId === 'string';

// isPlaceholder reports a handoff argument the client must fill ("<...>").
export const isPlaceholder = (v) => typeof v === 'string' && v.startsWith('<') && v.endsWith('>');
