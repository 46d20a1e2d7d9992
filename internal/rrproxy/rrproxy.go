// Package rrproxy is a small reverse proxy that spreads MCP Streamable
// HTTP requests over several server replicas, for trying replicas out and
// for tests.
//
// A request without an Mcp-Session-Id header goes to the next backend in
// round-robin order. A request with one goes to the backend that issued
// that session: the proxy learns the mapping from the Mcp-Session-Id
// header of the response that created it (usually the answer to
// initialize) and forgets it when a DELETE for it succeeds or the backend
// answers 404 for it (the session is gone). A session id the proxy does
// not know is sent round-robin (a backend that does not hold it answers
// 404, which tells the client to start a new session).
//
// A backend that refuses the connection (nothing was sent to it) is
// skipped: the request goes to the next one, and the proxy answers 502 Bad
// Gateway when every backend refused. A session whose backend refuses the
// connection is forgotten and answered 404 Not Found, which tells an MCP
// client to start a new session (on another replica).
//
// Responses stream through unbuffered: every write of the backend (each
// server-sent event) is flushed to the client at once. Headers pass both
// ways, except hop-by-hop ones; request bodies are read in full first (so
// that a refused request can go to the next backend), up to MaxBodyBytes.
package rrproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// SessionHeader is the MCP Streamable HTTP session header.
const SessionHeader = "Mcp-Session-Id"

// MaxBodyBytes bounds a request body the proxy forwards.
const MaxBodyBytes = 32 << 20

// ErrAllRefused is the error behind a 502 answer: every backend refused the
// connection.
var ErrAllRefused = errors.New("rrproxy: every backend refused the connection")

// Proxy is an http.Handler that spreads requests over backends; see the
// package documentation. It is safe for concurrent use.
type Proxy struct {
	backends []*url.URL
	rp       *httputil.ReverseProxy
	next     atomic.Uint64
	served   []atomic.Int64

	mu       sync.Mutex
	sessions map[string]int // session id -> backend index
}

// New returns a proxy for the backends, given as base URLs
// ("http://127.0.0.1:8081"): a request for /mcp goes to the backend's URL
// with /mcp appended to its path.
func New(backends ...string) (*Proxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("rrproxy: no backends")
	}
	p := &Proxy{sessions: make(map[string]int), served: make([]atomic.Int64, len(backends))}
	for _, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("rrproxy: backend %q: %w", b, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("rrproxy: backend %q: want an http:// or https:// URL", b)
		}
		p.backends = append(p.backends, u)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	// Keep enough idle connections per replica for many concurrent
	// clients; the default two makes a busy proxy dial (and leave a
	// TIME-WAIT socket) for almost every request.
	transport.MaxIdleConns, transport.MaxIdleConnsPerHost = 1024, 256
	p.rp = &httputil.ReverseProxy{
		// Rewrite leaves the URL to RoundTrip, which picks the backend;
		// it keeps the inbound headers (no X-Forwarded-*).
		Rewrite:       func(*httputil.ProxyRequest) {},
		Transport:     &balancer{p: p, rt: transport},
		FlushInterval: -1, // flush every write: streams must not wait in a buffer
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			code := http.StatusBadGateway
			if errors.Is(err, errTooLarge) {
				code = http.StatusRequestEntityTooLarge
			}
			if errors.Is(err, context.Canceled) {
				return // the client went away
			}
			http.Error(w, err.Error(), code)
		},
	}
	return p, nil
}

// ServeHTTP forwards r to a backend.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.rp.ServeHTTP(w, r) }

// Backends returns the backends' base URLs, in the order New got them.
func (p *Proxy) Backends() []string {
	out := make([]string, len(p.backends))
	for i, u := range p.backends {
		out[i] = u.String()
	}
	return out
}

// Served returns, per backend (in the order New got them), how many
// requests it answered (with any status).
func (p *Proxy) Served() []int64 {
	out := make([]int64, len(p.served))
	for i := range p.served {
		out[i] = p.served[i].Load()
	}
	return out
}

// SessionBackend reports which backend (an index into Backends) holds the
// session id, if the proxy knows it.
func (p *Proxy) SessionBackend(id string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.sessions[id]
	return i, ok
}

