package integration

// A model as a test client. model reads only what a model in an LLM host
// reads: the text content of tool results (and of a host's error
// messages), the tool list and the tools' schemas. It never reads _meta,
// structuredContent or a JSON block, and it knows nothing of taskbridge
// but what the prose tells it: it follows a workflow by parsing the
// handoff's prose (the header, "Next:", each call's shape and its
// "where:" lines, the last error of a step to correct, the advice on how
// to wait), fills in values from what it "knows" (says), asks the user
// when the prose says a decision is a person's, and recovers from a
// refusal by reading its text. When the prose is hard to follow for this
// reader, the prose is what to fix, not the reader.
//
// A host (host below) carries the model's calls to a server: a go-sdk
// client that declares nothing (a tool-only host, over HTTP or stdio), or
// one that behaves as Claude Code's CLI (claudeHost, hosts_claude_test.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// host carries a model's tool calls: a tool name and arguments in, what
// the host shows the model out (the text of the result's content, or a
// JSON-RPC error's message, with isError).
type host interface {
	callTool(ctx context.Context, name string, args map[string]any) (text string, isError bool, err error)
	listTools(ctx context.Context) ([]*mcp.Tool, error)
}

// sdkHost is a host on a go-sdk client session that declares nothing:
// its model's tool name and arguments are all it sends.
type sdkHost struct{ cs *mcp.ClientSession }

func (h sdkHost) callTool(ctx context.Context, name string, args map[string]any) (string, bool, error) {
	res, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return je.Message, true, nil // the host shows the model the error
	}
	if err != nil {
		return "", false, err
	}
	return contentText(res.Content), res.IsError, nil
}

func (h sdkHost) listTools(ctx context.Context) ([]*mcp.Tool, error) {
	res, err := h.cs.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	return res.Tools, nil
}

