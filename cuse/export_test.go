package cuse

import "sync/atomic"

// CountYields makes the readers count their yields to the scheduler
// instead of yielding, until the returned function restores them. Call it
// before starting a Server and restore after it is closed.
func CountYields(n *atomic.Int64) (restore func()) {
	old := yield
	yield = func() { n.Add(1) }
	return func() { yield = old }
}

// ReschedEvery is how many requests a reader serves between yields.
const ReschedEvery = reschedEvery
