//go:build e2e

package e2e

import (
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad"
)

// Two cmcore CMs in one guest, one on rxe0 and one on rxe1, both over
// hw/umad, talking the IB CM protocol through the kernel's MAD layer and
// Soft-RoCE over the veth pair (link-local GIDs: the only ones that carry
// MADs between the two devices of one kernel).

// cmEvent is the part of a cmcore.Event a test looks at after the handler
// returned (the Event itself is only valid during the call).
type cmEvent struct {
	typ    cmcore.EventType
	id     *cmcore.ID
	reason uint16 // REJ_RECEIVED
	state  cmcore.State
}

// cmSide is one CM with an event log and a reaction to each event (run
// inside the handler, so it must not block).
type cmSide struct {
	name  string
	cm    *cmcore.CM
	mu    sync.Mutex
	log   []cmEvent
	ch    chan cmEvent
	react func(ev *cmcore.Event) error
}

// handle runs react; an error from it destroys the id (cmcore.Destroy).
func (s *cmSide) handle(ev *cmcore.Event) cmcore.Outcome {
	var err error
	if s.react != nil {
		err = s.react(ev)
	}
	st, _ := ev.ID.State()
	e := cmEvent{typ: ev.Type, id: ev.ID, reason: ev.REJ.Reason, state: st}
	s.mu.Lock()
	s.log = append(s.log, e)
	s.mu.Unlock()
	select {
	case s.ch <- e:
	default: // the log keeps it; nobody waits that far behind
	}
	if err != nil {
		return cmcore.Destroy
	}
	return cmcore.Keep
}

// wait returns the next event, failing the test after timeout.
func (s *cmSide) wait(t *testing.T, want cmcore.EventType, timeout time.Duration) cmEvent {
	t.Helper()
	select {
	case e := <-s.ch:
		if e.typ != want {
			t.Fatalf("%s: event %v, want %v (events so far %v)", s.name, e.typ, want, s.types())
		}
		return e
	case <-time.After(timeout):
		t.Fatalf("%s: no %v within %v (events so far %v; stats %+v)", s.name, want, timeout, s.types(), s.cm.Stats())
	}
	return cmEvent{}
}

func (s *cmSide) types() []cmcore.EventType {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ts []cmcore.EventType
	for _, e := range s.log {
		ts = append(ts, e.typ)
	}
	return ts
}

// rxeDevices discovers rxe0 and rxe1 through hw/umad.
func rxeDevices(t *testing.T) (d0, d1 hw.Device) {
	t.Helper()
	devs, err := umad.Discover(umad.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		switch d.Name() {
		case "rxe0":
			d0 = d
		case "rxe1":
			d1 = d
		}
	}
	if d0 == nil || d1 == nil {
		t.Fatalf("discovered %v: want rxe0 and rxe1", devs)
	}
	return d0, d1
}

func startCM(t *testing.T, name string, dev hw.Device) *cmSide {
	t.Helper()
	s := &cmSide{name: name, ch: make(chan cmEvent, 64)}
	s.cm = cmcore.New(dev, cmcore.Options{})
	if err := s.cm.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := s.cm.Close(); err != nil {
			t.Errorf("%s: close: %v", name, err)
		}
	})
	return s
}

// listen makes a listener on s for sid, destroyed when the test ends
// (after its deferred calls).
func (s *cmSide) listen(t *testing.T, sid uint64) {
	t.Helper()
	l := s.cm.CreateID(s.handle)
	if err := l.Listen(sid, 0); err != nil {
		t.Fatalf("%s: listen on %#x: %v", s.name, sid, err)
	}
	t.Cleanup(func() { l.Destroy() })
}

