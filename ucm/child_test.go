package ucm_test

import (
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"golang.org/x/sys/unix"
)

// A new connection's id exists from the REQ's arrival but is unusable
// until GET_EVENT delivers the REQ (rule 4); a failed GET_EVENT retried
// does not allocate a second id (the kernel's retry leak).
func TestChildHiddenUntilDelivered(t *testing.T) {
	e := newEnv(t, nil)
	e.req(t, 0xa0) // listener 0, active 1: the child is 2
	e.waitReadable(t, e.b)
	if n := e.d.IDs.Len(); n != 3 {
		t.Fatalf("%d ids, want 3 (listener, active, hidden child)", n)
	}
	_, err := e.b.AttrID(2)
	wantErrno(t, "ATTR_ID of the undelivered child", err, unix.ENOENT)

	g := &abi.EventGet{Response: e.b.Mem.Bad(), Data: e.b.Mem.Alloc(255), Info: e.b.Mem.Alloc(255), DataLen: 255, InfoLen: 255}
	wantErrno(t, "GET_EVENT with a bad response", e.b.Cmd(abi.CmdEvent, abi.EventRespSize, g), unix.EFAULT)
	_, err = e.b.GetEventLen(10, 255)
	wantErrno(t, "GET_EVENT with a short data buffer", err, unix.ENOMEM)

	ev, err := e.b.GetEvent()
	must(t, err)
	if ev.Event != abi.CMREQReceived || ev.ID != 2 || ev.UID != 0xb0 {
		t.Fatalf("got %v id %d uid %#x, want REQ for id 2 with the listener's uid", ev.Event, ev.ID, ev.UID)
	}
	if n := e.d.IDs.Len(); n != 3 {
		t.Errorf("%d ids after the retries, want 3", n)
	}
	if _, err := e.b.AttrID(2); err != nil {
		t.Errorf("ATTR_ID of the delivered child: %v", err)
	}
}

// An event of a new connection that comes before its REQ is delivered is
// the listener's, as in the kernel (the connection had no context before
// GET_EVENT): the listener's uid and id, counted on the listener. Its own
// uid is 0 until SEND_REP, which libibcm would take for a NULL ib_cm_id.
func TestChildEventBeforeDelivery(t *testing.T) {
	e := newEnv(t, nil)
	a := e.req(t, 0xa0)
	e.waitReadable(t, e.b)
	// Destroying a REQ_SENT id sends REJ to the passive side.
	_, err := e.a.DestroyID(a)
	must(t, err)
	// The REJ reaches b's CM asynchronously: wait until it is queued
	// (on the listener) before GET_EVENT delivers the REQ, or it would be
	// the delivered child's own event.
	queuedOnListener := func() int {
		for _, f := range e.d.Device.Files() {
			for _, x := range f.IDs {
				if x.ID == e.listener {
					return x.QueuedEvents
				}
			}
		}
		return 0
	}
	for deadline := time.Now().Add(wait); queuedOnListener() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("the REJ never reached the listener's queue (%d events queued)", queuedOnListener())
		}
		time.Sleep(time.Millisecond)
	}
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	rej, err := e.b.Expect(abi.CMREJReceived, wait)
	must(t, err)
	if rej.ID != e.listener || rej.UID != 0xb0 {
		t.Errorf("REJ for id %d uid %#x, want the listener %d with its uid 0xb0", rej.ID, rej.UID, e.listener)
	}
	n, err := e.b.DestroyID(req.ID)
	must(t, err)
	if n != 0 {
		t.Errorf("child events_reported %d, want 0", n)
	}
	n, err = e.b.DestroyID(e.listener)
	must(t, err)
	if n != 2 {
		t.Errorf("listener events_reported %d, want 2 (the REQ and the REJ)", n)
	}
}

// Once its REQ is delivered a new connection's events are its own, with
// uid 0 until SEND_REP sets one, as in the kernel.
func TestChildEventAfterDelivery(t *testing.T) {
	e := newEnv(t, nil)
	a := e.req(t, 0xa0)
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	_, err = e.a.DestroyID(a)
	must(t, err)
	rej, err := e.b.Expect(abi.CMREJReceived, wait)
	must(t, err)
	if rej.ID != req.ID || rej.UID != 0 {
		t.Errorf("REJ for id %d uid %#x, want the child %d with uid 0", rej.ID, rej.UID, req.ID)
	}
	n, err := e.b.DestroyID(req.ID)
	must(t, err)
	if n != 1 {
		t.Errorf("child events_reported %d, want 1 (the REJ)", n)
	}
}

