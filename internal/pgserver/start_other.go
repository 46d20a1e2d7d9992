//go:build !linux

package pgserver

import (
	"errors"
	"runtime"
)

// Start is implemented on Linux only: it relies on a parent-death signal to
// never leave a server behind.
func Start(opts Options) (*Server, error) {
	return nil, errors.New("pgserver starts PostgreSQL on Linux only, not on " + runtime.GOOS)
}
