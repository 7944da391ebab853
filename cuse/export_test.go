package cuse

import (
	"sync/atomic"
	"time"
)

// FakeYields makes the readers count their yields to the scheduler
// instead of yielding, and read a clock that moves only when advance is
// called, until restore. Call it before starting a Server and restore
// after it is closed.
func FakeYields(n *atomic.Int64) (advance func(time.Duration), restore func()) {
	oldYield, oldClock := yield, readerClock
	var now atomic.Int64
	yield = func() { n.Add(1) }
	readerClock = now.Load
	return func(d time.Duration) { now.Add(d.Nanoseconds()) },
		func() { yield, readerClock = oldYield, oldClock }
}

// SetShutdownGrace sets how long a stopping Server waits for its
// handlers, until restore.
func SetShutdownGrace(d time.Duration) (restore func()) {
	old := shutdownGrace
	shutdownGrace = d
	return func() { shutdownGrace = old }
}

// YieldAfter is how long a busy reader goes between yields.
const YieldAfter = yieldAfter

// Yield is the readers' real yield, whatever FakeYields did.
func Yield() { goyield() }

// ReaderStates reports how many reader states s has allocated, how many
// of them are spare or were dropped, and how many readers are idle (each
// holding one).
func (s *Server) ReaderStates() (made, spare, dropped, idle int) {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	return s.made, len(s.spare), s.dropped, int(s.idle.Load())
}

// ReadBuffers reports how many read buffers s has allocated.
func (s *Server) ReadBuffers() int {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	return s.bufsMade
}

// BlockYields makes every yield of a reader wait for release, as a reader
// waits behind the goroutines its P runs first, with the clock of
// FakeYields; entered counts the yields begun. Restore after the Server is
// closed.
func BlockYields(release <-chan struct{}, entered *atomic.Int64) (advance func(time.Duration), restore func()) {
	advance, restore = FakeYields(entered)
	yield = func() {
		entered.Add(1)
		<-release
	}
	return advance, restore
}

// RaceShutdownWithSpawn arranges, until restore, that once arm is called
// the first reader to take the last idle slot sees the Server start
// stopping in the window before it decides whether to start another (as a
// shutdown beginning then would). late counts the readers started while
// stopping; reached says whether the window was reached.
func RaceShutdownWithSpawn(late *atomic.Int64) (arm func(), reached func() bool, restore func()) {
	var armed, hit atomic.Bool
	spawnWindow = func(s *Server) {
		if armed.Load() && hit.CompareAndSwap(false, true) {
			s.stopping.Store(true)
		}
	}
	spawned = func(s *Server) {
		if s.stopping.Load() {
			late.Add(1)
		}
	}
	return func() { armed.Store(true) }, hit.Load, func() { spawnWindow, spawned = nil, nil }
}
