package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
)

type command struct {
	c      *client.Client
	out    *printer
	in     *asker
	stderr io.Writer
}

func (cmd *command) dispatch(ctx context.Context, args []string) error {
	switch args[0] {
	case "info":
		return cmd.info()
	case "tools":
		return cmd.tools(ctx)
	case "call":
		return cmd.call(ctx, args[1:])
	case "tasks":
		if len(args) < 2 {
			return usagef("tasks needs a subcommand: list, get, result or cancel")
		}
		return cmd.tasks(ctx, args[1], args[2:])
	case "prompt":
		return cmd.prompt(ctx, args[1:])
	}
	return usagef("unknown command %q", args[0])
}

func (cmd *command) info() error {
	s := cmd.c.ServerTasks()
	info := map[string]any{
		"dialect":         cmd.c.Dialect().String(),
		"protocolVersion": cmd.c.ProtocolVersion(),
		"tasks": map[string]bool{"core": s.Core, "list": s.List, "cancel": s.Cancel,
			"toolsCall": s.ToolsCall, "extension": s.Extension},
	}
	if si := cmd.c.ServerInfo(); si != nil {
		info["server"] = si.Name + " " + si.Version
	}
	if cmd.out.json {
		return cmd.out.line(info)
	}
	fmt.Fprintf(cmd.out.w, "server:    %v\nprotocol:  %s (dialect %s)\n", info["server"], cmd.c.ProtocolVersion(), cmd.c.Dialect())
	fmt.Fprintf(cmd.out.w, "tasks:     core=%v (list=%v cancel=%v tools/call=%v) extension=%v\n", s.Core, s.List, s.Cancel, s.ToolsCall, s.Extension)
	return nil
}

