package bboltstore

import "syscall"

// mmapFlags returns the bbolt MmapFlags for Options.Prefault.
func mmapFlags(prefault bool) int {
	if prefault {
		return syscall.MAP_POPULATE
	}
	return 0
}
