// Package tui is the terminal UI of the taskbridge CLI (`taskbridge ui`):
// a bubbletea program on the project's client package that lists a
// server's tools and prompts, calls tools as tasks with forms built from
// their input schemas, follows task-aware workflow prompts step by step,
// and keeps a live table of the tasks it started or opened, in either MCP
// tasks dialect.
//
// The program has three tabs (Tools, Prompts, Tasks), a status line that
// always counts the tasks that are working or need input, and key help on
// "?". Everything the UI waits for (task status, results, input requests)
// arrives on one channel that the model reads with a command, so the
// model itself is only ever touched by bubbletea's update loop.
package tui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
)

// Options configure a UI.
type Options struct {
	// Target names the server in the header (a URL or a command line).
	Target string
	// NoColor renders without colours (NO_COLOR): states keep their
	// symbols and words, selection its marker and reverse video.
	NoColor bool
	// History, when set, is the local task history: the Tasks tab starts
	// with the tasks it remembers for Target (the most recent
	// maxHistoryRows), names tasks opened by id or listed by the server
	// from it, and every task the UI creates or opens is recorded in it.
	History *history.History
}

// UI is one terminal UI session. Create it with New before dialling, so
// that its InputHandler can be given to client.Dial; then Run it on the
// connected client.
type UI struct {
	opts   Options
	bus    chan tea.Msg
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	wg     sync.WaitGroup // the goroutines of spawn
}

// New returns a UI that is not running yet.
func New(opts Options) *UI {
	ctx, cancel := context.WithCancel(context.Background())
	return &UI{opts: opts, bus: make(chan tea.Msg, 256), ctx: ctx, cancel: cancel}
}

// closeWait bounds how long Close waits for the UI's requests to end.
const closeWait = 2 * time.Second

// Close stops everything the UI started (watchers, calls, pending
// questions) and waits a moment for their requests to end, so that the
// client can then close without leaving the server a request it still
// serves (their cancellation must reach the server first). Run closes the
// UI when the program ends; close the client after the UI.
func (u *UI) Close() {
	u.once.Do(func() {
		u.cancel()
		done := make(chan struct{})
		go func() {
			u.wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(closeWait):
		}
	})
}

// spawn runs f on a goroutine that Close waits for; f must end soon after
// the UI's context ends.
func (u *UI) spawn(f func()) {
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		f()
	}()
}

// send delivers a message to the model, unless the UI has closed.
func (u *UI) send(msg tea.Msg) {
	select {
	case u.bus <- msg:
	case <-u.ctx.Done():
	}
}

// busMsg wraps a message that arrived on the bus, so the model knows to
// listen again.
type busMsg struct{ msg tea.Msg }

// listen is the command that waits for the next bus message.
func (u *UI) listen() tea.Msg {
	select {
	case msg := <-u.bus:
		return busMsg{msg}
	case <-u.ctx.Done():
		return nil
	}
}

// ErrClosed is the error an input request gets when the UI closes before
// the user answered it.
var ErrClosed = errors.New("tui: the terminal UI closed")

// inputAsk is an input request (an elicitation) waiting for the user.
type inputAsk struct {
	taskID string
	p      *mcp.ElicitParams // the elicitation, decoded once by InputHandler
	reply  chan inputReply
}

type inputReply struct {
	res json.RawMessage
	err error
}

// InputHandler answers the input requests tasks make (give it to
// client.Options): an elicitation is shown as a form, and the call blocks
// until the user submits (accept) or presses esc (decline). Other requests
// (sampling, roots) are refused.
func (u *UI) InputHandler(ctx context.Context, taskID string, req client.InputRequest) (json.RawMessage, error) {
	p, err := req.Elicitation()
	if err != nil {
		return nil, fmt.Errorf("tui: cannot answer %s", req.Method)
	}
	ask := &inputAsk{taskID: taskID, p: p, reply: make(chan inputReply, 1)}
	u.send(ask)
	select {
	case r := <-ask.reply:
		return r.res, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-u.ctx.Done():
		return nil, ErrClosed
	}
}

// Model returns the bubbletea model of the UI on the connected client.
func (u *UI) Model(c *client.Client) *Model { return newModel(u, c) }

// Run runs the UI full-screen on in and out until the user quits or ctx
// ends, then closes the UI.
func (u *UI) Run(ctx context.Context, c *client.Client, in io.Reader, out io.Writer) error {
	defer u.Close()
	p := tea.NewProgram(u.Model(c), tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out))
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}
