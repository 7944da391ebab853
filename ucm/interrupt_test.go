package ucm_test

import (
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"golang.org/x/sys/unix"
)

// Issue 12.5: a copy into the client's memory that never completes must
// not make the file uninterruptible. Every wait in ucm ends on INTERRUPT
// and on release of the file; only the stuck copy itself stays stuck.

// stuckDelivery queues a REQ on e.b's listener and starts a GET_EVENT whose
// response copy never completes (until the test ends).
func stuckDelivery(t *testing.T) (*env, *cusetest.Pending, *gate) {
	t.Helper()
	gt := newGate()
	e := newEnv(t, &fakedut.Options{WrapMemory: gt.wrap})
	t.Cleanup(gt.release)
	e.req(t, 0xa0)
	e.waitReadable(t, e.b)
	b, g := eventGet(e.b)
	gt.arm(g.Response)
	get := fake(e.b).WriteAsync(b)
	select {
	case <-gt.entered:
	case <-time.After(wait):
		t.Fatal("GET_EVENT never copied")
	}
	return e, get, gt
}

// blocked checks that p is still waiting, as it should before the
// interrupt or release that ends it.
func blocked(t *testing.T, what string, p *cusetest.Pending) {
	t.Helper()
	if answered(p, 50*time.Millisecond) {
		t.Fatalf("%s answered at once (%v): the test did not make it wait", what, p.Wait().Errno)
	}
}

// A second GET_EVENT waits for the first one's copy, and an interrupt
// ends that wait with EINTR.
func TestStuckCopySecondGetEventInterrupted(t *testing.T) {
	e, _, _ := stuckDelivery(t)
	b, _ := eventGet(e.b)
	second := fake(e.b).WriteAsync(b)
	blocked(t, "second GET_EVENT", second)
	e.d.Kernel.Interrupt(second.Unique)
	if r := replyOf(t, second); r.Errno != unix.EINTR {
		t.Fatalf("interrupted GET_EVENT: %v, want EINTR", r.Errno)
	}
}

// DESTROY_ID of the id whose event is stuck in its copy waits for it; an
// interrupt ends the wait and the destroy completes: the event is taken
// from the stuck GET_EVENT (which fails with EINTR once its copy returns)
// and is not counted, the undelivered connection is rejected, every id is
// freed.
func TestStuckCopyDestroyIDInterrupted(t *testing.T) {
	e, get, gt := stuckDelivery(t)
	resp := e.b.Mem.Alloc(abi.DestroyIDRespSize)
	destroy := fake(e.b).WriteAsync(conformance.Encode(abi.CmdDestroyID, abi.DestroyIDRespSize,
		&abi.DestroyID{Response: resp, ID: e.listener}))
	blocked(t, "DESTROY_ID", destroy)
	e.d.Kernel.Interrupt(destroy.Unique)
	if r := replyOf(t, destroy); r.Errno != 0 {
		t.Fatalf("interrupted DESTROY_ID: %v, want it completed", r.Errno)
	}
	var dr abi.DestroyIDResp
	dr.Decode(e.b.Mem.Read(resp, abi.DestroyIDRespSize))
	if dr.EventsReported != 0 {
		t.Errorf("events_reported %d, want 0: the stuck event was not delivered", dr.EventsReported)
	}
	if rej, err := e.a.Expect(abi.CMREJReceived, wait); err != nil {
		t.Error(err)
	} else if r := rej.U.REJ().Reason; r != 28 {
		t.Errorf("REJ reason %d, want 28", r)
	}
	if n := e.d.IDs.Len(); n != 1 {
		t.Errorf("%d ids, want a's only", n)
	}
	_, err := e.b.AttrID(e.listener)
	wantErrno(t, "ATTR_ID of the destroyed listener", err, unix.ENOENT)
	// The copy finally returns: the GET_EVENT must not claim an event
	// whose id is gone.
	gt.release()
	if r := replyOf(t, get); r.Errno != unix.EINTR {
		t.Errorf("GET_EVENT whose event was destroyed: %v, want EINTR", r.Errno)
	}
	if n := e.d.IDs.Len(); n != 1 {
		t.Errorf("%d ids after the GET_EVENT, want a's only", n)
	}
}