func (p *Proxy) forget(id string) {
	p.mu.Lock()
	delete(p.sessions, id)
	p.mu.Unlock()
}

func (p *Proxy) learn(id string, backend int) {
	p.mu.Lock()
	p.sessions[id] = backend
	p.mu.Unlock()
}

var errTooLarge = fmt.Errorf("rrproxy: request body over %d bytes", MaxBodyBytes)

// balancer is the proxy's transport: it sends each outbound request to a
// backend, trying the next one when the connection is refused.
type balancer struct {
	p  *Proxy
	rt http.RoundTripper
}

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	p := b.p
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(io.LimitReader(req.Body, MaxBodyBytes+1))
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		if len(body) > MaxBodyBytes {
			return nil, errTooLarge
		}
	}
	sid := req.Header.Get(SessionHeader)
	if sid != "" {
		if i, ok := p.SessionBackend(sid); ok {
			resp, err := b.send(req, body, i)
			if refused(err) {
				p.forget(sid)
				return sessionGone(req, sid), nil
			}
			if err != nil {
				return nil, err
			}
			if resp.StatusCode == http.StatusNotFound ||
				(req.Method == http.MethodDelete && resp.StatusCode/100 == 2) {
				p.forget(sid)
			}
			return resp, nil
		}
	}
	n := len(p.backends)
	start := int(p.next.Add(1)-1) % n
	for k := range n {
		i := (start + k) % n
		resp, err := b.send(req, body, i)
		if refused(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// A successful answer that names a session (initialize's) means
		// this backend holds it.
		if id := resp.Header.Get(SessionHeader); id != "" && resp.StatusCode/100 == 2 && req.Method != http.MethodDelete {
			p.learn(id, i)
		}
		return resp, nil
	}
	return nil, ErrAllRefused
}

// send sends req, with body, to backend i and counts the answer.
func (b *balancer) send(req *http.Request, body []byte, i int) (*http.Response, error) {
	out := req.Clone(req.Context())
	u := b.p.backends[i]
	out.URL.Scheme, out.URL.Host = u.Scheme, u.Host
	out.URL.Path = joinPath(u.Path, req.URL.Path)
	out.URL.RawPath = ""
	out.Host = "" // the backend's host, not the proxy's
	if body != nil {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	} else {
		out.Body = nil
	}
	resp, err := b.rt.RoundTrip(out)
	if err == nil {
		b.p.served[i].Add(1)
	}
	return resp, err
}

func joinPath(base, p string) string {
	if base == "" || base == "/" {
		return p
	}
	return strings.TrimSuffix(base, "/") + "/" + strings.TrimPrefix(p, "/")
}

// refused reports whether err means the backend refused the connection, so
// that nothing of the request reached it.
func refused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// sessionGone is the answer for a session whose backend is gone: 404, as
// an MCP server answers for a session it does not know.
func sessionGone(req *http.Request, sid string) *http.Response {
	msg := fmt.Sprintf("rrproxy: the backend of session %s refused the connection; start a new session\n", sid)
	return &http.Response{
		StatusCode:    http.StatusNotFound,
		Status:        "404 Not Found",
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:          io.NopCloser(strings.NewReader(msg)),
		ContentLength: int64(len(msg)),
		Request:       req,
	}
}

// Server is a Proxy listening on a loopback address.
type Server struct {
	*Proxy
	// URL is the proxy's base URL, "http://127.0.0.1:PORT".
	URL string

	hs   *http.Server
	done chan error
}

// Listen starts a proxy for backends on addr, which must be a loopback
// address ("" means 127.0.0.1 on a free port), and serves it until Close.
func Listen(addr string, backends ...string) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("rrproxy: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("rrproxy: address %q: listen on a loopback address such as 127.0.0.1", addr)
	}
	p, err := New(backends...)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Proxy: p,
		URL:   "http://" + ln.Addr().String(),
		hs:    &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second},
		done:  make(chan error, 1),
	}
	go func() { s.done <- s.hs.Serve(ln) }()
	return s, nil
}

// Close stops listening and closes every connection, streams included.
func (s *Server) Close() error {
	err := s.hs.Close()
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