func (cmd *command) tools(ctx context.Context) error {
	tools, err := cmd.c.Tools(ctx)
	if err != nil {
		return err
	}
	for _, t := range tools {
		if cmd.out.json {
			if err := cmd.out.line(map[string]any{"name": t.Name, "taskSupport": t.TaskSupport, "description": t.Description}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(cmd.out.w, "%-22s %-9s %s\n", t.Name, t.TaskSupport, oneLine(t.Description, 60))
	}
	return nil
}

// parseArgs reads a JSON object or key=value pairs.
func parseArgs(args []string) (map[string]any, error) {
	out := map[string]any{}
	if len(args) == 1 && strings.HasPrefix(strings.TrimSpace(args[0]), "{") {
		if err := json.Unmarshal([]byte(args[0]), &out); err != nil {
			return nil, usagef("arguments: %v", err)
		}
		return out, nil
	}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, usagef("argument %q is not key=value", a)
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		out[k] = val
	}
	return out, nil
}

func (cmd *command) call(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(cmd.stderr)
	ttl := fs.Duration("ttl", 0, "task ttl to ask for")
	plain := fs.Bool("plain", false, "allow a plain call when the tool cannot run as a task")
	detach := fs.Bool("detach", false, "print the task id and return without waiting")
	if err := fs.Parse(args); err != nil {
		return usagef("call: %v", err)
	}
	if fs.NArg() < 1 {
		return usagef("call needs a tool name")
	}
	name := fs.Arg(0)
	toolArgs, err := parseArgs(fs.Args()[1:])
	if err != nil {
		return err
	}
	status := cmd.out.status(name)
	defer status.stop()
	for ev, err := range cmd.c.CallTool(ctx, name, toolArgs, &client.CallOptions{TTL: *ttl, AllowPlain: *plain}) {
		if err != nil {
			status.stop()
			return err
		}
		switch ev.Kind {
		case client.EventCreated, client.EventStatus:
			if ev.Kind == client.EventCreated && *detach {
				status.stop()
				return cmd.out.task(ev.Task)
			}
			status.update(ev)
		case client.EventInput:
			status.update(ev)
		case client.EventResult:
			status.stop()
			return cmd.out.result(ev.Task, ev.Result)
		}
	}
	return errors.New("the call ended without a result")
}

func (cmd *command) tasks(ctx context.Context, sub string, args []string) error {
	need := func() (string, error) {
		if len(args) != 1 {
			return "", usagef("tasks %s needs one task id", sub)
		}
		return args[0], nil
	}
	switch sub {
	case "list":
		n := 0
		for t, err := range cmd.c.ListTasks(ctx) {
			if err != nil {
				return err
			}
			n++
			if err := cmd.out.task(t); err != nil {
				return err
			}
		}
		if !cmd.out.json {
			fmt.Fprintf(cmd.out.w, "%d task(s)\n", n)
		}
		return nil
	case "get":
		id, err := need()
		if err != nil {
			return err
		}
		t, err := cmd.c.GetTask(ctx, id)
		if err != nil {
			return err
		}
		return cmd.out.task(t)
	case "result":
		id, err := need()
		if err != nil {
			return err
		}
		raw, err := cmd.c.TaskResult(ctx, id)
		if err != nil {
			return err
		}
		return cmd.out.raw(raw)
	case "cancel":
		id, err := need()
		if err != nil {
			return err
		}
		t, err := cmd.c.CancelTask(ctx, id)
		if err != nil {
			return err
		}
		return cmd.out.task(t)
	}
	return usagef("unknown tasks subcommand %q (list, get, result, cancel)", sub)
}

func (cmd *command) prompt(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("prompt", flag.ContinueOnError)
	fs.SetOutput(cmd.stderr)
	follow := fs.Bool("follow", false, "perform the remaining client steps and wait for completion")
	// Accept -follow after the positional arguments too.
	var pos []string
	for _, a := range args {
		if a == "-follow" || a == "--follow" {
			*follow = true
			continue
		}
		pos = append(pos, a)
	}
	if err := fs.Parse(pos); err != nil {
		return usagef("prompt: %v", err)
	}
	if fs.NArg() < 1 {
		return usagef("prompt needs a prompt name")
	}
	pargs := map[string]string{}
	for _, a := range fs.Args()[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return usagef("prompt argument %q is not key=value", a)
		}
		pargs[k] = v
	}
	res, doc, err := cmd.c.GetPrompt(ctx, fs.Arg(0), pargs)
	if err != nil {
		return err
	}
	if doc == nil {
		return cmd.out.prompt(res)
	}
	if err := cmd.out.handoff(doc); err != nil {
		return err
	}
	if !*follow {
		return nil
	}
	final, err := cmd.c.Follow(ctx, doc, client.FollowOptions{Fill: cmd.in.fill})
	if err != nil {
		return err
	}
	var pr mcp.GetPromptResult
	if err := json.Unmarshal(final, &pr); err == nil {
		if fdoc, err := handoff.FromPromptResult(&pr); err == nil {
			if cmd.out.json {
				return cmd.out.line(map[string]any{"event": "completed", "handoff": fdoc})
			}
			fmt.Fprintf(cmd.out.w, "\nWorkflow %q (task %s) is %s: %d step(s) completed.\n", fdoc.Workflow, fdoc.TaskID, fdoc.Status, len(fdoc.CompletedSteps))
			for _, s := range fdoc.CompletedSteps {
				fmt.Fprintf(cmd.out.w, "  ✓ %s (%s): %s\n", s.Name, s.Tool, oneLine(string(s.Result), 100))
			}
			return nil
		}
	}
	return cmd.out.raw(final)
}

// ---- output ----

type printer struct {
	w    io.Writer
	json bool
	tty  bool
	mu   sync.Mutex
}

