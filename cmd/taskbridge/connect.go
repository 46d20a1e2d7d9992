package main

// Connecting to the server the global flags (or `ui`'s arguments) name,
// and telling "the server is not there" apart from "the server said no".

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
)

// globals are the flags before the command.
type globals struct {
	url, stdio, dialect string
	json                bool
	timeout             time.Duration
}

// resolve checks the connection flags.
func (g globals) resolve() (target, client.Dialect, error) {
	d, err := parseDialect(g.dialect)
	if err != nil {
		return target{}, 0, err
	}
	switch {
	case g.url != "" && g.stdio != "":
		return target{}, 0, usagef("give -url or -stdio, not both")
	case g.url != "":
		return target{url: g.url}, d, nil
	case g.stdio != "":
		return target{argv: strings.Fields(g.stdio)}, d, nil
	}
	return target{}, 0, usagef("give -url URL or -stdio \"COMMAND ARGS\"")
}

// parseDialect reads the -dialect flag.
func parseDialect(s string) (client.Dialect, error) {
	switch s {
	case "auto", "":
		return client.Auto, nil
	case "core":
		return client.Core, nil
	case "extension", "ext":
		return client.Extension, nil
	}
	return 0, usagef("-dialect must be auto, core or extension, not %q", s)
}

// target is the server to talk to: a Streamable HTTP endpoint, or a
// command to launch as a stdio server.
type target struct {
	url  string
	argv []string
}

// String names the target for messages.
func (t target) String() string {
	if t.url != "" {
		return t.url
	}
	return strings.Join(t.argv, " ")
}

// stdio reports whether the target is a launched command.
func (t target) stdio() bool { return t.url == "" }

func (t target) transport(stderr io.Writer) mcp.Transport {
	if t.url != "" {
		return client.HTTPTransport(t.url, nil)
	}
	cmd := exec.Command(t.argv[0], t.argv[1:]...)
	cmd.Stderr = stderr
	return &mcp.CommandTransport{Command: cmd}
}

// dial connects to the target. A server that cannot be reached is an
// *unreachableError that says why in words.
func dial(ctx context.Context, t target, d client.Dialect, h client.InputHandler, stderr io.Writer) (*client.Client, error) {
	if t.url == "" && len(t.argv) == 0 {
		return nil, usagef("no server to connect to")
	}
	c, err := client.Dial(ctx, t.transport(stderr), &client.Options{
		ClientInfo:   &mcp.Implementation{Name: "taskbridge-cli", Version: "0.1.0"},
		Dialect:      d,
		InputHandler: h,
	})
	if err == nil {
		return c, nil
	}
	var re *client.RPCError
	if errors.As(err, &re) && re.Code != codeRejectedByTransport {
		// The server answered: it is there, and said no.
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, &unreachableError{target: t, why: "no answer before the timeout"}
	}
	return nil, &unreachableError{target: t, why: diagnose(ctx, t, err)}
}

// codeRejectedByTransport is the JSON-RPC code go-sdk's transports give a
// request they could not deliver (the server is not there); the client
// package reports it as an *client.RPCError without the network error
// behind it.
const codeRejectedByTransport = -32005

// unreachableError means the server cannot be reached (exit status 3).
type unreachableError struct {
	target target
	why    string
}

func (e *unreachableError) Error() string {
	if e.target.stdio() {
		return fmt.Sprintf("cannot run %s: %s", e.target, e.why)
	}
	return fmt.Sprintf("cannot reach %s: %s", e.target, e.why)
}

// lostConnection turns an error that means the connection is gone (the
// transport could not deliver a request, the stdio server exited) into an
// *unreachableError; other errors are returned unchanged.
func lostConnection(c *client.Client, t target, err error) error {
	if err == nil {
		return nil
	}
	var re *client.RPCError
	rejected := errors.As(err, &re) && re.Code == codeRejectedByTransport
	closed := false
	select {
	case <-c.Done():
		closed = true
	default:
	}
	if !rejected && !closed {
		return err
	}
	return &unreachableError{target: t, why: "lost the connection to the server (" + strings.TrimPrefix(err.Error(), "client: ") + ")"}
}

// diagnose says in words why the target could not be reached. For an
// HTTP endpoint whose request never got through, it dials the host itself
// to tell a refused connection from an unknown host.
func diagnose(ctx context.Context, t target, err error) string {
	if t.stdio() {
		var ee *exec.Error
		switch {
		case errors.As(err, &ee):
			return ee.Err.Error()
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return "the command exited before answering (its output, if any, is above)"
		}
		return trimClient(err)
	}
	var re *client.RPCError
	if !errors.As(err, &re) {
		// The request got an answer that was not MCP (an HTTP error page).
		return trimClient(err) + " — is this the server's MCP endpoint?"
	}
	u, perr := url.Parse(t.url)
	if perr != nil || u.Host == "" {
		return "not a valid URL"
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	conn, derr := (&net.Dialer{}).DialContext(dctx, "tcp", host)
	if derr == nil {
		_ = conn.Close()
		return "the request did not get through"
	}
	var dnsErr *net.DNSError
	switch {
	case errors.Is(derr, syscall.ECONNREFUSED):
		return "connection refused — is the server running?"
	case errors.As(derr, &dnsErr):
		return "unknown host " + u.Hostname()
	case errors.Is(derr, context.DeadlineExceeded):
		return "no answer from " + host
	}
	return derr.Error()
}

// trimClient drops the "client: initialize: " prefixes the client package
// puts on handshake errors.
func trimClient(err error) string {
	s := err.Error()
	for trimmed := true; trimmed; {
		trimmed = false
		for _, p := range []string{"client: ", "initialize: ", "server/discover: ", "connecting: "} {
			if rest, ok := strings.CutPrefix(s, p); ok {
				s, trimmed = rest, true
			}
		}
	}
	return s
}
