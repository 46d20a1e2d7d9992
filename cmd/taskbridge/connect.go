package main

// Connecting to the server the global flags (or `ui`'s arguments) name,
// and telling "the server is not there" apart from "the server said no".

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/mcptask"
)

// EnvToken is the environment variable -token defaults to.
const EnvToken = "TASKBRIDGE_TOKEN"

// globals are the flags before the command.
type globals struct {
	url, stdio, dialect string
	json                bool
	timeout             time.Duration
	// token is the bearer token of an HTTP server (-token, or
	// $TASKBRIDGE_TOKEN); headers are the -header K=V values.
	token   string
	headers headerFlag
	// explicit names the flags given on the command line.
	explicit map[string]bool
}

// register defines the global flags on fs.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.url, "url", "", "Streamable HTTP endpoint")
	fs.StringVar(&g.stdio, "stdio", "", "command line of a stdio server to launch")
	fs.StringVar(&g.dialect, "dialect", "auto", "auto, core or extension")
	fs.BoolVar(&g.json, "json", false, "JSON lines output")
	fs.DurationVar(&g.timeout, "timeout", 5*time.Minute, "overall timeout")
	fs.StringVar(&g.token, "token", os.Getenv(EnvToken), "bearer token (HTTP)")
	fs.Var(&g.headers, "header", "HTTP header K=V (repeatable)")
}

// noteExplicit records which flags of fs the command line set.
func (g *globals) noteExplicit(fs *flag.FlagSet) {
	if g.explicit == nil {
		g.explicit = map[string]bool{}
	}
	fs.Visit(func(f *flag.Flag) { g.explicit[f.Name] = true })
}

// headerFlag is the repeatable -header K=V flag.
type headerFlag []string

func (h *headerFlag) String() string { return strings.Join(*h, ", ") }

func (h *headerFlag) Set(v string) error {
	k, _, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want K=V, not %q", v)
	}
	*h = append(*h, v)
	return nil
}

