package tui

import (
	"context"
	"github.com/taskbridge/taskbridge/mcptask"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
)

// harness drives a Model the way bubbletea does: every command runs on its
// own goroutine and its message comes back through one channel, which the
// test pumps into Update until the view shows what it waits for. Nothing
// but the test goroutine touches the model.
type harness struct {
	t    *testing.T
	ui   *UI
	c    *client.Client
	m    *Model
	msgs chan tea.Msg
	done chan struct{}
	quit bool
}

const waitFor = 30 * time.Second

func newHarness(t *testing.T, url string, d mcptask.Dialect, noColor bool) *harness {
	t.Helper()
	return newHarnessWith(t, url, d, Options{NoColor: noColor})
}

// newHarnessWith is newHarness with more options (Target is url).
func newHarnessWith(t *testing.T, url string, d mcptask.Dialect, opts Options) *harness {
	t.Helper()
	opts.Target = url
	u := New(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.HTTPTransport(url, nil), &client.Options{Dialect: d, InputHandler: u.InputHandler})
	require.NoError(t, err)
	h := &harness{t: t, ui: u, c: c, m: u.Model(c), msgs: make(chan tea.Msg, 64), done: make(chan struct{})}
	t.Cleanup(func() {
		close(h.done)
		u.Close()
		_ = c.Close()
	})
	h.process(tea.WindowSizeMsg{Width: 80, Height: 24})
	h.run(h.m.Init())
	h.until("tools and prompts loaded", func(string) bool { return h.m.tools.loaded && h.m.prompts.loaded })
	return h
}

func (h *harness) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	go func() {
		msg := cmd()
		select {
		case h.msgs <- msg:
		case <-h.done:
		}
	}()
}

func (h *harness) process(msg tea.Msg) {
	switch msg := msg.(type) {
	case nil:
		return
	case tea.BatchMsg:
		for _, c := range msg {
			h.run(c)
		}
		return
	case tea.QuitMsg:
		h.quit = true
		return
	}
	_, cmd := h.m.Update(msg)
	h.run(cmd)
}

// drain processes the messages that are already there.
func (h *harness) drain() {
	for {
		select {
		case msg := <-h.msgs:
			h.process(msg)
		default:
			return
		}
	}
}

// keyMsg builds the key press bubbletea reports for a key name.
func keyMsg(k string) tea.KeyPressMsg {
	switch k {
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "tab":
		return tea.KeyPressMsg{Code: tea.KeyTab}
	case "shift+tab":
		return tea.KeyPressMsg{Code: tea.KeyTab, Mod: tea.ModShift}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	case "pgdown":
		return tea.KeyPressMsg{Code: tea.KeyPgDown}
	case "pgup":
		return tea.KeyPressMsg{Code: tea.KeyPgUp}
	}
	if len([]rune(k)) > 1 && !strings.HasPrefix(k, "ctrl+") {
		panic("keyMsg: unknown key name " + k)
	}
	if c, ok := strings.CutPrefix(k, "ctrl+"); ok {
		return tea.KeyPressMsg{Code: rune(c[0]), Mod: tea.ModCtrl}
	}
	r := []rune(k)
	return tea.KeyPressMsg{Code: r[0], Text: k}
}

// keys presses named keys ("enter", "ctrl+s", "q", …).
func (h *harness) keys(ks ...string) {
	h.t.Helper()
	for _, k := range ks {
		msg := keyMsg(k)
		require.Equal(h.t, k, msg.String(), "key name round trip")
		h.process(msg)
		h.drain()
	}
}

// typ types text, one key press per character.
func (h *harness) typ(s string) {
	for _, r := range s {
		h.process(tea.KeyPressMsg{Code: r, Text: string(r)})
	}
	h.drain()
}

// view renders the model without ANSI codes, checking that it fills the
// 80x24 screen exactly.
func (h *harness) view() string {
	h.t.Helper()
	v := ansi.Strip(h.m.View().Content)
	lines := strings.Split(v, "\n")
	require.Len(h.t, lines, h.m.height, "the view fills the screen's height")
	for i, l := range lines {
		require.LessOrEqual(h.t, ansi.StringWidth(l), h.m.width, "line %d is too wide: %q", i, l)
	}
	return v
}

// until pumps messages until cond holds for the view (or the test fails
// after waitFor).
func (h *harness) until(what string, cond func(view string) bool) string {
	h.t.Helper()
	deadline := time.After(waitFor)
	for {
		h.drain()
		v := h.view()
		if cond(v) {
			return v
		}
		select {
		case msg := <-h.msgs:
			h.process(msg)
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			h.t.Fatalf("waited %v for %s; the screen shows:\n%s", waitFor, what, v)
		}
	}
}

// see waits until the view contains every one of texts.
func (h *harness) see(texts ...string) string {
	h.t.Helper()
	return h.until(strings.Join(texts, " + "), func(v string) bool {
		for _, s := range texts {
			if !strings.Contains(v, s) {
				return false
			}
		}
		return true
	})
}

// selectTool moves the Tools tab's selection to the named tool.
func (h *harness) selectTool(name string) {
	h.t.Helper()
	h.keys("1")
	for range len(h.m.tools.list) {
		if h.m.tools.list[h.m.tools.sel].Name == name {
			return
		}
		h.keys("down")
	}
	h.t.Fatalf("no tool %q", name)
}

// dialects runs f in both dialects.
func dialects(t *testing.T, f func(t *testing.T, d mcptask.Dialect)) {
	for _, d := range []mcptask.Dialect{mcptask.Core, mcptask.Extension} {
		t.Run(d.String(), func(t *testing.T) { f(t, d) })
	}
}

func teaSize(w, h int) tea.WindowSizeMsg { return tea.WindowSizeMsg{Width: w, Height: h} }
