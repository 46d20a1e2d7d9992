package workflow

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

// The derived version of a definition must not change when taskbridge
// does: a task recorded under it would find its version gone after an
// upgrade. The value was computed by the fingerprint before the step-kind
// contract existed.
func TestFingerprintStable(t *testing.T) {
	approved := Truthy(StepOutput("approve_rollout", "approved"))
	suite := func(name string) *Step {
		return Server(name, "run_suite").Bind("repo", PromptArg("repo")).Bind("version", PromptArg("version")).Bind("suite", Const(name)).WithRetry()
	}
	w := New("canary_release", "d").Arg("repo", "", true).Arg("version", "", true).Arg("soak_seconds", "", false).Step(
		Parallel("checks", suite("lint"), suite("unit"), suite("integration")).StopOnFailure(),
		SleepFor("soak", PromptArg("soak_seconds").WithDefault(30)),
		Client("approve_rollout", "approve_rollout").Bind("approved", FromClient("x")).Bind("reason", FromClient("y")).AcceptsWebhook(),
		Server("promote_release", "promote_release").When(approved).Bind("repo", PromptArg("repo")),
		Server("rollback_release", "rollback_release").Unless(approved).Bind("repo", PromptArg("repo")),
		Sleep("nap", 3*time.Second),
		SleepUntil("until", PromptArg("repo")),
		Event("go", "desc").WithPayload(map[string]any{"type": "object"}),
		Server("x", "t").As("out").When(All(Equal(PromptArg("repo"), "a"), Any(Falsy(TaskVar("v")), NotEqual(Const(1), 2)))),
	)
	require.Equal(t, "h9228e365f72e", fingerprint(w))
}

// engineFiles are the workflow package's files that are not a kind's:
// they must name no kind.
func engineFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var out []string
	for _, f := range files {
		switch {
		case strings.HasSuffix(f, "_test.go"), strings.HasPrefix(f, "kind_"), f == "kind.go", f == "call.go":
			continue
		}
		out = append(out, f)
	}
	require.NotEmpty(t, out)
	return out
}

// The engine's files call the contract and name no kind: no kind's type,
// constructor or Kind constant appears in them (comments aside). A new
// kind is its own file, its test, and one line in kinds.
func TestEngineNamesNoKind(t *testing.T) {
	forbidden := map[string]bool{}
	fset := token.NewFileSet()
	kindFiles, err := filepath.Glob("kind_*.go")
	require.NoError(t, err)
	for _, f := range append(kindFiles, "call.go") {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						forbidden[sp.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							if strings.HasPrefix(n.Name, "Kind") {
								forbidden[n.Name] = true
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil && ast.IsExported(d.Name.Name) { // a kind's constructor
					forbidden[d.Name.Name] = true
				}
			}
		}
	}
	delete(forbidden, "toolCall") // the tool kinds' shared part, which the engine runs attempts of
	delete(forbidden, "RetryPolicy")
	delete(forbidden, "FailurePolicy")
	delete(forbidden, "Condition") // the condition gate applies to every kind
	for _, fn := range []string{"Equal", "NotEqual", "Truthy", "Falsy", "Not", "All", "Any"} {
		delete(forbidden, fn)
	}
	require.Contains(t, forbidden, "SleepFor")
	require.Contains(t, forbidden, "sleep")
	require.Contains(t, forbidden, "Parallel")
	for _, f := range engineFiles(t) {
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		selected := map[*ast.Ident]bool{} // x.Name, a field's name, a key: a field, a method or another package's name
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				selected[n.Sel] = true
			case *ast.Field:
				for _, id := range n.Names {
					selected[id] = true
				}
			case *ast.KeyValueExpr:
				if id, ok := n.Key.(*ast.Ident); ok {
					selected[id] = true
				}
			}
			return true
		})
		ast.Inspect(file, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && forbidden[id.Name] && !selected[id] {
				t.Errorf("%s: the engine names the kind identifier %s; ask the kind contract instead", fset.Position(id.Pos()), id.Name)
			}
			return true
		})
	}
}

