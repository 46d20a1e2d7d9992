//go:build !linux

package bboltstore

// mmapFlags returns the bbolt MmapFlags for Options.Prefault: nothing outside
// Linux.
func mmapFlags(bool) int { return 0 }
