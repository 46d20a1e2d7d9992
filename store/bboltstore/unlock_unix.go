//go:build !windows && !plan9 && !solaris && !aix

package bboltstore

import (
	"os"
	"syscall"
)

// unlockFile drops bbolt's flock on f. Closing f alone does not: the
// memory map bbolt made keeps the open file (and its lock) alive.
func unlockFile(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