// roceLinkLocalPath is the path record an application (librdmacm's
// cma_resolve_iboe_route) builds on RoCE from the two ports' GID tables:
// link-local GIDs, no LIDs, the hop limit of a routed GRH, P_Key 0xffff,
// the port's MTU (1024 on rxe over a 1500-byte netdev).
func roceLinkLocalPath(t *testing.T, from, to hw.Device) *cmcore.PathRecord {
	t.Helper()
	sg := linkLocal(t, from.Ports()[0])
	dg := linkLocal(t, to.Ports()[0])
	return &cmcore.PathRecord{
		SGID: sg.GID, DGID: dg.GID, GIDType: sg.Type,
		HopLimit: 64, PKey: 0xffff, MTU: 3, Rate: 0,
		PacketLifeTime: 14, Reversible: true, NumbPath: 1,
	}
}

func cmREQParams(path *cmcore.PathRecord, sid uint64, qpn uint32) *cmcore.REQParams {
	return &cmcore.REQParams{
		Primary: path, ServiceID: sid, QPN: qpn, QPType: cmcore.QPTypeRC,
		StartingPSN: 0x123456, ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: 18, LocalCMResponseTimeout: 18,
		RetryCount: 7, RNRRetryCount: 7, MaxCMRetries: 5,
		PrivateData: []byte("e2e cmcore REQ"),
	}
}

func checkState(t *testing.T, who string, id *cmcore.ID, want cmcore.State) {
	t.Helper()
	if st, _ := id.State(); st != want {
		t.Errorf("%s: state %v, want %v", who, st, want)
	}
}

