// Package filelock takes an exclusive advisory lock on an open file,
// shared by every process that opens the same file (flock on Unix). The
// CLI's task history and example 62's publication ledger use it, so that
// two processes changing one file take turns.
package filelock
