//go:build !simplant_queue

package taskrouter

// plantKeepPlaces, with the test-only tag simplant_queue, makes Dequeue
// free nothing (a planted bug in the queues' release: issue 39, see
// internal/sim's plant_test.go). Off without the tag.
const plantKeepPlaces = false
