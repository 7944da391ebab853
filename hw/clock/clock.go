// Package clock lets the CM's timers and the simulated fabric run on either
// the real clock or a fake one that tests advance by hand, so timeouts and
// retransmissions are deterministic and fast to test.
//
// It belongs to the hw layer, below cmcore: hw/sim times its delays with it
// and cmcore's timers run on the same Clock (cmcore.Options.Clock), so one
// Fake drives a whole simulated fabric and the CMs on it. It is public
// because cmcore's exported Options name it; it depends on nothing.
//
// Why not testing/synctest: in a bubble, timers that fall due at the same
// instant run their functions in goroutines the scheduler orders, and every
// random decision of the sim fabric (loss, duplication, jitter) is drawn in
// the order MADs reach it, so a seed would no longer replay exactly. Fake
// runs due timers one at a time on the goroutine that calls Advance, in
// deadline order and creation order for ties: the same seed, the same run.
package clock

import (
	"container/heap"
	"sync"
	"time"
)

// Clock is the time source for timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (Real) or in the goroutine that
	// advances time (Fake) once d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// Real is the system clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a manual clock. Timers fire only inside Advance, in deadline order
// (ties in creation order), on the goroutine that calls Advance, with the
// clock set to each timer's deadline while it runs.
type Fake struct {
	mu  sync.Mutex
	now time.Time
	seq uint64
	q   timerHeap
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d < 0 {
		d = 0
	}
	c.seq++
	t := &fakeTimer{c: c, when: c.now.Add(d), seq: c.seq, f: f, index: -1}
	heap.Push(&c.q, t)
	return t
}

// Advance moves time forward by d, running every timer that falls due,
// including timers that those callbacks set within the window.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for c.fireNext(end) {
	}
	c.mu.Lock()
	if c.now.Before(end) {
		c.now = end
	}
	c.mu.Unlock()
}

// Next returns the deadline of the earliest pending timer.
func (c *Fake) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.q) == 0 {
		return time.Time{}, false
	}
	return c.q[0].when, true
}

// Pending returns the number of timers not yet fired or stopped.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.q)
}

func (c *Fake) fireNext(end time.Time) bool {
	c.mu.Lock()
	if len(c.q) == 0 || c.q[0].when.After(end) {
		c.mu.Unlock()
		return false
	}
	t := heap.Pop(&c.q).(*fakeTimer)
	if t.when.After(c.now) {
		c.now = t.when
	}
	c.mu.Unlock()
	t.f()
	return true
}

type fakeTimer struct {
	c     *Fake
	when  time.Time
	seq   uint64
	f     func()
	index int // in the heap; -1 once fired or stopped
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.c.q, t.index)
	return true
}

type timerHeap []*fakeTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*fakeTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