// A listener destroyed with a new connection's REQ and a later event of
// that connection still queued purges both and rejects nothing twice.
func TestListenerDestroyedWithChildEventsQueued(t *testing.T) {
	e := newEnv(t, nil)
	a := e.req(t, 0xa0)
	e.waitReadable(t, e.b)
	_, err := e.a.DestroyID(a)
	must(t, err)
	queued := func() int {
		n := 0
		for _, f := range e.d.Device.Files() {
			n += f.QueuedEvents
		}
		return n
	}
	for deadline := time.Now().Add(wait); queued() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d events queued, want the REQ and the REJ", queued())
		}
	}
	n, err := e.b.DestroyID(e.listener)
	must(t, err)
	if n != 0 {
		t.Errorf("listener events_reported %d, want 0", n)
	}
	if q := queued(); q != 0 {
		t.Errorf("%d events left after the listener's DESTROY_ID", q)
	}
	if n := e.d.IDs.Len(); n != 0 {
		t.Errorf("%d ids left, want 0", n)
	}
}

// SEND_REP's uid becomes the child's cookie for its later events.
func TestSendREPSetsUID(t *testing.T) {
	e := newEnv(t, nil)
	a := e.req(t, 0xa0)
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	must(t, e.b.SendREP(&abi.REP{UID: 0xc0ffee, ID: req.ID, QPN: 0x200, PSN: 1}))
	_, err = e.a.Expect(abi.CMREPReceived, wait)
	must(t, err)
	must(t, e.a.SendPrivateData(abi.CmdSendRTU, a, nil))
	rtu, err := e.b.Expect(abi.CMRTUReceived, wait)
	must(t, err)
	if rtu.UID != 0xc0ffee || rtu.ID != req.ID {
		t.Errorf("RTU uid %#x id %d, want %#x %d", rtu.UID, rtu.ID, 0xc0ffee, req.ID)
	}
}

// Rule 2: ids die only by DESTROY_ID or close: a rejected connection's
// id stays, usable again.
func TestRejectedIDSurvives(t *testing.T) {
	e := newEnv(t, nil)
	a := e.req(t, 0xa0)
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	must(t, e.b.SendInfo(abi.CmdSendREJ, req.ID, 28, nil, nil))
	_, err = e.a.Expect(abi.CMREJReceived, wait)
	must(t, err)
	if _, err := e.a.AttrID(a); err != nil {
		t.Errorf("active id after REJ: %v", err)
	}
	if _, err := e.b.AttrID(req.ID); err != nil {
		t.Errorf("rejecting id after REJ: %v", err)
	}
	// IDLE again: it can start a new connection.
	must(t, e.a.SendREQ(e.a.REQ(a, e.sid, e.path, 0x300)))
	_, err = e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
}

// Writes from credentials other than the opener's fail with EACCES
// (ib_safe_file_access).
func TestWriteFromOtherCredentials(t *testing.T) {
	d := fakedut.New(t, nil)
	c, err := conformance.NewClient(d, false)
	must(t, err)
	ff := fake(c)
	ff.Caller.Uid++
	_, err = c.CreateID(0)
	wantErrno(t, "CREATE_ID from another uid", err, unix.EACCES)
	ff.Caller.Uid--
	_, err = c.CreateID(0)
	must(t, err)
}

// The caller's pid 0 (outside our pid namespace) is never dereferenced.
// The opener is invisible too: a pid-0 writer on a visible opener's file
// is another process, refused before (cred_test.go).
func TestInvisibleCaller(t *testing.T) {
	d := fakedut.New(t, nil)
	d.Caller.Pid = 0
	c, err := conformance.NewClient(d, false)
	must(t, err)
	_, err = c.Raw(conformance.Encode(abi.CmdCreateID, 4, &abi.CreateID{Response: 0x1000}))
	wantErrno(t, "CREATE_ID from pid 0", err, unix.EFAULT)
	if n := d.IDs.Len(); n != 0 {
		t.Errorf("%d ids left", n)
	}
}

// flow_control and srq are one-bit fields: the kernel set the REQ's and the
// REP's from the low bit of the u8 the client gave (IBA_SET), so 2 is 0.
func TestOneBitFieldsTakeTheLowBit(t *testing.T) {
	e := newEnv(t, nil)
	a, err := e.a.CreateID(0xa0)
	must(t, err)
	r := e.a.REQ(a, e.sid, e.path, 0x100+a)
	r.FlowControl, r.SRQ = 2, 2
	must(t, e.a.SendREQ(r))
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	if p := req.U.REQ(); p.FlowControl != 0 || p.SRQ != 0 {
		t.Errorf("REQ with flow_control 2 and srq 2 arrived with %d and %d, want 0 and 0", p.FlowControl, p.SRQ)
	}
	must(t, e.b.SendREP(&abi.REP{UID: 1, ID: req.ID, QPN: 0x200, PSN: 1, FlowControl: 3, SRQ: 3}))
	rep, err := e.a.Expect(abi.CMREPReceived, wait)
	must(t, err)
	if p := rep.U.REP(); p.FlowControl != 1 || p.SRQ != 1 {
		t.Errorf("REP with flow_control 3 and srq 3 arrived with %d and %d, want 1 and 1", p.FlowControl, p.SRQ)
	}
}
