package ucm

import (
	"context"
	"slices"
	"sync"

	"github.com/ucmd/ucmd/cuse"
)

// copySlots bounds one user's copies into and out of client memory in
// progress at once (Limits.UserCopies), across every Device sharing the
// Budget: each uid's usage has one, and its files keep a pointer to it.
//
// The kernel's ucm copied in the caller's own thread; ucmd copies in one
// of its own (process_vm_readv/writev), and a copy can hang for as long as
// the client likes: a buffer in a mapping of a file on a FUSE file system
// whose server never answers the page's read. Each hung copy holds one of
// ucmd's threads, and past the Go runtime's limit of 10,000 threads the
// daemon dies. With the slots one user's hung copies hold at most
// UserCopies threads; that user's further copies wait here, parked
// goroutines holding no thread, in the order they came, until a copy ends,
// the client is interrupted (EINTR) or the file is released. Nothing else
// waits while holding a slot, so the slots cannot deadlock.
type copySlots struct {
	max int

	mu    sync.Mutex
	n     int             // copies in progress
	queue []chan struct{} // waiters, first come first; a slot is handed over by closing one's channel
}

// enter takes a slot, waiting for one if all are taken. The wait ends
// with ctx (cancelled on INTERRUPT) or done (the file's release), and then
// enter returns the cause and holds no slot.
func (s *copySlots) enter(ctx context.Context, done <-chan struct{}) error {
	s.mu.Lock()
	if s.n < s.max && len(s.queue) == 0 {
		s.n++
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.queue = append(s.queue, ch)
	s.mu.Unlock()

	cuse.DetachBuffer(ctx) // the command was decoded; the wait may last
	var err error
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-done:
		err = errReleased
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.queue, ch); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		return err
	}
	// The slot was handed over as the wait ended: pass it on.
	s.leaveLocked()
	return err
}

// leave gives back a slot enter took.
func (s *copySlots) leave() {
	s.mu.Lock()
	s.leaveLocked()
	s.mu.Unlock()
}

func (s *copySlots) leaveLocked() {
	if len(s.queue) > 0 {
		close(s.queue[0]) // the slot changes hands: n stays
		s.queue[0] = nil
		s.queue = s.queue[1:]
		return
	}
	s.n--
}

// state reports the copies in progress and waiting, for tests.
func (s *copySlots) state() (n, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, len(s.queue)
}
