package ucm

import (
	"context"
	"fmt"
	"slices"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cuse/callermem"
	"golang.org/x/sys/unix"
)

// getEvent is ib_ucm_event: wait for the file's head event (EAGAIN in
// O_NONBLOCK mode, EINTR when interrupted), copy it out, and only when
// every copy succeeded dequeue it and count it. Any error leaves it queued.
func (c *call) getEvent(ctx context.Context, m *abi.EventGet) error {
	f := c.f
	e, err := f.takeHead(ctx, c.nonblock)
	if err != nil {
		return err
	}
	err = c.copyEvent(m, e)
	if !f.finishDelivery(e, err == nil) && err == nil {
		// An interrupted DESTROY_ID (or close) took the event while its
		// copy hung: nothing was delivered, and the call did not
		// complete, as after a signal.
		err = fmt.Errorf("event's id destroyed during its copy: %w", unix.EINTR)
	}
	return err
}

// finishDelivery ends what takeHead started: on success the event leaves
// the queue, counts for its id and unhides its new connection; either way
// the next GET_EVENT and a waiting purge may proceed. It reports whether e
// was delivered.
func (f *file) finishDelivery(e *event, copied bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delivering = nil
	if f.delivered != nil { // a GET_EVENT or purge waits
		close(f.delivered)
		f.delivered = nil
	}
	if !copied {
		return false
	}
	// e is the head (purge waits for f.delivering, other GET_EVENT callers
	// for it to be cleared), unless a purge that was interrupted took it;
	// looking it up keeps a broken invariant from corrupting the queue.
	switch i := slices.Index(f.events, e); {
	case i == 0:
		f.events[0] = nil
		if len(f.events) == 1 {
			f.events = f.events[:0] // empty: keep the array
		} else {
			f.events = f.events[1:] // O(1): the queue may be long
		}
	case i > 0:
		f.events = slices.Delete(f.events, i, i+1)
	default:
		return false // purged meanwhile: not delivered after all
	}
	f.d.budget.give(f.uid, eventCharge(e))
	e.ctx.queued--
	e.ctx.eventsReported++
	if e.child != nil {
		e.child.undelivered = false
		f.d.ids.publish(e.child)
	}
	return true
}

// takeHead waits for a queued event and marks it as being delivered. A
// waiting caller holds no lock, so it never delays other commands; every
// wait ends on INTERRUPT (EINTR) and on release.
func (f *file) takeHead(ctx context.Context, nonblock bool) (*event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if f.closed {
			return nil, errReleased
		}
		if f.delivering != nil {
			// Normally one event's copies; unbounded if one hangs.
			if err := f.awaitLocked(ctx, f.deliveredChan()); err != nil {
				return nil, err
			}
			continue
		}
		if len(f.events) > 0 {
			f.delivering = f.events[0]
			return f.delivering, nil
		}
		if nonblock {
			return nil, fmt.Errorf("no event queued: %w", unix.EAGAIN)
		}
		if err := f.awaitLocked(ctx, f.readyChan()); err != nil {
			return nil, err
		}
	}
}

// copyEvent copies the response, then data and info, each checked against
// the caller's buffer size (ENOMEM), in the kernel's order: a buffer too
// small for data stops the copy there with ENOMEM, after the response
// was written. What is to be written goes out in one process_vm_writev.
func (c *call) copyEvent(m *abi.EventGet, e *event) error {
	resp := c.out[:abi.EventRespSize]
	e.resp.Encode(resp)
	segs := &c.segs // through the SegWriter they would escape
	segs[0] = callermem.Seg{Addr: m.Response, Data: resp}
	what := [3]string{"response", "data", "info"}
	n := 1
	var short error // ENOMEM for the first buffer too small; nothing after it is copied
	for _, part := range []struct {
		b    []byte
		addr uint64
		size uint32
		name string
	}{{e.data, m.Data, uint32(m.DataLen), "data"}, {e.info, m.Info, uint32(m.InfoLen), "info"}} {
		if part.b == nil {
			continue
		}
		if int(part.size) < len(part.b) {
			short = fmt.Errorf("%s buffer %d < %d: %w", part.name, part.size, len(part.b), unix.ENOMEM)
			break
		}
		segs[n], what[n] = callermem.Seg{Addr: part.addr, Data: part.b}, part.name
		n++
	}
	if err := c.writeSegs(segs[:n], what[:n]); err != nil {
		return err
	}
	return short
}
