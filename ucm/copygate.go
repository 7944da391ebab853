package ucm

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ucmd/ucmd/cuse"
)

// copySlots bounds one user's copies into and out of client memory in
// progress at once (Limits.UserCopies), across every Device sharing the
// Budget: each uid's usage has one, and its files keep a pointer to it.
// The Budget has one more for all users' copies (Limits.Copies), since
// one person may act as many uids.
//
// The kernel's ucm copied in the caller's own thread; ucmd copies in one
// of its own (process_vm_readv/writev), and a copy can hang for as long as
// the client likes: a buffer in a mapping of a file on a FUSE file system
// whose server never answers the page's read. Each hung copy holds one of
// ucmd's threads, and past the Go runtime's limit of 10,000 threads the
// daemon dies. With the slots one user's hung copies hold at most
// UserCopies threads; that user's further copies wait here, parked
// goroutines holding no thread, in the order they came, until a copy ends,
// the client is interrupted (EINTR) or the file is released. The only
// wait made while holding a slot is a copy's for one of all users' slots
// while it holds its uid's, and a holder of one of all users' waits for
// nothing, so the slots cannot deadlock.
type copySlots struct {
	max uint64
	// state is the copies in progress (low 32 bits) and the waiters (high
	// 32 bits). Without waiters a slot is taken and given back with one
	// compare-and-swap each, and no lock. Waiters register, queue and
	// leave the queue under mu, so there len(queue) is the waiters.
	state atomic.Uint64

	mu    sync.Mutex
	queue []chan struct{} // waiters, first come first; a slot is handed over by closing one's channel

	warned atomic.Bool // a wait past slowCopyWait has been logged at Warn

	// parked is the slots of this uid's held by copies that wait for one
	// of all users' (call.waitCopy): taken, but not copying.
	parked atomic.Int32
}

// slowCopyWait is how long a copy may wait for a slot before the wait is
// logged: the user's copies take microseconds, unless some of them hang.
const slowCopyWait = time.Second

const oneWaiter = 1 << 32

// take takes a slot if one is free and nobody waits; wait is the slow
// path (call.enterCopy).
func (s *copySlots) take() bool {
	v := s.state.Load() // below max: no waiter, and a slot free
	return v < s.max && s.state.CompareAndSwap(v, v+1)
}

// leave gives back a slot take or wait took.
func (s *copySlots) leave() {
	if !s.give() {
		s.handOver()
	}
}

// give gives back a slot if nobody waits for it: the request path's.
func (s *copySlots) give() bool {
	v := s.state.Load()
	return v < oneWaiter && s.state.CompareAndSwap(v, v-1)
}

// wait is take's slow path: it takes a slot, waiting for one if all are
// taken, until ctx (cancelled on INTERRUPT) or done (the file's release)
// ends the wait, and then returns the cause and holds no slot. slow, if
// not nil, is called once if the wait lasts slowCopyWait.
func (s *copySlots) wait(ctx context.Context, done <-chan struct{}, slow func()) error {
	s.mu.Lock()
	for {
		v := s.state.Load()
		if v < s.max {
			if s.state.CompareAndSwap(v, v+1) {
				s.mu.Unlock()
				return nil
			}
			continue
		}
		if s.state.CompareAndSwap(v, v+oneWaiter) {
			break
		}
	}
	ch := make(chan struct{})
	s.queue = append(s.queue, ch)
	s.mu.Unlock()

	cuse.DetachBuffer(ctx) // the command was decoded; the wait may last
	var long <-chan time.Time
	if slow != nil {
		t := time.NewTimer(slowCopyWait)
		defer t.Stop()
		long = t.C
	}
	var err error
wait:
	for {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		case <-done:
			err = errReleased
			break wait
		case <-long:
			long = nil
			slow()
		}
	}
	s.mu.Lock()
	if i := slices.Index(s.queue, ch); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		s.state.Add(^uint64(oneWaiter - 1)) // less one waiter
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	// The slot was handed over as the wait ended: pass it on.
	s.leave()
	return err
}

// handOver is leave with waiters: the first one queued gets the slot.
func (s *copySlots) handOver() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		v := s.state.Load()
		if v < oneWaiter { // the waiters gave up meanwhile
			if s.state.CompareAndSwap(v, v-1) {
				return
			}
			continue
		}
		close(s.queue[0]) // the slot changes hands: the copies stay as many
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.state.Add(^uint64(oneWaiter - 1)) // less one waiter
		return
	}
}

// counts reports the copies in progress and the waiters.
func (s *copySlots) counts() (n, waiting int) {
	v := s.state.Load()
	return int(uint32(v)), int(v >> 32)
}

// copying is the copies that hold a slot and are not parked: those
// copying now, or hung in the copy.
func (s *copySlots) copying() int {
	n, _ := s.counts()
	return max(n-int(s.parked.Load()), 0)
}
