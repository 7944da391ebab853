package ucm

import (
	"fmt"
	"slices"

	"github.com/ucmd/ucmd/cmcore"
	"golang.org/x/sys/unix"
)

// addCtx links a new id into the file, within the per-file limit. The
// caller has allocated nothing yet; on success c has a hidden id.
func (f *file) addCtx(c *ucmCtx) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errGone
	}
	if len(f.ctxs) >= f.d.limits.MaxIDs {
		return fmt.Errorf("ucm: file has %d ids: %w", len(f.ctxs), unix.ENOMEM)
	}
	if err := f.d.ids.alloc(c); err != nil {
		return err
	}
	f.ctxs[c] = struct{}{}
	return nil
}

// newChild gives a new connection's CM id its own ucm id at once, hidden
// until its REQ is delivered (the 2020 ucma design; ucm.c created it in
// GET_EVENT and leaked one per failed retry).
func (f *file) newChild(cmID *cmcore.ID) (*ucmCtx, error) {
	c := &ucmCtx{file: f, cmID: cmID}
	if err := f.addCtx(c); err != nil {
		return nil, err
	}
	cmID.SetContext(c)
	return c, nil
}

// forget undoes newChild when its REQ could not be queued; cmcore then
// destroys the CM id itself.
func (f *file) forget(c *ucmCtx) {
	f.mu.Lock()
	delete(f.ctxs, c)
	c.dead = true
	f.mu.Unlock()
	f.d.ids.release(c)
}

// enqueue appends e for owner and wakes GET_EVENT callers and pollers.
func (f *file) enqueue(owner *ucmCtx, e *event) error {
	f.mu.Lock()
	if f.closed || owner.dead {
		f.mu.Unlock()
		return errGone
	}
	if n := len(f.events); n >= f.d.limits.MaxEvents {
		f.mu.Unlock()
		return fmt.Errorf("ucm: %d events queued: %w", n, unix.ENOMEM)
	}
	e.ctx = owner
	e.resp.UID = owner.uid
	if e.child == nil {
		e.resp.ID = owner.id
	}
	f.events = append(f.events, e)
	close(f.ready)
	f.ready = make(chan struct{})
	f.mu.Unlock()
	f.waker.Wake()
	return nil
}

// purge is ib_ucm_cleanup_events for c: it waits out a GET_EVENT copying
// one of c's events, marks c dead, unlinks c from the file and drops its
// queued events. It returns c's final events_reported and the new
// connections whose REQ was never delivered.
func (f *file) purge(c *ucmCtx) (uint32, []*ucmCtx) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.delivering != nil && (f.delivering.ctx == c || f.delivering.child == c) {
		f.cond.Wait()
	}
	c.dead = true
	delete(f.ctxs, c)
	var orphans []*ucmCtx
	f.events = slices.DeleteFunc(f.events, func(e *event) bool {
		if e.ctx != c {
			return false
		}
		if e.child != nil {
			orphans = append(orphans, e.child)
		}
		return true
	})
	return c.eventsReported, orphans
}

// teardown destroys c completely: the CM id (after which no event for it
// can come), its queued events, the new connections only it knew of, and
// finally its number. It returns c's events_reported.
func (f *file) teardown(c *ucmCtx) uint32 {
	// Never under f.mu: Destroy waits for a running handler, which may be
	// waiting for f.mu.
	c.cmID.Destroy()
	reported, orphans := f.purge(c)
	for _, o := range orphans {
		f.d.ids.hide(o)
		f.teardown(o) // REQ_RCVD: the CM answers the peer with REJ 28
	}
	f.d.ids.release(c)
	return reported
}