// httpHeader turns the -token and -header flags into request headers.
func (g globals) httpHeader() http.Header {
	if g.token == "" && len(g.headers) == 0 {
		return nil
	}
	h := http.Header{}
	if g.token != "" {
		h.Set("Authorization", "Bearer "+g.token)
	}
	for _, kv := range g.headers {
		k, v, _ := strings.Cut(kv, "=")
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return h
}

// resolve checks the connection flags.
func (g globals) resolve() (target, mcptask.Dialect, error) {
	d, err := parseDialect(g.dialect)
	if err != nil {
		return target{}, 0, err
	}
	switch {
	case g.url != "" && g.stdio != "":
		return target{}, 0, usagef("give -url or -stdio, not both")
	case g.url != "":
		return target{url: g.url, header: g.httpHeader()}, d, nil
	case g.stdio != "":
		if g.explicit["token"] || g.explicit["header"] {
			return target{}, 0, usagef("-token and -header are for -url (HTTP); a stdio server has no HTTP headers")
		}
		return target{argv: strings.Fields(g.stdio)}, d, nil
	}
	return target{}, 0, usagef("give -url URL or -stdio \"COMMAND ARGS\"")
}

// parseDialect reads the -dialect flag: auto (or empty), or a dialect
// name mcptask.ParseDialect reads.
func parseDialect(s string) (mcptask.Dialect, error) {
	if s == "auto" || s == "" {
		return client.Auto, nil
	}
	d, err := mcptask.ParseDialect(s)
	if err != nil {
		return 0, usagef("-dialect must be auto, core or extension, not %q", s)
	}
	return d, nil
}

// target is the server to talk to: a Streamable HTTP endpoint (with the
// headers every request carries), or a command to launch as a stdio
// server.
type target struct {
	url    string
	header http.Header
	argv   []string
}

// String names the target for messages.
func (t target) String() string {
	if t.url != "" {
		return t.url
	}
	return strings.Join(t.argv, " ")
}

// flags are the connection flags that name the target again, for a
// command line to show the user (the credentials are left out).
func (t target) flags() string {
	if t.url != "" {
		return "-url " + shellQuote(t.url)
	}
	return "-stdio " + shellQuote(strings.Join(t.argv, " "))
}

// shellQuote quotes a command line for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t'\"\\$`!*?[]{}()<>|&;~#") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// stdio reports whether the target is a launched command.
func (t target) stdio() bool { return t.url == "" }

// transport returns the MCP transport to the target, and for HTTP the
// round tripper that adds the headers and notes a refusal of them.
func (t target) transport(stderr io.Writer) (mcp.Transport, *authTransport) {
	if t.url != "" {
		at := &authTransport{header: t.header, next: http.DefaultTransport}
		return client.HTTPTransport(t.url, &http.Client{Transport: at}), at
	}
	cmd := exec.Command(t.argv[0], t.argv[1:]...)
	cmd.Stderr = stderr
	return &mcp.CommandTransport{Command: cmd}, nil
}

// authTransport adds the -token and -header headers to every HTTP request
// and remembers the last 401 or 403 answer, so that a refused credential
// is reported as such rather than as an unreachable server.
type authTransport struct {
	header  http.Header
	next    http.RoundTripper
	refused atomic.Int32 // the HTTP status of the last refusal
}

func (a *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(a.header) > 0 {
		req = req.Clone(req.Context())
		for k, vs := range a.header {
			req.Header.Del(k)
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
	}
	res, err := a.next.RoundTrip(req)
	if err == nil && (res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden) {
		a.refused.Store(int32(res.StatusCode))
	}
	return res, err
}

// refusal returns the *authError of the last refused request, or nil.
func (a *authTransport) refusal() error {
	if a == nil {
		return nil
	}
	if code := a.refused.Load(); code != 0 {
		return &authError{status: int(code), sent: a.header.Get("Authorization") != ""}
	}
	return nil
}

// authError means the server refused the credentials (HTTP 401 or 403):
// exit status 3, like an unreachable server, with its own message.
type authError struct {
	status int
	sent   bool // a token (an Authorization header) was sent
}

func (e *authError) Error() string {
	hint := "pass -token TOKEN (or set " + EnvToken + "), or -header for other credentials"
	if e.sent {
		hint = "check the token given with -token (or " + EnvToken + ")"
		if e.status == http.StatusForbidden {
			hint = "the token is valid but not allowed here"
		}
	}
	return fmt.Sprintf("the server refused the credentials (HTTP %d %s): %s", e.status, http.StatusText(e.status), hint)
}

// conn is a connection to the server the command line names.
type conn struct {
	*client.Client
	target target
	auth   *authTransport // HTTP only
}

// dial connects to the target. A server that cannot be reached is an
// *unreachableError that says why in words; one that refuses the
// credentials is an *authError.
func dial(ctx context.Context, t target, d mcptask.Dialect, h client.InputHandler, stderr io.Writer) (*conn, error) {
	if t.url == "" && len(t.argv) == 0 {
		return nil, usagef("no server to connect to")
	}
	tr, at := t.transport(stderr)
	c, err := client.Dial(ctx, tr, &client.Options{
		ClientInfo:   &mcp.Implementation{Name: "taskbridge-cli", Version: "0.2.0"},
		Dialect:      d,
		InputHandler: h,
	})
	if err == nil {
		return &conn{Client: c, target: t, auth: at}, nil
	}
	if aerr := at.refusal(); aerr != nil {
		return nil, aerr
	}
	var re *client.RPCError
	if errors.As(err, &re) && re.Code != codeRejectedByTransport {
		// The server answered: it is there, and said no.
		return nil, err
	}
	if ctx.Err() != nil {
		if errors.Is(context.Cause(ctx), errInterrupted) {
			return nil, &interruptedError{}
		}
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
// *unreachableError, or an *authError when the server refused the
// credentials; other errors are returned unchanged.
func lostConnection(c *conn, err error) error {
	if err == nil {
		return nil
	}
	t := c.target
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
	if aerr := c.auth.refusal(); aerr != nil {
		return aerr
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
