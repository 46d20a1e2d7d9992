package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// The simulation's tools. A server step's call behaves as its spec and
// the seed say: it succeeds (its effect applied), fails, is held until an
// operation releases it (so that a cancel, a pause, a stop or a crash can
// meet it running), or hangs until its context ends (a step with a
// Timeout). Which one is a hash of the seed, the task's handle, the
// step's path and how many calls of that step came before: the same on a
// replay, whatever order the engine's goroutines run in. Every call is
// written in the ledger.

// The tools' names.
const (
	toolStep   = "sim_step"
	toolUndo   = "sim_undo"
	toolClient = "sim_client"
)

// toolIn is every simulation tool's input.
type toolIn struct {
	Spec   string `json:"spec"`
	Item   any    `json:"item,omitempty"`
	Answer any    `json:"answer,omitempty"`
}

// What a call does.
const (
	doOK = iota
	doFail
	doHold
	doHang
)

// held is a call waiting for an operation to release it.
type held struct {
	call    *Call
	release chan bool // true: succeed; false: fail
}

// holds are the calls held now.
type holds struct {
	mu    sync.Mutex
	calls map[int]*held
}

func (h *holds) add(c *Call) *held {
	x := &held{call: c, release: make(chan bool, 1)}
	h.mu.Lock()
	h.calls[c.N] = x
	h.mu.Unlock()
	return x
}

func (h *holds) remove(c *Call) {
	h.mu.Lock()
	delete(h.calls, c.N)
	h.mu.Unlock()
}

// list returns the held calls in a stable order: by handle, step and
// nth (never by the engine's timing).
func (h *holds) list() []*held {
	h.mu.Lock()
	out := make([]*held, 0, len(h.calls))
	for _, x := range h.calls {
		out = append(out, x)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b *held) int {
		return strings.Compare(fmt.Sprintf("%s/%s/%06d/%06d", a.call.Handle, a.call.Step, a.call.Nth, a.call.N),
			fmt.Sprintf("%s/%s/%06d/%06d", b.call.Handle, b.call.Step, b.call.Nth, b.call.N))
	})
	return out
}

// holding reports whether a call of task id's record at path is held.
func (h *holds) holding(id, path string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.calls {
		if x.call.Task == id && (x.call.Step == path || strings.HasPrefix(x.call.Step, path+"[")) {
			return true
		}
	}
	return false
}

// addTools registers the simulation's tools on process p's builder.
func (s *Sim) addTools(b *builder.Builder, p *Process) {
	opts := &taskrouter.ToolOptions{}
	builder.Tool(b, &mcp.Tool{Name: toolStep, Description: "a simulated step"}, s.serverTool(p, false), opts)
	builder.Tool(b, &mcp.Tool{Name: toolUndo, Description: "a simulated undo"}, s.serverTool(p, true), opts)
	builder.Tool(b, &mcp.Tool{Name: toolClient, Description: "a step the simulated client performs"}, s.clientTool(p), opts)
}

// decide picks what call c does.
func (s *Sim) decide(c *Call) int {
	sp := specs[c.Spec]
	r := s.chance(c.Handle, c.Step, c.Nth, "do")
	switch {
	case r < sp.Hang:
		return doHang
	case r < sp.Hang+sp.Hold:
		return doHold
	case r < sp.Hang+sp.Hold+sp.Fail:
		return doFail
	}
	return doOK
}

// chance is a number in [0, 1) fixed by the seed and the words.
func (s *Sim) chance(words ...any) float64 {
	h := fnv.New64a()
	fmt.Fprint(h, s.cfg.Seed)
	for _, w := range words {
		fmt.Fprintf(h, "|%v", w)
	}
	return float64(h.Sum64()>>11) / (1 << 53)
}