func newPrinter(w io.Writer, jsonOut bool) *printer {
	p := &printer{w: w, json: jsonOut}
	if f, ok := w.(*os.File); ok && !jsonOut {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *printer) line(v any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

func taskJSON(t *client.Task) map[string]any {
	m := map[string]any{"taskId": t.ID, "status": t.Status, "createdAt": t.CreatedAt, "lastUpdatedAt": t.LastUpdatedAt}
	if t.StatusMessage != "" {
		m["statusMessage"] = t.StatusMessage
	}
	if t.TTL != nil {
		m["ttlMs"] = t.TTL.Milliseconds()
	}
	if t.PollInterval > 0 {
		m["pollIntervalMs"] = t.PollInterval.Milliseconds()
	}
	return m
}

func (p *printer) task(t *client.Task) error {
	if p.json {
		return p.line(taskJSON(t))
	}
	ttl := "unlimited"
	if t.TTL != nil {
		ttl = t.TTL.String()
	}
	msg := ""
	if t.StatusMessage != "" {
		msg = "  " + oneLine(t.StatusMessage, 60)
	}
	fmt.Fprintf(p.w, "%s  %-14s created %s  ttl %s%s\n", t.ID, t.Status, t.CreatedAt.Local().Format("15:04:05"), ttl, msg)
	return nil
}

func (p *printer) result(t *client.Task, r *mcp.CallToolResult) error {
	if p.json {
		m := map[string]any{"event": "result", "result": r}
		if t != nil {
			m["task"] = taskJSON(t)
		}
		return p.line(m)
	}
	label := "result"
	if r.IsError {
		label = "tool error"
	}
	if t != nil {
		fmt.Fprintf(p.w, "%s (task %s, %s):\n", label, t.ID, t.Status)
	} else {
		fmt.Fprintf(p.w, "%s (no task):\n", label)
	}
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			fmt.Fprintf(p.w, "  %s\n", strings.ReplaceAll(tc.Text, "\n", "\n  "))
		} else {
			b, _ := json.Marshal(c)
			fmt.Fprintf(p.w, "  %s\n", b)
		}
	}
	if r.StructuredContent != nil {
		b, _ := json.Marshal(r.StructuredContent)
		fmt.Fprintf(p.w, "  structured: %s\n", b)
	}
	return nil
}

func (p *printer) raw(raw json.RawMessage) error {
	if p.json {
		return p.line(map[string]any{"event": "result", "result": raw})
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		_, err = fmt.Fprintf(p.w, "%s\n", raw)
		return err
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	_, err := fmt.Fprintf(p.w, "%s\n", b)
	return err
}

func (p *printer) prompt(res *mcp.GetPromptResult) error {
	if p.json {
		return p.line(map[string]any{"event": "prompt", "result": res})
	}
	for _, m := range res.Messages {
		if tc, ok := m.Content.(*mcp.TextContent); ok {
			fmt.Fprintf(p.w, "[%s] %s\n", m.Role, tc.Text)
		}
	}
	return nil
}

func (p *printer) handoff(d *handoff.Document) error {
	if p.json {
		return p.line(map[string]any{"event": "handoff", "handoff": d})
	}
	fmt.Fprintf(p.w, "Workflow %q — task %s — %s\n", d.Workflow, d.TaskID, d.Status)
	if d.PauseReason != "" {
		fmt.Fprintf(p.w, "Paused: %s\n", d.PauseReason)
	}
	for _, s := range d.CompletedSteps {
		fmt.Fprintf(p.w, "  ✓ %-12s %-16s %s\n", s.Name, s.Tool, oneLine(string(s.Result), 70))
	}
	for _, s := range d.RemainingSteps {
		mark, who := "·", "server"
		if s.Execution == handoff.ExecClient {
			mark, who = "→", "you"
		}
		fmt.Fprintf(p.w, "  %s %-12s %-16s (%s)", mark, s.Name, s.Tool, who)
		var ph []string
		for k, v := range s.Arguments {
			if handoff.IsPlaceholder(v) {
				ph = append(ph, k)
			}
		}
		sort.Strings(ph)
		if len(ph) > 0 {
			fmt.Fprintf(p.w, " needs: %s", strings.Join(ph, ", "))
		}
		fmt.Fprintln(p.w)
		if s.Guidance != "" && s.Execution == handoff.ExecClient {
			fmt.Fprintf(p.w, "      %s\n", s.Guidance)
		}
	}
	for _, e := range d.Errors {
		fmt.Fprintf(p.w, "  ✗ %s: %s\n", e.Step, oneLine(e.Message, 80))
	}
	return nil
}

func (p *printer) err(err error) {
	var re *client.RPCError
	if p.json {
		m := map[string]any{"event": "error", "error": err.Error()}
		if errors.As(err, &re) {
			m["code"] = re.Code
		}
		_ = p.line(m)
		return
	}
	fmt.Fprintln(p.w, "error:", err)
}

// statusLine shows a task's progress: on a terminal, one line redrawn with
// a spinner and the elapsed time; otherwise a line per change.
type statusLine struct {
	p       *printer
	tool    string
	start   time.Time
	mu      sync.Mutex
	text    string
	stopped bool
	done    chan struct{}
	once    sync.Once
}

func (p *printer) status(tool string) *statusLine {
	s := &statusLine{p: p, tool: tool, start: time.Now(), done: make(chan struct{}), text: "calling"}
	if p.tty {
		go s.spin()
	}
	return s
}

var spinner = []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")

func (s *statusLine) spin() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.mu.Lock()
			fmt.Fprintf(s.p.w, "\r\033[K%c %s  %s  %.1fs", spinner[i%len(spinner)], s.tool, s.text, time.Since(s.start).Seconds())
			s.mu.Unlock()
		}
	}
}

