//go:build unix

package history

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on f, shared by every process
// (and every open file) on the same file, and returns its release.
func lockFile(f *os.File) (func(), error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
}
