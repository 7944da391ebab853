package ucm

import (
	"context"
	"fmt"
	"slices"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cuse"
	"golang.org/x/sys/unix"
)

// addCtx links a new id into the file, within the per-file limit and the
// opener's budget. The caller has allocated nothing yet; on success c has
// a hidden id.
func (f *file) addCtx(c *ucmCtx) error {
	// A refusal is logged once the file's lock is let go: a log writer
	// that blocks (a full pipe, a slow journal) must not hold the file's
	// commands, its GET_EVENTs and the watchdog's probe.
	return f.d.budget.logged(f.addCtxLocked(c))
}

func (f *file) addCtxLocked(c *ucmCtx) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errGone
	}
	if len(f.ctxs) >= f.d.limits.MaxIDs {
		return f.d.budget.fileRefused(LimitMaxIDs, f.uid, f.d.limits.MaxIDs,
			fmt.Errorf("ucm: file has %d ids: %w", len(f.ctxs), unix.ENOMEM))
	}
	if err := f.d.budget.takeUnlogged(f.uid, idCharge(c.newConn)); err != nil {
		return err
	}
	if err := f.d.ids.alloc(c); err != nil {
		f.d.budget.give(f.uid, idCharge(c.newConn))
		return err
	}
	f.linkCtx(c)
	return nil
}

// linkCtx adds c to the file's ids. f.mu is held.
func (f *file) linkCtx(c *ucmCtx) {
	c.fidx = int32(len(f.ctxs))
	f.ctxs = append(f.ctxs, c)
}

// unlinkCtx takes c out of the file's ids if it is there, moving the last
// into its place: a slice and an index in each context, where a set of
// pointers (a map) cost about 30 bytes an id. It gives the array back
// when three quarters are unused, as a map would not. f.mu is held.
func (f *file) unlinkCtx(c *ucmCtx) {
	i, last := int(c.fidx), len(f.ctxs)-1
	if i > last || f.ctxs[i] != c {
		return
	}
	f.ctxs[i] = f.ctxs[last]
	f.ctxs[i].fidx = int32(i)
	f.ctxs[last] = nil
	f.ctxs = giveBack(f.ctxs[:last], 64)
}

// releaseID frees c's number and refunds it, once.
func (f *file) releaseID(c *ucmCtx) {
	if f.d.ids.release(c) {
		f.d.budget.give(f.uid, idCharge(c.newConn))
	}
}

// newChild gives a new connection's CM id its own ucm id at once, hidden
// until its REQ is delivered (the 2020 ucma design; ucm.c created it in
// GET_EVENT and leaked one per failed retry).
func (f *file) newChild(cmID *cmcore.ID) (*ucmCtx, error) {
	c := &ucmCtx{file: f, cmID: cmID, newConn: true, undelivered: true}
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
	f.unlinkCtx(c)
	c.flags |= ctxDead
	f.mu.Unlock()
	f.releaseID(c)
}

// enqueue appends e for owner and wakes GET_EVENT callers and pollers.
//
// An event of a new connection whose REQ is still queued is the
// listener's, as in the kernel, where the connection had no context of its
// own before GET_EVENT delivered the REQ: the listener's uid and id, its
// events_reported, purged with the listener. Its own uid would be 0 until
// SEND_REP, and libibcm takes the uid for its ib_cm_id: a NULL one that
// ib_cm_ack_event dereferences.
func (f *file) enqueue(owner *ucmCtx, e *event) error {
	f.mu.Lock()
	if owner.undelivered && e.child == nil {
		if i := slices.IndexFunc(f.events, func(q *event) bool { return q.child == owner }); i >= 0 {
			owner = f.events[i].ctx
		}
	}
	if f.closed || owner.flags&ctxDead != 0 {
		f.mu.Unlock()
		return errGone
	}
	if n := len(f.events); n >= f.d.limits.MaxEvents {
		f.mu.Unlock()
		return f.d.budget.logged(f.d.budget.fileRefused(LimitMaxEvents, f.uid, f.d.limits.MaxEvents,
			fmt.Errorf("ucm: %d events queued: %w", n, unix.ENOMEM)))
	}
	if err := f.d.budget.takeUnlogged(f.uid, eventCharge(e)); err != nil {
		f.mu.Unlock()
		return f.d.budget.logged(err) // after the file's lock, as in addCtx
	}
	e.ctx = owner
	e.resp.UID = owner.uid
	if e.child == nil {
		e.resp.ID = owner.id
	}
	f.events = append(f.events, e)
	owner.queued++
	if f.ready != nil { // a GET_EVENT waits
		close(f.ready)
		f.ready = nil
	}
	f.mu.Unlock()
	f.waker.Wake()
	return nil
}