func (s *statusLine) update(ev client.Event) {
	text := ev.Kind.String()
	if ev.Task != nil {
		text = string(ev.Task.Status)
		if ev.Task.StatusMessage != "" {
			text += ": " + oneLine(ev.Task.StatusMessage, 50)
		}
	}
	if ev.Kind == client.EventInput {
		text = "asking you for input"
	}
	s.mu.Lock()
	s.text = text
	s.mu.Unlock()
	switch {
	case s.p.json:
		m := map[string]any{"event": ev.Kind.String()}
		if ev.Task != nil {
			m["task"] = taskJSON(ev.Task)
		}
		_ = s.p.line(m)
	case !s.p.tty:
		id := ""
		if ev.Task != nil {
			id = ev.Task.ID + " "
		}
		fmt.Fprintf(s.p.w, "%s %s%s (%.1fs)\n", ev.Kind, id, text, time.Since(s.start).Seconds())
	}
}

func (s *statusLine) stop() {
	s.once.Do(func() {
		close(s.done)
		if s.p.tty {
			s.mu.Lock()
			fmt.Fprintf(s.p.w, "\r\033[K")
			s.mu.Unlock()
		}
	})
}

// ---- input ----

// asker asks the person at the terminal.
type asker struct {
	mu  sync.Mutex
	in  *bufio.Reader
	out io.Writer
}

func newAsker(in io.Reader, out io.Writer) *asker {
	return &asker{in: bufio.NewReader(in), out: out}
}

func (a *asker) ask(question string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fmt.Fprintf(a.out, "%s ", question)
	line, err := a.in.ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		return "", fmt.Errorf("reading your answer: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// answer handles a task's elicitation on the terminal.
func (a *asker) answer(ctx context.Context, taskID string, req client.InputRequest) (json.RawMessage, error) {
	if req.Method != "elicitation/create" {
		return nil, fmt.Errorf("the CLI cannot answer %s", req.Method)
	}
	var p struct {
		Message         string `json:"message"`
		RequestedSchema struct {
			Properties map[string]struct {
				Type        string `json:"type"`
				Description string `json:"description"`
			} `json:"properties"`
		} `json:"requestedSchema"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil {
		return nil, err
	}
	fmt.Fprintf(a.out, "\nThe server asks (task %s): %s\n", taskID, p.Message)
	content := map[string]any{}
	names := make([]string, 0, len(p.RequestedSchema.Properties))
	for n := range p.RequestedSchema.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		prop := p.RequestedSchema.Properties[n]
		ans, err := a.ask(fmt.Sprintf("  %s (%s):", n, prop.Type))
		if err != nil {
			return nil, err
		}
		content[n] = typed(ans, prop.Type)
	}
	return json.Marshal(map[string]any{"action": "accept", "content": content})
}

func typed(s, typ string) any {
	switch typ {
	case "boolean":
		switch strings.ToLower(s) {
		case "y", "yes", "true", "1":
			return true
		}
		return false
	case "number", "integer":
		var f float64
		if _, err := fmt.Sscan(s, &f); err == nil {
			return f
		}
	}
	return s
}

// fill asks for a workflow step's placeholder arguments.
func (a *asker) fill(ctx context.Context, step handoff.RemainingStep, placeholders []string) (map[string]any, error) {
	fmt.Fprintf(a.out, "\nStep %q: call %s", step.Name, step.Tool)
	if step.Guidance != "" {
		fmt.Fprintf(a.out, " — %s", step.Guidance)
	}
	fmt.Fprintln(a.out)
	out := map[string]any{}
	for _, name := range placeholders {
		var desc string
		_ = json.Unmarshal(step.Arguments[name], &desc)
		ans, err := a.ask(fmt.Sprintf("  %s %s:", name, desc))
		if err != nil {
			return nil, err
		}
		var v any
		if err := json.Unmarshal([]byte(ans), &v); err != nil {
			v = ans
		}
		out[name] = v
	}
	return out, nil
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