// begin records the start of a call of the step running in ctx.
func (s *Sim) begin(ctx context.Context, p *Process, in toolIn, undo bool) (*Call, error) {
	info, ok := workflow.StepFrom(ctx)
	if !ok {
		return nil, errors.New("sim: the tool was called outside a workflow step")
	}
	c := &Call{Op: s.opIndex(), Proc: p.N, Task: info.TaskID, Handle: s.handleOf(info.TaskID), Step: info.Step,
		Attempt: info.Attempt, Key: info.IdempotencyKey, By: info.By, Spec: in.Spec, Undo: undo, StartWrite: s.world.Disk.Seq()}
	if p.Conn.Dead() {
		c.Outcome = outDead
		return nil, ErrCrashed // a dead process applies nothing; not in the ledger
	}
	s.ledger.begin(c)
	s.check.callStarts(c)
	return c, nil
}

// serverTool is sim_step's (or sim_undo's) handler in process p.
func (s *Sim) serverTool(p *Process, undo bool) mcp.ToolHandlerFor[toolIn, map[string]any] {
	return func(ctx context.Context, _ *mcp.CallToolRequest, in toolIn) (*mcp.CallToolResult, map[string]any, error) {
		c, err := s.begin(ctx, p, in, undo)
		if err != nil {
			return nil, nil, err
		}
		s.busy.Add(1)
		defer s.busy.Add(-1)
		do := doOK
		if c.By == "server" {
			do = s.decide(c)
		}
		switch do {
		case doHold:
			h := s.holds.add(c)
			s.busy.Add(-1) // held: the simulation may rest
			select {
			case ok := <-h.release:
				if !ok {
					do = doFail
				} else {
					do = doOK
				}
			case <-ctx.Done():
				do = doHang
			}
			s.busy.Add(1)
			s.holds.remove(c)
		case doHang:
			s.busy.Add(-1)
			<-ctx.Done()
			s.busy.Add(1)
		}
		switch {
		case do == doHang || ctx.Err() != nil && do != doOK:
			out := outCut
			switch {
			case p.Conn.Dead():
				out = outDead
			case strings.Contains(fmt.Sprint(context.Cause(ctx)), "timed out after") ||
				strings.Contains(fmt.Sprint(context.Cause(ctx)), "no heartbeat"):
				out = outTimeout
			}
			s.ledger.end(c, out, s.world.Disk.Seq())
			return nil, nil, context.Cause(ctx)
		case p.Conn.Dead():
			s.ledger.end(c, outDead, s.world.Disk.Seq())
			return nil, nil, ErrCrashed
		case do == doFail:
			s.ledger.end(c, outFail, s.world.Disk.Seq())
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "simulated failure of " + c.Spec}}}, nil, nil
		}
		s.ledger.end(c, outOK, s.world.Disk.Seq())
		out := map[string]any{"spec": c.Spec, "nth": c.Nth, "done": s.chance(c.Handle, c.Step, c.Nth, "done") < 0.5}
		if in.Item != nil {
			out["item"] = in.Item
		}
		return nil, out, nil
	}
}

// clientTool is sim_client's handler: the simulated client performs a
// step with it (a continuation call).
func (s *Sim) clientTool(p *Process) mcp.ToolHandlerFor[toolIn, map[string]any] {
	return func(ctx context.Context, _ *mcp.CallToolRequest, in toolIn) (*mcp.CallToolResult, map[string]any, error) {
		if _, ok := workflow.StepFrom(ctx); !ok {
			return nil, map[string]any{"spec": in.Spec, "answer": in.Answer, "free": true}, nil // a call outside a workflow
		}
		c, err := s.begin(ctx, p, in, false)
		if err != nil {
			return nil, nil, err
		}
		s.ledger.end(c, outOK, s.world.Disk.Seq())
		return nil, map[string]any{"spec": in.Spec, "answer": in.Answer}, nil
	}
}

// releaseHeld releases the i-th held call (in the stable order): it
// succeeds, or fails. It reports the call, nil when none is held.
func (s *Sim) releaseHeld(i int, ok bool) *Call {
	l := s.holds.list()
	if len(l) == 0 {
		return nil
	}
	h := l[i%len(l)]
	select {
	case h.release <- ok:
	default:
	}
	return h.call
}

// metaTask returns _meta naming task id, for a continuation.
func metaTask(id string) mcp.Meta { return mcp.Meta{mcptask.MetaTaskID: id} }

// jsonOf marshals v.
func jsonOf(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