// contentText is the text of a result's content as a host shows it to
// its model: the text items, one after another.
func contentText(content []mcp.Content) string {
	var parts []string
	for _, c := range content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// turn is one tool call of the model, as it read the answer.
type turn struct {
	tool    string
	args    map[string]any
	text    string
	isError bool
}

// model follows workflows from their prose.
type model struct {
	t    *testing.T
	h    host
	says map[string]any // what the model (or the user it asks) puts in a value to fill in, by name
	// echo names a value the model echoes once as the prose shows it
	// ("<string>") instead of filling it in: a careless model's call.
	echo string
	// never lists tools the model must not need (a host that runs tasks
	// never has its model call task_result).
	never []string

	turns   []turn
	asked   []string // the decisions it asked the user for
	refused int      // refusals it recovered from
	echoed  bool
}

// maxTurns bounds the calls of one workflow.
const maxTurns = 16

// call makes one tool call and records what the model read.
func (m *model) call(ctx context.Context, tool string, args map[string]any) turn {
	m.t.Helper()
	require := func(cond bool, format string, a ...any) {
		if !cond {
			m.t.Fatalf(format+"\ntranscript:\n%s", append(a, m.transcript())...)
		}
	}
	require(!slices.Contains(m.never, tool), "the model was told to call tool %q, which this host's model never needs", tool)
	require(len(m.turns) < maxTurns, "the model made %d calls without reaching the end", maxTurns)
	text, isError, err := m.h.callTool(ctx, tool, args)
	require(err == nil, "calling %s: %v", tool, err)
	tr := turn{tool: tool, args: args, text: text, isError: isError}
	m.turns = append(m.turns, tr)
	return tr
}

// transcript is every call and answer so far, for failure messages.
func (m *model) transcript() string {
	var b strings.Builder
	for i, tr := range m.turns {
		args, _ := json.Marshal(tr.args)
		fmt.Fprintf(&b, "--- %d. %s %s (isError %v)\n%s\n", i+1, tr.tool, args, tr.isError, tr.text)
	}
	return b.String()
}

// The parts of the prose the model reads.
var (
	proseHeader = regexp.MustCompile(`(?m)^Workflow "([^"]+)" \(task "([^"]+)"\) ([^(]+?) \(status: ([a-z_]+)\)\.`)
	proseCall   = regexp.MustCompile(`(Ask the user, then c|C)all tool "([^"]+)" with `)
	proseWhere  = regexp.MustCompile(`(?m)^- "([^"]+)" \(([^)]*)\)(?:: (.*))?$`)
	proseError  = regexp.MustCompile(`Its last error: (.*?)\. (?:Ask the user, then c|C)all tool`)
	proseWait   = regexp.MustCompile(`call tool "([^"]+)" with (\{"task_id": "[^"]+"\})`)
	proseFill   = regexp.MustCompile(`"([^"]+)":<([^>]*)>`)
	// A refusal names the value to put in place of an echoed placeholder.
	refusedArg   = regexp.MustCompile(`argument "([^"]+)" still holds the handoff's placeholder`)
	refusedField = regexp.MustCompile(`field "([^"]+)" still holding the handoff's placeholder`)
)

// state is where a workflow stands, as the model read it.
type state struct {
	workflow, task, phrase, status string
	text                           string
}

// readState finds the handoff's header in text.
func readState(text string) (state, bool) {
	mt := proseHeader.FindStringSubmatch(text)
	if mt == nil {
		return state{}, false
	}
	return state{workflow: mt[1], task: mt[2], phrase: mt[3], status: mt[4], text: text}, true
}

func (s state) ended() bool {
	return s.status == "completed" || s.status == "failed" || s.status == "cancelled"
}

// action is one call the prose asks for now.
type action struct {
	step   string
	tool   string
	person bool              // a person's decision: ask the user first
	shape  string            // the arguments as shown, with <type> for each value to fill in
	types  map[string]string // value to fill in -> its type, from the where: lines
	fix    string            // the last error of a step to correct
}

// next reads the actions of "Next:" (one, or several "in any order").
func (m *model) next(s state) []action {
	m.t.Helper()
	i := strings.Index(s.text, "\n\nNext")
	if i < 0 {
		m.t.Fatalf("the handoff says nothing about what to do next\ntranscript:\n%s", m.transcript())
	}
	sec := s.text[i+2:]
	if j := strings.Index(sec, "\n\n"); j >= 0 {
		sec = sec[:j]
	}
	if strings.HasPrefix(sec, "Next: nothing for you to call now") {
		return nil
	}
	var parts []string
	if strings.HasPrefix(sec, "Next, in any order:") {
		parts = regexp.MustCompile(`(?m)^\d+\. `).Split(strings.TrimPrefix(sec, "Next, in any order:"), -1)[1:]
	} else {
		parts = []string{strings.TrimPrefix(sec, "Next: ")}
	}
	var out []action
	for _, p := range parts {
		a := action{types: map[string]string{}}
		if mt := regexp.MustCompile(`^step "([^"]+)"`).FindStringSubmatch(p); mt != nil {
			a.step = mt[1]
		}
		loc := proseCall.FindStringSubmatchIndex(p)
		if loc == nil {
			m.t.Fatalf("step %q: the prose names no call to make: %q\ntranscript:\n%s", a.step, p, m.transcript())
		}
		a.person = p[loc[2]:loc[3]] != "C"
		a.tool = p[loc[4]:loc[5]]
		a.shape = balanced(p[loc[1]:])
		if a.shape == "" {
			m.t.Fatalf("step %q: the call's arguments are not one object: %q", a.step, p[loc[1]:])
		}
		for _, w := range proseWhere.FindAllStringSubmatch(p, -1) {
			name := w[1][strings.LastIndex(w[1], ".")+1:]
			a.types[name] = strings.SplitN(w[2], ",", 2)[0]
		}
		if mt := proseError.FindStringSubmatch(p); mt != nil {
			a.fix = mt[1]
		}
		out = append(out, a)
	}
	return out
}

// balanced returns the {...} object at the start of s (the call's
// arguments: JSON values, and <type> for each value to fill in), or "".
func balanced(s string) string {
	if !strings.HasPrefix(s, "{") {
		return ""
	}
	depth, inString, escaped := 0, false, false
	for i, r := range s {
		switch {
		case escaped:
			escaped = false
		case inString && r == '\\':
			escaped = true
		case r == '"':
			inString = !inString
		case inString:
		case r == '{':
			depth++
		case r == '}':
			depth--
			if depth == 0 {
				return s[:i+1]
			}
		}
	}
	return ""
}

// value is what the model puts in the value name the prose says is of
// type typ: what it knows, which must be of that type.
func (m *model) value(name, typ string) any {
	m.t.Helper()
	v, ok := m.says[name]
	if !ok {
		m.t.Fatalf("the prose asks for %q (%s), which the model has no answer for\ntranscript:\n%s", name, typ, m.transcript())
	}
	var is string
	switch v.(type) {
	case bool:
		is = "boolean"
	case string:
		is = "string"
	case int, float64:
		is = "number"
	}
	if typ != is && (typ != "integer" || is != "number") {
		m.t.Fatalf("the prose says %q is a %q; the model's answer %v is a %s\ntranscript:\n%s", name, typ, v, is, m.transcript())
	}
	return v
}

// fill makes the call's arguments from its shape: each <type> becomes
// the model's value (or, once, the placeholder itself when it echoes);
// for a step to correct, each value the error names becomes the model's.
func (m *model) fill(a action) map[string]any {
	m.t.Helper()
	shape := proseFill.ReplaceAllStringFunc(a.shape, func(s string) string {
		mt := proseFill.FindStringSubmatch(s)
		name, typ := mt[1], strings.SplitN(mt[2], ",", 2)[0]
		if want := a.types[name]; want != typ {
			m.t.Fatalf("the call shows %q as <%s>, its where: line as %q", name, mt[2], want)
		}
		v := m.value(name, typ)
		if name == m.echo && !m.echoed {
			m.echoed = true
			v = "<" + mt[2] + ">"
		}
		raw, _ := json.Marshal(v)
		return fmt.Sprintf("%q:%s", name, raw)
	})
	var args map[string]any
	if err := json.Unmarshal([]byte(shape), &args); err != nil {
		m.t.Fatalf("the call's arguments do not read as JSON once filled in: %v: %s", err, shape)
	}
	if a.fix != "" {
		fixed := 0
		for name := range args {
			if _, known := m.says[name]; known && regexp.MustCompile(`\b`+regexp.QuoteMeta(name)+`\b`).MatchString(a.fix) {
				args[name] = m.says[name]
				fixed++
			}
		}
		if fixed == 0 {
			m.t.Fatalf("step %q: the error %q names no argument the model can correct\ntranscript:\n%s", a.step, a.fix, m.transcript())
		}
	}
	return args
}

// perform makes the call of action a, recovering from a refusal by
// reading it, and returns the answer.
func (m *model) perform(ctx context.Context, a action) turn {
	m.t.Helper()
	args := m.fill(a)
	if a.person {
		m.asked = append(m.asked, a.step)
	}
	tr := m.call(ctx, a.tool, args)
	for range 3 {
		if !tr.isError {
			return tr
		}
		if _, ok := readState(tr.text); ok {
			return tr // a failed call, with the handoff: Next says what now
		}
		if mt := refusedArg.FindStringSubmatch(tr.text); mt != nil {
			args[mt[1]] = m.value(mt[1], a.types[mt[1]])
		} else if mt := refusedField.FindStringSubmatch(tr.text); mt != nil {
			payload, _ := args["payload"].(map[string]any)
			if payload == nil {
				m.t.Fatalf("a refusal names field %q, and the call has no payload: %s", mt[1], tr.text)
			}
			payload[mt[1]] = m.value(mt[1], a.types[mt[1]])
		} else {
			m.t.Fatalf("the model cannot tell how to recover from: %s\ntranscript:\n%s", tr.text, m.transcript())
		}
		m.refused++
		tr = m.call(ctx, a.tool, args)
	}
	m.t.Fatalf("refused again and again\ntranscript:\n%s", m.transcript())
	return tr
}

// follow starts workflow tool with args and follows it to its end, as
// its prose says. It returns the workflow's last state.
func (m *model) follow(ctx context.Context, tool string, args map[string]any) state {
	m.t.Helper()
	tr := m.call(ctx, tool, args)
	for {
		s, ok := readState(tr.text)
		if !ok {
			m.t.Fatalf("the answer shows no workflow\ntranscript:\n%s", m.transcript())
		}
		if s.ended() {
			return s
		}
		acts := m.next(s)
		if len(acts) == 0 {
			// Nothing to call: the prose says how to wait.
			mt := proseWait.FindStringSubmatch(s.text)
			if mt == nil {
				m.t.Fatalf("nothing to call, and the prose says no way to wait\ntranscript:\n%s", m.transcript())
			}
			var wargs map[string]any
			if err := json.Unmarshal([]byte(mt[2]), &wargs); err != nil {
				m.t.Fatalf("the wait's arguments %s: %v", mt[2], err)
			}
			tr = m.call(ctx, mt[1], wargs)
			continue
		}
		for _, a := range acts {
			tr = m.perform(ctx, a)
		}
	}
}

// readBytes is the bytes of text the model read in its calls.
func (m *model) readBytes() (total, largest int) {
	for _, tr := range m.turns {
		total += len(tr.text)
		largest = max(largest, len(tr.text))
	}
	return total, largest
}

// toolBytes is the size of a tool list as a host hands it to its model:
// each tool's name, description and input schema as JSON.
func toolBytes(tools []*mcp.Tool) int {
	n := 0
	for _, t := range tools {
		b, _ := json.Marshal(map[string]any{"name": t.Name, "description": t.Description, "input_schema": t.InputSchema})
		n += len(b)
	}
	return n
}
