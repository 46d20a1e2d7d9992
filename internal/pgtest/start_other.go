//go:build !linux

package pgtest

import (
	"errors"
	"runtime"
)

// start is implemented on Linux only: it relies on a parent-death signal to
// never leave a server behind.
func start() (*Server, error) {
	return nil, errors.New("pgtest starts PostgreSQL on Linux only, not on " + runtime.GOOS)
}
