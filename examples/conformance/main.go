// Command conformance serves the tools that the official MCP conformance
// suite's tasks scenarios call, built on taskbridge, over Streamable HTTP at
// /mcp. The same tools work in both wire dialects: 2026-07-28 clients get the
// io.modelcontextprotocol/tasks extension, 2025-11-25 clients get core tasks.
//
//	go run ./examples/conformance -http 127.0.0.1:3001 [-db tasks.db]
//
// -db also takes a postgres:// DSN, as example 62's does: several
// processes on one database are replicas of one server (give each its own
// TASKBRIDGE_REPLICA_ID), for example behind a round-robin proxy.
//
// Then, from a checkout of modelcontextprotocol/conformance:
//
//	node dist/index.js server --url http://127.0.0.1:3001/mcp --scenario tasks-lifecycle
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/examples/conformance/conftools"
	"github.com/taskbridge/taskbridge/internal/gcpolicy"
	"github.com/taskbridge/taskbridge/internal/tokenauth"
	"github.com/taskbridge/taskbridge/taskrouter"
)

func main() {
	gcpolicy.Apply() // GOGC=400 unless the environment sets GOGC (see README, Performance)
	addr := flag.String("http", "127.0.0.1:3001", "listen address (loopback) for Streamable HTTP at /mcp")
	dbPath := flag.String("db", "", "store: a bbolt file, or a postgres:// DSN (several replicas); default: a temporary bbolt file removed on exit")
	verbose := flag.Bool("v", false, "log engine activity to stderr")
	tokenList := flag.String("tokens", os.Getenv(tokenauth.EnvTokens), `require bearer tokens "TOKEN=USER,TOKEN=USER" (each user owns its tasks)`)
	flag.Parse()
	tokens, err := tokenauth.Parse(*tokenList)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: -tokens:", err)
		os.Exit(2)
	}
	if err := run(*addr, *dbPath, *verbose, tokens); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

func run(addr, dbPath string, verbose bool, tokens map[string]string) error {
	if dbPath == "" {
		dir, err := os.MkdirTemp("", "taskbridge-conformance-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dbPath = dir + "/tasks.db"
	}
	st, err := builder.OpenStore(context.Background(), dbPath, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts, err := taskrouter.OptionsFromEnv(&taskrouter.Options{Logger: logger, PollInterval: time.Second, DefaultTTL: 5 * time.Minute})
	if err != nil {
		return err
	}
	_, router, err := conftools.NewServer(st, opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := router.Start(ctx); err != nil {
		return err
	}
	defer router.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	var h http.Handler = router.HTTPHandler(nil)
	if mw := tokenauth.Middleware(tokens); mw != nil {
		h = mw(h)
	}
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "conformance server listening on http://%s/mcp (db %s)\n", ln.Addr(), builder.RedactDSN(dbPath))
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