// TestCMConnectDisconnectUMAD: rxe0 connects to a listener on rxe1
// (REQ/REP/RTU), then disconnects (DREQ/DREP); both sides see the events
// in order and end in TIMEWAIT, then TIMEWAIT_EXIT.
func TestCMConnectDisconnectUMAD(t *testing.T) {
	d0, d1 := rxeDevices(t)
	a := startCM(t, "rxe0", d0)
	b := startCM(t, "rxe1", d1)
	const sid = 0x0000000001060000 | 20079
	var reqParam cmcore.REQEventParam
	var repParam cmcore.REPEventParam
	var reqPD []byte
	// The passive side answers the REQ only once the test has seen the
	// active id in REQ_SENT: a live peer can otherwise complete the whole
	// handshake before the sender's goroutine looks (a loaded CI host did).
	sawREQSent := make(chan struct{})
	letREPGo := sync.OnceFunc(func() { close(sawREQSent) })
	b.react = func(ev *cmcore.Event) error {
		switch ev.Type {
		case cmcore.EventREQReceived:
			<-sawREQSent
			reqParam = ev.REQ
			reqPD = slices.Clone(ev.PrivateData)
			return ev.ID.SendREP(&cmcore.REPParams{
				QPN: 0x000b0b, StartingPSN: 0x654321, ResponderResources: 1, InitiatorDepth: 1,
				RNRRetryCount: 7, PrivateData: []byte("e2e cmcore REP"),
			})
		case cmcore.EventDREQReceived:
			return ev.ID.SendDREP(nil)
		}
		return nil
	}
	a.react = func(ev *cmcore.Event) error {
		if ev.Type == cmcore.EventREPReceived {
			repParam = ev.REP
			return ev.ID.SendRTU(nil)
		}
		return nil
	}
	b.listen(t, sid)

	path := roceLinkLocalPath(t, d0, d1)
	id := a.cm.CreateID(a.handle)
	defer id.Destroy()
	defer letREPGo() // first: no Destroy may wait on b's delivery of the REQ
	t0 := time.Now()
	if err := id.SendREQ(cmREQParams(path, sid, 0x000a0a)); err != nil {
		t.Fatal(err)
	}
	checkState(t, "active after REQ", id, cmcore.StateREQSent)
	letREPGo()

	const wait = 20 * time.Second
	breq := b.wait(t, cmcore.EventREQReceived, wait)
	if breq.state != cmcore.StateREPSent {
		t.Errorf("passive after REP: %v, want REP_SENT", breq.state)
	}
	are := a.wait(t, cmcore.EventREPReceived, wait)
	if are.state != cmcore.StateEstablished {
		t.Errorf("active after RTU: %v, want ESTABLISHED", are.state)
	}
	b.wait(t, cmcore.EventRTUReceived, wait)
	t.Logf("REQ/REP/RTU in %v", time.Since(t0))
	checkState(t, "active", id, cmcore.StateEstablished)
	checkState(t, "passive", breq.id, cmcore.StateEstablished)

	// what each side learned about the other
	if reqParam.RemoteQPN != 0x000a0a || reqParam.RemoteCAGUID != d0.NodeGUID() || reqParam.StartingPSN != 0x123456 || reqParam.QPType != cmcore.QPTypeRC {
		t.Errorf("REQ event %+v", reqParam)
	}
	if reqParam.Primary.SGID != path.DGID || reqParam.Primary.DGID != path.SGID || reqParam.Primary.MTU != 3 || reqParam.Primary.PKey != 0xffff {
		t.Errorf("REQ event primary path %+v, want the mirror of %+v", reqParam.Primary, *path)
	}
	if string(reqPD[:14]) != "e2e cmcore REQ" {
		t.Errorf("REQ private data %q", reqPD)
	}
	if repParam.RemoteQPN != 0x000b0b || repParam.RemoteCAGUID != d1.NodeGUID() || repParam.StartingPSN != 0x654321 {
		t.Errorf("REP event %+v", repParam)
	}
	aa, ba := id.Attr(), breq.id.Attr()
	if aa.RemoteCommID != ba.LocalCommID || ba.RemoteCommID != aa.LocalCommID {
		t.Errorf("comm ids: active %+v, passive %+v", aa, ba)
	}
	if aa.ServiceID != sid || ba.ServiceID != sid {
		t.Errorf("service ids %#x %#x, want %#x", aa.ServiceID, ba.ServiceID, uint64(sid))
	}

	t1 := time.Now()
	if err := id.SendDREQ(nil); err != nil {
		t.Fatal(err)
	}
	bd := b.wait(t, cmcore.EventDREQReceived, wait)
	if bd.state != cmcore.StateTimewait {
		t.Errorf("passive after DREP: %v, want TIMEWAIT", bd.state)
	}
	ad := a.wait(t, cmcore.EventDREPReceived, wait)
	if ad.state != cmcore.StateTimewait {
		t.Errorf("active after DREP: %v, want TIMEWAIT", ad.state)
	}
	t.Logf("DREQ/DREP in %v", time.Since(t1))
	a.wait(t, cmcore.EventTimewaitExit, wait)
	b.wait(t, cmcore.EventTimewaitExit, wait)
	checkState(t, "active", id, cmcore.StateIdle)
	checkState(t, "passive", breq.id, cmcore.StateIdle)

	for _, s := range []*cmSide{a, b} {
		st := s.cm.Stats()
		t.Logf("%s: stats %+v, events %v", s.name, st, s.types())
		if st.Retransmitted != 0 || st.TimedOut != 0 || st.SendErrors != 0 {
			t.Errorf("%s: stats %+v: want no retransmission, timeout or send error", s.name, st)
		}
	}
	wantSeq(t, "active", a.types(), cmcore.EventREPReceived, cmcore.EventDREPReceived, cmcore.EventTimewaitExit)
	wantSeq(t, "passive", b.types(), cmcore.EventREQReceived, cmcore.EventRTUReceived, cmcore.EventDREQReceived, cmcore.EventTimewaitExit)
}