// DESTROY_ID waiting for a command stuck in its copy (ATTR_ID) ends on an
// interrupt with EINTR and nothing done: the id is live again and a later
// DESTROY_ID works.
func TestStuckCopyDestroyWaitingForCommandInterrupted(t *testing.T) {
	gt := newGate()
	d := fakedut.New(t, &fakedut.Options{WrapMemory: gt.wrap})
	t.Cleanup(gt.release)
	c, err := conformance.NewClient(d, false)
	must(t, err)
	id, err := c.CreateID(0)
	must(t, err)
	resp := c.Mem.Alloc(abi.AttrIDRespSize)
	gt.arm(resp)
	attr := fake(c).WriteAsync(conformance.Encode(abi.CmdAttrID, abi.AttrIDRespSize, &abi.AttrID{Response: resp, ID: id}))
	<-gt.entered
	destroy := fake(c).WriteAsync(conformance.Encode(abi.CmdDestroyID, abi.DestroyIDRespSize,
		&abi.DestroyID{Response: c.Mem.Alloc(abi.DestroyIDRespSize), ID: id}))
	blocked(t, "DESTROY_ID", destroy)
	d.Kernel.Interrupt(destroy.Unique)
	if r := replyOf(t, destroy); r.Errno != unix.EINTR {
		t.Fatalf("interrupted DESTROY_ID: %v, want EINTR", r.Errno)
	}
	if _, err := c.AttrID(id); err != nil {
		t.Errorf("ATTR_ID after the interrupted DESTROY_ID: %v", err)
	}
	gt.release()
	if r := replyOf(t, attr); r.Errno != 0 {
		t.Errorf("ATTR_ID: %v", r.Errno)
	}
	if _, err := c.DestroyID(id); err != nil {
		t.Errorf("DESTROY_ID again: %v", err)
	}
	if n := d.IDs.Len(); n != 0 {
		t.Errorf("%d ids left", n)
	}
}

// Release of the file ends every wait: a GET_EVENT behind the stuck copy
// and a DESTROY_ID waiting for the stuck event. The release itself does
// not wait for the copy either. (The kernel sends RELEASE only once no
// call is in progress; the fake kernel lets us check that nothing in ucm
// would keep a released file's calls waiting.)
func TestStuckCopyReleaseEndsWaits(t *testing.T) {
	e, _, _ := stuckDelivery(t)
	b, _ := eventGet(e.b)
	second := fake(e.b).WriteAsync(b)
	destroy := fake(e.b).WriteAsync(conformance.Encode(abi.CmdDestroyID, abi.DestroyIDRespSize,
		&abi.DestroyID{Response: e.b.Mem.Alloc(abi.DestroyIDRespSize), ID: e.listener}))
	blocked(t, "second GET_EVENT", second)
	blocked(t, "DESTROY_ID", destroy)
	rel := fake(e.b).F.ReleaseAsync()
	if r := replyOf(t, rel); r.Errno != 0 {
		t.Fatalf("RELEASE: %v", r.Errno)
	}
	if r := replyOf(t, second); r.Errno == 0 {
		t.Error("GET_EVENT succeeded on a released file")
	}
	replyOf(t, destroy)
	if n := e.d.IDs.Len(); n != 1 {
		t.Errorf("%d ids after release, want a's only", n)
	}
}

// Release ends a DESTROY_ID waiting for a command stuck in its copy.
func TestStuckCommandReleaseEndsDestroy(t *testing.T) {
	gt := newGate()
	d := fakedut.New(t, &fakedut.Options{WrapMemory: gt.wrap})
	t.Cleanup(gt.release)
	c, err := conformance.NewClient(d, false)
	must(t, err)
	id, err := c.CreateID(0)
	must(t, err)
	resp := c.Mem.Alloc(abi.AttrIDRespSize)
	gt.arm(resp)
	fake(c).WriteAsync(conformance.Encode(abi.CmdAttrID, abi.AttrIDRespSize, &abi.AttrID{Response: resp, ID: id}))
	<-gt.entered
	destroy := fake(c).WriteAsync(conformance.Encode(abi.CmdDestroyID, abi.DestroyIDRespSize,
		&abi.DestroyID{Response: c.Mem.Alloc(abi.DestroyIDRespSize), ID: id}))
	blocked(t, "DESTROY_ID", destroy)
	if r := replyOf(t, fake(c).F.ReleaseAsync()); r.Errno != 0 {
		t.Fatalf("RELEASE: %v", r.Errno)
	}
	replyOf(t, destroy)
	if n := d.IDs.Len(); n != 0 {
		t.Errorf("%d ids left after release", n)
	}
}

// Release ends a GET_EVENT waiting on an empty queue.
func TestReleaseEndsEmptyWait(t *testing.T) {
	d := fakedut.New(t, nil)
	c, err := conformance.NewClient(d, false)
	must(t, err)
	b, _ := eventGet(c)
	get := fake(c).WriteAsync(b)
	blocked(t, "GET_EVENT", get)
	if r := replyOf(t, fake(c).F.ReleaseAsync()); r.Errno != 0 {
		t.Fatalf("RELEASE: %v", r.Errno)
	}
	if r := replyOf(t, get); r.Errno == 0 {
		t.Error("GET_EVENT succeeded on a released file")
	}
}
