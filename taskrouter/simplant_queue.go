//go:build simplant_queue

package taskrouter

// See simplant.go: Dequeue frees nothing.
const plantKeepPlaces = true
