package ucm

import (
	"context"
	"fmt"
	"slices"

	"github.com/ucmd/ucmd/abi"
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
// the caller's buffer size (ENOMEM), in the kernel's order.
func (c *call) copyEvent(m *abi.EventGet, e *event) error {
	if err := c.writeStruct(m.Response, &e.resp, "response"); err != nil {
		return err
	}
	if e.data != nil {
		if int(m.DataLen) < len(e.data) {
			return fmt.Errorf("data buffer %d < %d: %w", m.DataLen, len(e.data), unix.ENOMEM)
		}
		if err := c.write(m.Data, e.data, "data"); err != nil {
			return err
		}
	}
	if e.info != nil {
		if int(m.InfoLen) < len(e.info) {
			return fmt.Errorf("info buffer %d < %d: %w", m.InfoLen, len(e.info), unix.ENOMEM)
		}
		if err := c.write(m.Info, e.info, "info"); err != nil {
			return err
		}
	}
	return nil
}