// instance's lock is taken in instance.go only.
func TestInstanceLockInOneFile(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if f == "instance.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, ".mu.Lock()") && !strings.Contains(line, "b.mu.Lock()") {
				t.Errorf("%s:%d: takes a lock outside instance.go: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// Every kind a progress may name implements the contract, and the kinds'
// names are the ones the progress and the handoff record.
func TestKindsList(t *testing.T) {
	var names []string
	for _, k := range kinds {
		names = append(names, string(k().name()))
	}
	require.Equal(t, []string{"tool", "tool", "group", "sleep", "event", "foreach", "loop", "child", "sampling", "question"}, names)
}

// TestKindsNamedInMcptask: every step kind's wire name and the name a
// person uses are in one table, mcptask's (mcptask.StepKinds,
// StepKind.Label), which the CLI, the terminal UI and the dashboard read:
// each kind this package registers is in it, it names none this package
// lacks, and each has a label of its own.
func TestKindsNamedInMcptask(t *testing.T) {
	var registered []mcptask.StepKind
	for _, k := range kinds {
		if n := k().name(); !slices.Contains(registered, n) {
			registered = append(registered, n)
		}
	}
	require.ElementsMatch(t, mcptask.StepKinds(), registered)
	labels := map[string]mcptask.StepKind{}
	for _, k := range mcptask.StepKinds() {
		l := k.Label()
		require.NotEmpty(t, l, k)
		require.NotContains(t, labels, l, "%s and %s share a label", k, labels[l])
		labels[l] = k
	}
	require.Equal(t, "for-each", mcptask.StepKindForEach.Label())
	require.Equal(t, "some new kind", mcptask.StepKind("some_new_kind").Label(), "a newer server's kind is named by its wire name")

	// The faces keep no table of their own: no label that differs from
	// its kind's wire name is spelled in their code.
	spelled := map[string]bool{}
	for l, k := range labels {
		if l != string(k) {
			spelled[`"`+l+`"`] = true
		}
	}
	fset := token.NewFileSet()
	for _, dir := range []string{"../cmd", "../dashboard", "../client"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && spelled[lit.Value] {
					t.Errorf("%s spells the kind label %s: use mcptask.StepKind.Label", fset.Position(lit.Pos()), lit.Value)
				}
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}
}

// A handler knows which task, step and attempt it runs for, for a server
// step (its retries counted) and for a client step a continuation
// performs.
func TestHandlersKnowWhereTheyAre(t *testing.T) {
	e := newFakeEngine()
	var mu sync.Mutex
	var seen []StepInfo
	record := func(ctx context.Context) {
		info, ok := StepFrom(ctx)
		require.True(t, ok)
		mu.Lock()
		seen = append(seen, info)
		mu.Unlock()
	}
	fails := 1
	e.tool("flaky", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		record(ctx)
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "try again"}}}, nil
		}
		return ok(map[string]any{"ok": true}), nil
	})
	e.tool("ask", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		record(ctx)
		return ok(map[string]any{"answer": args["a"]}), nil
	})
	w := New("where", "").Step(
		Server("flaky", "flaky").WithRetryPolicy(RetryPolicy{MaxAttempts: 3, Backoff: time.Millisecond}),
		Client("ask", "ask").Bind("a", FromClient("anything")),
	)
	f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, w)
	tk, _ := f.start(t, "where", nil)
	require.Eventually(t, func() bool {
		e.advance(time.Second) // the retry's backoff, on the fake clock
		e.wakeDue(t)
		_, p := f.task(t, tk.ID)
		return p.step("ask").Status == mcptask.StepAwaitingClient
	}, 30*time.Second, 10*time.Millisecond)
	_, err := f.call(t, tk.ID, "ask", map[string]any{"a": 1})
	require.NoError(t, err)
	_, found := StepFrom(context.Background())
	require.False(t, found, "a call that performs no step has no StepInfo")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []StepInfo{
		{TaskID: tk.ID, Step: "flaky", Attempt: 1, IdempotencyKey: tk.ID + "/flaky", By: string(mcptask.ExecServer)},
		{TaskID: tk.ID, Step: "flaky", Attempt: 2, IdempotencyKey: tk.ID + "/flaky", By: string(mcptask.ExecServer)},
		{TaskID: tk.ID, Step: "ask", Attempt: 1, IdempotencyKey: tk.ID + "/ask", By: string(mcptask.ExecClient)},
	}, seen)
}

// A step of a group that fails fast stops the others, and the stored
// progress records them cancelled (not running in a failed task).
func TestFailFastRecordsStoppedMembersCancelled(t *testing.T) {
	e := newFakeEngine()
	g := newGate()
	e.tool("lint", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		g.waitStarted(t, 2)
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "lint failed"}}}, nil
	})
	e.tool("unit", g.tool("unit"))
	e.tool("integration", g.tool("integration"))
	echoTools(e, "report")
	w := checks()
	w.Steps[0].StopOnFailure()
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f.start(t, "ci", nil)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Equal(t, mcptask.StepFailed, p.step("lint").Status)
	for _, name := range []string{"unit", "integration"} {
		sp := p.step(name)
		require.Equal(t, mcptask.StepCancelled, sp.Status, name)
		require.Contains(t, sp.SkipReason, `group "checks" failed`)
		require.Equal(t, OutcomeCancelled, sp.History[len(sp.History)-1].Outcome)
	}
	require.Equal(t, mcptask.StepPending, p.step("report").Status)
	require.True(t, slices.Contains(p.RemainingSteps, "report"))
	require.False(t, slices.Contains(p.RemainingSteps, "unit"))
}
