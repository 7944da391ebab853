package cuse_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/cusetest"
)

// testDev is a scripted device. Writes are commands:
//
//	"block"   blocks until "unblock" or ctx is done (then returns ctx.Err())
//	"unblock" releases every blocked write
//	"wait"    like block, but EAGAIN when the request is O_NONBLOCK
//	"hang"    blocks until "unblock", whatever ctx (a copy into a client
//	          that never returns)
//	"ready"   makes the file readable and wakes its pollers twice
//	anything else is accepted and recorded.
type testDev struct {
	openErr error

	mu       sync.Mutex
	opens    []cuse.Request
	writes   []cuse.Request
	handles  []*testHandle
	released int
	unblock  chan struct{}
	entered  chan uint64 // unique of each write that starts blocking
	blocked  map[uint64]bool
	// cancelled: for each blocked write its context ended, whether
	// cuse.ShuttingDown said the server's shutdown ended it.
	cancelled map[uint64]bool
}

func newTestDev() *testDev {
	return &testDev{unblock: make(chan struct{}), entered: make(chan uint64, 100), blocked: map[uint64]bool{}, cancelled: map[uint64]bool{}}
}

func (d *testDev) Open(ctx context.Context, req cuse.Request, w cuse.Waker) (cuse.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.opens = append(d.opens, req)
	if d.openErr != nil {
		return nil, d.openErr
	}
	h := &testHandle{d: d, w: w}
	d.handles = append(d.handles, h)
	return h, nil
}

type testHandle struct {
	d *testDev
	w cuse.Waker

	mu       sync.Mutex
	ready    bool
	released bool
}

func (h *testHandle) Read(ctx context.Context, req cuse.Request, dst []byte) (int, error) {
	return copy(dst, "data"), nil
}

func (h *testHandle) Write(ctx context.Context, req cuse.Request, data []byte) (int, error) {
	d := h.d
	d.mu.Lock()
	d.writes = append(d.writes, req)
	unblock := d.unblock
	d.mu.Unlock()
	switch string(data) {
	case "wait":
		if req.Nonblock() {
			return 0, unix.EAGAIN
		}
		fallthrough
	case "block":
		d.entered <- req.Unique
		select {
		case <-unblock:
			return len(data), nil
		case <-ctx.Done():
			d.mu.Lock()
			d.cancelled[req.Unique] = cuse.ShuttingDown(ctx)
			d.mu.Unlock()
			return 0, ctx.Err()
		}
	case "hang":
		d.entered <- req.Unique
		<-unblock
	case "unblock":
		d.mu.Lock()
		close(d.unblock)
		d.unblock = make(chan struct{})
		d.mu.Unlock()
	case "ready":
		h.mu.Lock()
		h.ready = true
		h.mu.Unlock()
		h.w.Wake()
		h.w.Wake()
	}
	return len(data), nil
}

func (h *testHandle) Poll(ctx context.Context, req cuse.Request, events uint32) (uint32, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var revents uint32 = unix.POLLOUT
	if h.ready {
		revents |= unix.POLLIN
	}
	return revents & events, nil
}

func (h *testHandle) Release(ctx context.Context) {
	h.mu.Lock()
	h.released = true
	h.mu.Unlock()
	h.d.mu.Lock()
	h.d.released++
	h.d.mu.Unlock()
}

func (d *testDev) releasedCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.released
}

func (d *testDev) lastWrite() cuse.Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes[len(d.writes)-1]
}

// awaitBlocked waits until the write with this unique is blocked in the
// device.
func (d *testDev) awaitBlocked(t *testing.T, unique uint64) {
	t.Helper()
	timeout := time.After(cusetest.DefaultTimeout)
	for {
		d.mu.Lock()
		seen := d.blocked[unique]
		d.mu.Unlock()
		if seen {
			return
		}
		select {
		case u := <-d.entered:
			d.mu.Lock()
			d.blocked[u] = true
			d.mu.Unlock()
		case <-timeout:
			t.Fatalf("write %d never blocked in the device", unique)
		}
	}
}

var alice = cuse.Caller{Pid: 1234, Uid: 1000, Gid: 100}

func start(t *testing.T, d cuse.Device) *cusetest.Kernel {
	t.Helper()
	return cusetest.Start(t, d, nil)
}

func mustOpen(t *testing.T, k *cusetest.Kernel, c cuse.Caller, flags uint32) *cusetest.File {
	t.Helper()
	f, errno := k.Open(c, flags)
	if errno != 0 {
		t.Fatalf("Open: %v", errno)
	}
	return f
}