// purge is ib_ucm_cleanup_events for c: it waits out a GET_EVENT copying
// one of c's events, marks c dead, unlinks c from the file and drops its
// queued events. It returns c's final events_reported and the new
// connections whose REQ was never delivered.
//
// The wait ends on interrupt and on release too: purge then takes the event
// from under the copy, whose GET_EVENT fails (finishDelivery finds it gone)
// and so delivers nothing, and events_reported stays exact. The kernel
// waited here uninterruptibly; its copies could not hang for ever, ours
// (process_vm_writev into, say, userfaultfd-backed memory) can.
func (f *file) purge(ctx context.Context, c *ucmCtx) (uint32, []*ucmCtx) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.delivering != nil && (f.delivering.ctx == c || f.delivering.child == c) {
		if err := f.awaitLocked(ctx, f.deliveredChan()); err != nil {
			break
		}
	}
	c.flags |= ctxDead
	f.unlinkCtx(c)
	if c.queued == 0 {
		// Nothing of c's in the queue: no need to look at the others'
		// (a listener's may hold thousands of REQs).
		return c.eventsReported, nil
	}
	var orphans []*ucmCtx
	var refund charge
	f.events = slices.DeleteFunc(f.events, func(e *event) bool {
		if e.ctx != c {
			return false
		}
		if e.child != nil {
			orphans = append(orphans, e.child)
		}
		refund = refund.plus(eventCharge(e))
		return true
	})
	c.queued = 0
	f.d.budget.give(f.uid, refund)
	return c.eventsReported, orphans
}

// readyChan and deliveredChan return the channel closed when an event is
// queued and when the event being delivered is done, made by the first
// waiter: nobody waits for most events, which then cost no channel.
// f.mu must be held.
func (f *file) readyChan() chan struct{} {
	if f.ready == nil {
		f.ready = make(chan struct{})
	}
	return f.ready
}

func (f *file) deliveredChan() chan struct{} {
	if f.delivered == nil {
		f.delivered = make(chan struct{})
	}
	return f.delivered
}

// awaitLocked drops f.mu until ch is closed, ctx is cancelled (INTERRUPT:
// cuse answers EINTR for ctx.Err()) or the file is released, and takes it
// again.
func (f *file) awaitLocked(ctx context.Context, ch <-chan struct{}) error {
	f.mu.Unlock()
	defer f.mu.Lock()
	return f.await(ctx, ch)
}

// await waits until ch is closed, ctx is cancelled or the file is released.
// A closed ch wins: select would pick at random among ready cases. A wait
// the user's limits do not allow fails at once (beginWait).
func (f *file) await(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	default:
	}
	if err := f.beginWait(); err != nil {
		return err
	}
	defer f.endWait()
	cuse.DetachBuffer(ctx) // the command was decoded; a wait may last
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-f.done:
		return errReleased
	}
}

// beginWait counts a command of the file's that is about to wait against
// its user's Limits.UserWaits and the memory budget: ENOMEM past either.
// A waiting command is a goroutine of ucmd's, where the kernel's driver
// let the caller's own thread wait, so a user with many threads could
// otherwise make the daemon hold as many stacks (docs/cuse.md §3). Every
// wait's caller copes with a failed wait, as with an interrupted one.
func (f *file) beginWait() error {
	if err := f.d.budget.take(f.uid, waitCharge); err != nil {
		return err
	}
	f.waits.Add(1)
	return nil
}

// endWait ends what beginWait counted.
func (f *file) endWait() {
	f.waits.Add(-1)
	f.d.budget.give(f.uid, waitCharge)
}

// errReleased ends the waits of calls still running when the file is
// released. The kernel sends RELEASE only once no call is in progress, so
// no client sees it; it exists so that nothing can keep a released file
// waiting.
var errReleased = fmt.Errorf("ucm: file released: %w", unix.EBADF)

// teardown destroys c completely: the CM id (after which no event for it
// can come), its queued events, the new connections only it knew of, and
// finally its number. It returns c's events_reported. Its only wait (for a
// copy of one of c's events) ends with ctx or the release.
func (f *file) teardown(ctx context.Context, c *ucmCtx) uint32 {
	// Never under f.mu: Destroy may deliver queued events on this
	// goroutine, and the handler takes f.mu. Destroy does not wait for a
	// handler call already running for c: that call finds c dead (purge,
	// under f.mu) and queues nothing.
	lingers := c.cmID.Destroy()
	reported, orphans := f.purge(ctx, c)
	for _, o := range orphans {
		f.d.ids.hide(o)
		f.teardown(ctx, o) // REQ_RCVD: the CM answers the peer with REJ 28
	}
	if f.d.ids.release(c) {
		if lingers {
			f.lingered(c, true)
		} else {
			f.d.budget.give(f.uid, idCharge(c.newConn))
		}
	}
	return reported
}

// lingered is one of the two calls that end an id the CM keeps past its
// destroy for its timewait: teardown's, and the CM's release hook once
// the timewait is over (Device.released), in either order. Until both
// have come the id stays charged to its user, against --user-ids and the
// memory budget, and counted as in timewait once teardown has come: a
// connection's CM state lives on for ms(the path's ACK timeout), up to 2.3
// hours at the largest a peer's REQ can ask. The second call refunds it.
// The mark and the budget change are made under f.mu together, so that
// the two calls cannot cross between them.
func (f *file) lingered(c *ucmCtx, teardown bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := c.flags&ctxLingerHalf == 0
	c.flags |= ctxLingerHalf
	switch {
	case first && teardown: // the CM still holds it
		f.d.budget.takeUnlogged(f.uid, charge{timewait: 1}) // a count within ids: never refused
	case first: // its timewait ended before teardown came
	case teardown:
		f.d.budget.give(f.uid, idCharge(c.newConn))
	default:
		ch := idCharge(c.newConn)
		ch.timewait = 1
		f.d.budget.give(f.uid, ch)
	}
}
