// Command 62_tasks_workflow demonstrates taskbridge's task-prompt bridge.
//
// With no arguments it runs the whole lifecycle in one process on an
// embedded bbolt store: prompts/get creates a durable task, the server runs
// its steps and hands off the client step, the demo acts as the client and
// continues with _meta._task_id, the last server step runs, and the task
// completes.
//
//	go run ./examples/62_tasks_workflow
//	go run ./examples/62_tasks_workflow serve -http 127.0.0.1:8080 -db tasks.db
//	go run ./examples/62_tasks_workflow serve -stdio -db tasks.db
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "62_tasks_workflow:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		return serve(args[1:], stderr)
	}
	fs := flag.NewFlagSet("62_tasks_workflow", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "bbolt file (default: a fresh temporary file)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	path := *db
	if path == "" {
		dir, err := os.MkdirTemp("", "taskbridge-62-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "tasks.db")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return demo(ctx, path, stdout)
}

func serve(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http", "", "serve Streamable HTTP at http://ADDR/mcp (use a loopback address)")
	stdio := fs.Bool("stdio", false, "serve one client over stdin/stdout")
	db := fs.String("db", "taskbridge-62.db", "bbolt file")
	verbose := fs.Bool("v", false, "log to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*addr == "") == !*stdio {
		return errors.New("serve: give exactly one of -http ADDR or -stdio")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := newBuilder().WithDBPath(*db)
	if *verbose {
		b.WithLogger(slog.New(slog.NewTextHandler(stderr, nil)))
	}
	srv, err := b.Build(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	if *stdio {
		return srv.ServeStdio(ctx)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	fmt.Fprintf(stderr, "serving http://%s/mcp (db %s)\n", ln.Addr(), *db)
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
