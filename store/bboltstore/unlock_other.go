//go:build windows || plan9 || solaris || aix

package bboltstore

import "os"

// unlockFile is a no-op where bbolt does not use flock: closing the file
// releases its lock.
func unlockFile(*os.File) {}