// TestCMRejectInvalidServiceIDUMAD: a REQ for a service id nobody listens
// on (a listener exists, for another id) is answered with REJ 8, and the
// active id returns to IDLE.
func TestCMRejectInvalidServiceIDUMAD(t *testing.T) {
	d0, d1 := rxeDevices(t)
	a := startCM(t, "rxe0", d0)
	b := startCM(t, "rxe1", d1)
	b.listen(t, 0x1234)
	id := a.cm.CreateID(a.handle)
	defer id.Destroy()
	if err := id.SendREQ(cmREQParams(roceLinkLocalPath(t, d0, d1), 0x1235, 0x000a0b)); err != nil {
		t.Fatal(err)
	}
	e := a.wait(t, cmcore.EventREJReceived, 20*time.Second)
	if e.reason != wire.REJInvalidServiceID {
		t.Errorf("REJ reason %d, want %d (invalid service id)", e.reason, wire.REJInvalidServiceID)
	}
	checkState(t, "active after REJ", id, cmcore.StateIdle)
	if got := b.types(); len(got) != 0 {
		t.Errorf("passive listener got events %v, want none", got)
	}
	if ids, _ := b.cm.Count(); ids != 1 {
		t.Errorf("passive CM holds %d ids, want 1 (the listener)", ids)
	}
}

func wantSeq(t *testing.T, who string, got []cmcore.EventType, want ...cmcore.EventType) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s events %v, want %v", who, got, want)
	}
}

// TestCMFirstREQToUnresolvedPeer: with the neighbour tables flushed, the
// REQ's umad write blocks while the kernel resolves the peer's MAC (about
// a second on rxe). A REQ whose whole retry budget is shorter than that
// (three transmissions 192 ms apart) still connects, without a
// retransmission: its waits start when the write returns, as the MAD
// layer's start at the send's completion (docs/ib-cm.md §4.5). Timed from
// the decision to send, as cmcore once did, the REQ was retransmitted
// while its first write still blocked (9 runs of 9).
func TestCMFirstREQToUnresolvedPeer(t *testing.T) {
	d0, d1 := rxeDevices(t)
	a := startCM(t, "rxe0", d0)
	b := startCM(t, "rxe1", d1)
	const sid = 0x0000000001060000 | 20081
	b.react = func(ev *cmcore.Event) error {
		if ev.Type == cmcore.EventREQReceived {
			return ev.ID.SendREP(&cmcore.REPParams{QPN: 0x000b0b, StartingPSN: 0x654321, RNRRetryCount: 7})
		}
		return nil
	}
	a.react = func(ev *cmcore.Event) error {
		if ev.Type == cmcore.EventREPReceived {
			return ev.ID.SendRTU(nil)
		}
		return nil
	}
	b.listen(t, sid)
	if out, err := exec.Command("ip", "-6", "neigh", "flush", "all").CombinedOutput(); err != nil {
		t.Fatalf("ip -6 neigh flush all: %v: %s", err, out)
	}
	path := roceLinkLocalPath(t, d0, d1) // packet lifetime 14: 64 ms (cm.c's convert)
	req := cmREQParams(path, sid, 0x000a0a)
	req.RemoteCMResponseTimeout, req.MaxCMRetries = 14, 2 // 2·64 + 64 ms apart, three times
	id := a.cm.CreateID(a.handle)
	defer id.Destroy()
	t0 := time.Now()
	if err := id.SendREQ(req); err != nil {
		t.Fatal(err)
	}
	t.Logf("SendREQ (and its umad write) returned after %v", time.Since(t0))
	are := a.wait(t, cmcore.EventREPReceived, 20*time.Second)
	if are.state != cmcore.StateEstablished {
		t.Errorf("active after RTU: %v, want ESTABLISHED", are.state)
	}
	b.wait(t, cmcore.EventREQReceived, 20*time.Second)
	b.wait(t, cmcore.EventRTUReceived, 20*time.Second)
	t.Logf("REQ/REP/RTU in %v with the peer's MAC unresolved", time.Since(t0))
	if st := a.cm.Stats(); st.Retransmitted != 0 || st.TimedOut != 0 {
		t.Errorf("rxe0: stats %+v: want no retransmission or timeout", st)
	}
}
