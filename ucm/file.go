package ucm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cuse"
	"golang.org/x/sys/unix"
)

// file is one open file (struct ib_ucm_file); it implements cuse.Handle.
// Every call runs in its own goroutine.
type file struct {
	d     *Device
	waker cuse.Waker
	// uid and gid opened the file: ib_safe_file_access refuses writers
	// with other credentials, and writers from other processes (w).
	uid, gid uint32
	w        *writers
	copies   *copySlots // the uid's, shared with its other files
	all      *copySlots // every user's (Budget.copies)
	// pid (the opener's process, not its thread), comm (that process's
	// name, read once at open) and opened describe the opener, for
	// Device.Files and the failed-command log.
	pid    int
	comm   string
	opened time.Time

	// Every wait in the file selects on a channel, the request's context
	// (cancelled on INTERRUPT) and done: none may outlast an interrupt or
	// the release, even behind a copy into the client that never returns.
	done chan struct{} // closed by Release

	// Commands of the file waiting, and of them those waiting for a copy
	// slot (hung copies), for Device.Files; the uid's limit is in the
	// Budget (beginWait).
	waits, copyWaits atomic.Int32

	mu         sync.Mutex
	ctxs       []*ucmCtx     // the file's ids, each at its fidx (linkCtx)
	events     []*event      // FIFO across all ids of the file
	ready      chan struct{} // closed (and replaced) when an event is queued
	delivering *event        // the head event a GET_EVENT is copying out
	delivered  chan struct{} // closed when delivering is cleared
	closed     bool          // released: no more ids or events

}

var _ cuse.Handle = (*file)(nil)

func newFile(d *Device, req cuse.Request, w cuse.Waker) *file {
	f := &file{
		d: d, waker: w, uid: req.Caller.Uid, gid: req.Caller.Gid,
		w:      d.openWriters(req.Caller.Pid),
		copies: d.budget.copySlots(req.Caller.Uid),
		all:    d.budget.copies,
		opened: time.Now(),
		ready:  make(chan struct{}),
		done:   make(chan struct{}),
	}
	f.pid = f.w.process()
	if f.pid > 0 {
		if name, err := d.processName(f.pid); err == nil {
			f.comm = printable(name)
		}
	}
	return f
}

// Write serves one command (ib_ucm_write): on success it returns the full
// length written, as the kernel did, whatever the header's in said. A
// failed command is counted and logged (failures.go) with its cause,
// which cuse reduces to the errno.
func (f *file) Write(ctx context.Context, req cuse.Request, data []byte) (int, error) {
	if req.Offset != 0 {
		// The rest of a write longer than MaxWrite, which CUSE passes on
		// in requests of its own: ucm.c ran the command at the start of
		// the buffer and ignored the bytes past it, so do we, instead
		// of running them as another command.
		return len(data), nil
	}
	var start time.Time
	if f.d.obs != nil {
		start = time.Now()
	}
	// What the observer counts is read now: a command that waits gives
	// the buffer data is in back to the CUSE server (DetachBuffer).
	var observed abi.Cmd
	if f.d.obs != nil {
		observed = observedCmd(data)
	}
	c := newCall(ctx, f, req.Caller.Pid, req.Nonblock())
	defer c.done()
	hdr, cmd, err := f.write(ctx, c, req, data)
	if f.d.obs != nil {
		f.d.obs.ObserveCommand(observed, time.Since(start), err)
	}
	if err != nil {
		id, hasID := commandID(cmd)
		f.d.fails.record(ctx, f, req.Caller.Pid, commandName(data, hdr), id, hasID, err)
		return 0, err
	}
	return len(data), nil
}

// write is Write but for the failure's record; it returns what it parsed,
// which lives in c.
func (f *file) write(ctx context.Context, c *call, req cuse.Request, data []byte) (abi.Header, abi.Command, error) {
	if req.Caller.Uid != f.uid || req.Caller.Gid != f.gid {
		return abi.Header{}, nil, fmt.Errorf("ucm: writer %d:%d is not the opener %d:%d: %w",
			req.Caller.Uid, req.Caller.Gid, f.uid, f.gid, unix.EACCES)
	}
	if err := f.w.check(req.Caller.Pid); err != nil {
		return abi.Header{}, nil, err
	}
	hdr, cmd, err := c.dec.Parse(data)
	if err != nil {
		return hdr, nil, err
	}
	if out := hdr.Cmd.OutLen(); int(hdr.Out) < out {
		return hdr, cmd, fmt.Errorf("ucm: %v: out %d < %d: %w", hdr.Cmd, hdr.Out, out, unix.ENOSPC)
	}
	if err := c.dispatch(ctx, hdr, cmd); err != nil {
		return hdr, cmd, fmt.Errorf("ucm: %v: %w", hdr.Cmd, err)
	}
	return hdr, cmd, nil
}

// Read fails as read(2) on the kernel's device did: it had no .read.
func (f *file) Read(context.Context, cuse.Request, []byte) (int, error) {
	return 0, fmt.Errorf("ucm: read is not supported: %w", unix.EINVAL)
}

// Poll is ib_ucm_poll: readable while an event is queued, nothing else.
// Like a kernel .poll it reports its mask whatever was asked; the caller
// filters.
func (f *file) Poll(context.Context, cuse.Request, uint32) (uint32, error) {
	f.mu.Lock()
	n := len(f.events)
	f.mu.Unlock()
	if n == 0 {
		return 0, nil
	}
	return unix.POLLIN | pollRdNorm, nil
}

// pollRdNorm is POLLRDNORM, which x/sys/unix does not define for Linux.
const pollRdNorm = 0x40

// Release is ib_ucm_close: every id of the file is destroyed, its queued
// events purged (undelivered new connections rejected). No command is
// running on the file, so nothing needs waiting for but the CM.
//
// Every lock it takes (the id table's, the CM's, the file's) is held for
// one id at a time, so other clients wait at most one id's teardown: the
// whole close of N ids costs O(N log N).
func (f *file) Release(ctx context.Context) {
	f.d.filesMu.Lock()
	delete(f.d.files, f)
	f.d.filesMu.Unlock()
	f.mu.Lock()
	f.closed = true
	close(f.done)
	// The file's ids are taken whole: each teardown's unlink then finds
	// nothing to move, where unlinking them one by one shuffled and
	// shrank the array 100,000 times for a large file.
	ctxs := f.ctxs
	f.ctxs = nil
	// The queue goes at once, not by each id's purge scanning it (O(ids x
	// events)); the undelivered new connections are in ctxs anyway.
	var refund charge
	for _, e := range f.events {
		refund = refund.plus(eventCharge(e))
	}
	clear(f.events)
	f.events = nil
	f.mu.Unlock()
	f.d.budget.give(f.uid, refund.plus(fileCharge))
	for _, c := range ctxs {
		f.d.ids.hide(c)
	}
	for _, c := range ctxs {
		f.teardown(ctx, c) // closed: it waits for nothing
	}
}
