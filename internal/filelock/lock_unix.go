//go:build unix

package filelock

import (
	"os"
	"syscall"
)

// Lock takes an exclusive advisory lock on f, shared by every process (and
// every open file) on the same file, and returns the function that
// releases it. It blocks until the lock is free.
func Lock(f *os.File) (func(), error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
}
