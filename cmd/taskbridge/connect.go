package main

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
)

// Connecting to the server the global flags name.

// globals are the flags before the command.
type globals struct {
	url, stdio, dialect string
	json                bool
	timeout             time.Duration
}

func connect(ctx context.Context, g globals, asker *asker, stderr io.Writer) (*client.Client, error) {
	var t mcp.Transport
	switch {
	case g.url != "" && g.stdio != "":
		return nil, usagef("give -url or -stdio, not both")
	case g.url != "":
		t = client.HTTPTransport(g.url, nil)
	case g.stdio != "":
		fields := strings.Fields(g.stdio)
		cmd := exec.Command(fields[0], fields[1:]...)
		cmd.Stderr = stderr
		t = &mcp.CommandTransport{Command: cmd}
	default:
		return nil, usagef("give -url URL or -stdio \"COMMAND ARGS\"")
	}
	var d client.Dialect
	switch g.dialect {
	case "auto", "":
		d = client.Auto
	case "core":
		d = client.Core
	case "extension", "ext":
		d = client.Extension
	default:
		return nil, usagef("-dialect must be auto, core or extension, not %q", g.dialect)
	}
	return client.Dial(ctx, t, &client.Options{
		ClientInfo:   &mcp.Implementation{Name: "taskbridge-cli", Version: "0.1.0"},
		Dialect:      d,
		InputHandler: asker.answer,
	})
}
