package integration

// First contact (issue 28, item 6): what a newcomer does first works as
// the README says. The README's host configs start example 62 on a fresh
// machine; the webhook handler works mounted as documented (under any
// prefix, as it is, or behind http.StripPrefix); a webhook that performs a
// client step sends only what the handoff leaves open.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/workflow"
)

// readmeHostConfigs returns every MCP host config of the README: its JSON
// blocks (the "mcpServers" of Claude Desktop, Cursor and their kin, the
// "servers" of VS Code) and its "claude mcp add NAME -- COMMAND ARGS"
// lines (Claude Code's CLI): the command and its arguments of each server.
func readmeHostConfigs(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	out := map[string][]string{}
	for _, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		var cfg map[string]map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		}
		if json.Unmarshal([]byte(m[1]), &cfg) != nil {
			continue
		}
		for _, key := range []string{"mcpServers", "servers"} {
			for name, s := range cfg[key] {
				if s.Command != "" {
					out[key+"."+name] = append([]string{s.Command}, s.Args...)
				}
			}
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^claude mcp add (\S+) -- (.+)$`).FindAllStringSubmatch(string(raw), -1) {
		out["claude."+m[1]] = strings.Fields(m[2])
	}
	return out
}

// The README's host configs work on a fresh machine as written: each
// starts example 62 over stdio from a home with no ~/.taskbridge (the
// server creates it), and a host lists the tools and runs a workflow.
func TestFirstContactREADMEHostConfig(t *testing.T) {
	configs := readmeHostConfigs(t)
	require.Len(t, configs, 3, "the README's host configs: %v", configs)
	bin := exampleBinary(t, "./examples/62_tasks_workflow")
	for name, argv := range configs {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir() // a fresh machine: nothing under it
			for i, a := range argv {
				if a == "/home/me/bin/taskbridge-62" {
					a = bin // what `go build -o ~/bin/taskbridge-62` made
				}
				argv[i] = strings.ReplaceAll(a, "/home/me", home)
			}
			require.Equal(t, bin, argv[0], "the config runs the binary the README builds: %q", argv)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = t.TempDir() // hosts start servers from a directory of their own
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
			require.NoError(t, err, "the server did not start: %q", argv)
			defer cs.Close()
			tools, err := sdkHost{cs}.listTools(ctx)
			require.NoError(t, err)
			require.NotEmpty(t, tools)
			text, isError := hostCall(t, cs, "release_notes", map[string]any{"repo": "acme"})
			require.False(t, isError, text)
			require.Contains(t, text, `Next: step "review" is yours to perform now.`)
			require.DirExists(t, filepath.Join(home, ".taskbridge"))
		})
	}
}

type signIn struct {
	Text   string `json:"text" jsonschema:"the text to sign"`
	Signer string `json:"signer" jsonschema:"who signs"`
}

type signOut struct {
	Signed string `json:"signed"`
}

// The webhook handler works mounted as the docs show, under any prefix
// (mux.Handle("/hooks/", h), a deeper one, or behind http.StripPrefix),
// and a webhook that performs a client step sends only the value the
// handoff leaves open: the server adds the text it resolved.
func TestFirstContactWebhook(t *testing.T) {
	var mu sync.Mutex
	var signed []signIn
	b := builder.New("hooks", "1").WithDB(filepath.Join(t.TempDir(), "tasks.db")).WithoutEnv()
	builder.Tool(b, &mcp.Tool{Name: "draft"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, map[string]string, error) {
		return nil, map[string]string{"text": "the release notes"}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "sign"}, func(ctx context.Context, _ *mcp.CallToolRequest, in signIn) (*mcp.CallToolResult, signOut, error) {
		mu.Lock()
		signed = append(signed, in)
		mu.Unlock()
		return nil, signOut{Signed: in.Text + " -- " + in.Signer}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("sign_off", "draft, then a person signs").Step(
		workflow.Server("draft", "draft"),
		workflow.Client("sign", "sign").
			Bind("text", workflow.StepOutput("draft", "text")).
			Bind("signer", workflow.FromClient("who signs")).
			AcceptsWebhook(),
	).AsTool())
	mux := http.NewServeMux()
	ts := httptest.NewServer(mux)
	defer ts.Close()
	srv, err := b.WithWorkflowOptions(workflow.Options{WebhookURL: ts.URL + "/hooks"}).Build(context.Background())
	require.NoError(t, err)
	defer srv.Close()
	hooks := srv.Bridge.WebhookHandler()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	mux.Handle("/hooks/", hooks)                                   // as it is
	mux.Handle("/api/v1/hooks/", hooks)                            // a deeper prefix
	mux.Handle("/stripped/", http.StripPrefix("/stripped", hooks)) // behind StripPrefix

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "program", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp"}, nil)
	require.NoError(t, err)
	defer cs.Close()
	for i, prefix := range []string{"/hooks", "/api/v1/hooks", "/stripped"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sign_off", Arguments: map[string]any{}})
		require.NoError(t, err)
		doc, err := handoff.FromToolResult(res)
		require.NoError(t, err)
		sign := doc.RemainingSteps[0]
		require.NotNil(t, sign.Webhook, "the handoff gives the step's webhook")
		require.Equal(t, ts.URL+"/hooks/"+doc.TaskID+"/sign", sign.Webhook.URL)
		require.Equal(t, []handoff.Fill{{Name: "signer", Type: "string", Description: "who signs"}}, sign.Call.Fill, "the handoff leaves only the signer open")

		who := fmt.Sprintf("signer %d", i)
		req, err := http.NewRequest(http.MethodPost, ts.URL+prefix+"/"+doc.TaskID+"/sign", strings.NewReader(`{"signer": "`+who+`"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+sign.Webhook.Token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "POST %s: %s", prefix, body)
		var out map[string]any
		require.NoError(t, json.Unmarshal(body, &out))
		require.Equal(t, "completed", out["status"], "%s", body)
		require.Equal(t, false, out["isError"], "%s", body)
		mu.Lock()
		require.Equal(t, signIn{Text: "the release notes", Signer: who}, signed[len(signed)-1], "the server added the text it resolved")
		mu.Unlock()
	}
	resp, err := http.Post(ts.URL+"/hooks/only-one-segment", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
