package ucm_test

import (
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"golang.org/x/sys/unix"
)

// An interrupted GET_EVENT fails with EINTR and takes nothing: the event
// that comes later is still delivered.
func TestGetEventInterrupted(t *testing.T) {
	e := newEnv(t, nil)
	b, _ := eventGet(e.b)
	p := fake(e.b).WriteAsync(b)
	if answered(p, 20*time.Millisecond) {
		t.Fatalf("GET_EVENT answered without an event: %v", p.Wait().Errno)
	}
	e.d.Kernel.Interrupt(p.Unique)
	if r := replyOf(t, p); r.Errno != unix.EINTR {
		t.Fatalf("interrupted GET_EVENT: %v, want EINTR", r.Errno)
	}
	e.req(t, 0xa0)
	if _, err := e.b.Expect(abi.CMREQReceived, wait); err != nil {
		t.Fatal(err)
	}
}

// A GET_EVENT blocked when the server shuts down (the daemon stopping, its
// device removed) fails with ECONNABORTED, as the kernel answers what a
// dying daemon had not read, and is counted as that, not as an interrupt.
func TestGetEventAtShutdown(t *testing.T) {
	e := newEnv(t, nil)
	b, _ := eventGet(e.b)
	p := fake(e.b).WriteAsync(b)
	if answered(p, 20*time.Millisecond) {
		t.Fatalf("GET_EVENT answered without an event: %v", p.Wait().Errno)
	}
	if err := e.d.Kernel.Server().Close(); err != nil {
		t.Fatal(err)
	}
	if r := replyOf(t, p); r.Errno != unix.ECONNABORTED {
		t.Fatalf("GET_EVENT at shutdown: %v, want ECONNABORTED", r.Errno)
	}
	if got := e.d.Device.Errors(); got["ECONNABORTED"] != 1 || got["EINTR"] != 0 {
		t.Errorf("failed commands counted %v, want one ECONNABORTED", got)
	}
}

// A blocked GET_EVENT does not hold up other commands on the same file
// (rule 5), and is woken by the event.
func TestBlockedGetEventDoesNotBlockFile(t *testing.T) {
	e := newEnv(t, nil)
	b, g := eventGet(e.b)
	p := fake(e.b).WriteAsync(b)
	id, err := e.b.CreateID(7)
	must(t, err)
	if _, err := e.b.AttrID(id); err != nil {
		t.Fatal(err)
	}
	must(t, e.b.Listen(id, 0x2000, 0))
	if p.Answered() {
		t.Fatal("GET_EVENT answered without an event")
	}
	e.req(t, 0xa0)
	if r := replyOf(t, p); r.Errno != 0 || r.Size() != len(b) {
		t.Fatalf("GET_EVENT: %v, size %d", r.Errno, r.Size())
	}
	var resp abi.EventResp
	resp.Decode(e.b.Mem.Read(g.Response, abi.EventRespSize))
	if resp.Event != abi.CMREQReceived {
		t.Errorf("woken with %v", resp.Event)
	}
}

// Poll reports POLLIN only with an event queued, and an event wakes a
// poller through a CUSE poll notification.
func TestPollWakeup(t *testing.T) {
	e := newEnv(t, nil)
	ff := fake(e.b)
	if rev, errno := ff.F.Poll(ff.Caller, unix.POLLIN); errno != 0 || rev != 0 {
		t.Fatalf("empty file polls %#x %v", rev, errno)
	}
	e.req(t, 0xa0)
	select {
	case kh := <-e.d.Kernel.Notifications():
		if kh != ff.F.Kh {
			t.Errorf("notified kh %d, want %d", kh, ff.F.Kh)
		}
	case <-time.After(wait):
		t.Fatal("no poll notification")
	}
	if rev, _ := ff.F.Poll(ff.Caller, unix.POLLIN); rev&unix.POLLIN == 0 {
		t.Errorf("polls %#x with an event queued", rev)
	}
}

// DESTROY_ID of an id whose event GET_EVENT is copying out waits for the
// copy: the event counts and nothing is half delivered (rule 6).
func TestDestroyWhileDelivering(t *testing.T) {
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
	resp := e.b.Mem.Alloc(4)
	destroy := fake(e.b).WriteAsync(conformance.Encode(abi.CmdDestroyID, 4, &abi.DestroyID{Response: resp, ID: e.listener}))
	if answered(destroy, 50*time.Millisecond) {
		t.Fatal("DESTROY_ID answered while its event was being delivered")
	}
	gt.release()
	if r := replyOf(t, get); r.Errno != 0 {
		t.Fatalf("GET_EVENT: %v", r.Errno)
	}
	if r := replyOf(t, destroy); r.Errno != 0 {
		t.Fatalf("DESTROY_ID: %v", r.Errno)
	}
	var dr abi.DestroyIDResp
	dr.Decode(e.b.Mem.Read(resp, 4))
	if dr.EventsReported != 1 {
		t.Errorf("events_reported %d, want 1", dr.EventsReported)
	}
	var ev abi.EventResp
	ev.Decode(e.b.Mem.Read(g.Response, abi.EventRespSize))
	if _, err := e.b.AttrID(ev.ID); err != nil {
		t.Errorf("delivered connection %d: %v", ev.ID, err)
	}
}

// The event handler never waits for a GET_EVENT's copies (rule 3): a
// NOTIFY, whose USER_ESTABLISHED event is queued on the calling
// goroutine, completes while another event of the file is being copied.
func TestEventQueuedDuringDelivery(t *testing.T) {
	gt := newGate()
	e := newEnv(t, &fakedut.Options{WrapMemory: gt.wrap})
	t.Cleanup(gt.release)
	e.req(t, 0xa0)
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	must(t, e.b.SendREP(&abi.REP{UID: 0xc0, ID: req.ID, QPN: 0x200}))
	e.req(t, 0xa1)
	e.waitReadable(t, e.b)
	b, g := eventGet(e.b)
	gt.arm(g.Response)
	get := fake(e.b).WriteAsync(b)
	<-gt.entered
	done := make(chan error, 1)
	go func() { done <- e.b.Notify(req.ID, abi.IBEventCommEst) }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(wait):
		t.Fatal("NOTIFY blocked behind a GET_EVENT copy")
	}
	gt.release()
	if r := replyOf(t, get); r.Errno != 0 {
		t.Fatal(r.Errno)
	}
	if _, err := e.b.Expect(abi.CMUserEstablished, wait); err != nil {
		t.Fatal(err)
	}
}

// DESTROY_ID waits for the commands still using the id (the kernel's
// ctx refcount and completion): an ATTR_ID stalled writing its response
// holds the destroy back.
func TestDestroyWaitsForCommands(t *testing.T) {
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
	destroy := fake(c).WriteAsync(conformance.Encode(abi.CmdDestroyID, 4, &abi.DestroyID{Response: c.Mem.Alloc(4), ID: id}))
	if answered(destroy, 50*time.Millisecond) {
		t.Fatal("DESTROY_ID answered while ATTR_ID was using the id")
	}
	// The id is already out of reach of new commands.
	_, err = c.AttrID(id)
	wantErrno(t, "ATTR_ID during DESTROY_ID", err, unix.ENOENT)
	gt.release()
	if r := replyOf(t, attr); r.Errno != 0 {
		t.Errorf("ATTR_ID: %v", r.Errno)
	}
	if r := replyOf(t, destroy); r.Errno != 0 {
		t.Errorf("DESTROY_ID: %v", r.Errno)
	}
	if n := d.IDs.Len(); n != 0 {
		t.Errorf("%d ids left", n)
	}
}
