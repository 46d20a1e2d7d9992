//go:build !linux

package bboltstore

// mmapFlags returns the bbolt MmapFlags for WithPrefault: nothing outside
// Linux.
func mmapFlags(bool) int { return 0 }
