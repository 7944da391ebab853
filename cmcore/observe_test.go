package cmcore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

// seenMAD is a copy of one MADEvent.
type seenMAD struct {
	at     time.Time
	port   int
	dir    MADDirection
	attr   uint16
	mad    hw.MAD
	peer   hw.Address
	retx   bool
	reason string
}

type madLog struct {
	mu   sync.Mutex
	seen []seenMAD
}

func (l *madLog) ObserveMAD(ev *MADEvent) {
	h, err := wire.DecodeHeader(ev.MAD)
	var attr uint16
	if err == nil {
		attr = h.AttrID
	}
	l.mu.Lock()
	l.seen = append(l.seen, seenMAD{ev.Time, ev.Port, ev.Dir, attr, *ev.MAD, ev.Peer, ev.Retransmission, ev.Reason})
	l.mu.Unlock()
}

func (l *madLog) take() []seenMAD {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seen
	l.seen = nil
	return s
}

// observedHarness is newHarness with an Observer on the CM.
func observedHarness(t *testing.T, obs Observer) *harness {
	t.Helper()
	h := newHarness(t)
	h.cm.Close()
	dev := h.port.dev
	h.cm = New(dev, Options{Clock: h.clk, CommIDOperand: 0x1000, Observer: obs})
	if err := h.cm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.cm.Close() })
	return h
}

func dirs(s []seenMAD) []MADDirection {
	var d []MADDirection
	for _, m := range s {
		d = append(d, m.dir)
	}
	return d
}

func sameDirs(a, b []MADDirection) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestObserveRetransmissions: the first REQ is MADSent, its retries
// MADRetransmitted (same bytes, Retransmission set), the final timeout
// MADTimedOut; times are the CM clock's, the peer is the REQ's destination.
func TestObserveRetransmissions(t *testing.T) {
	var log madLog
	h := observedHarness(t, &log)
	id := h.newID()
	start := h.clk.Now()
	must(t, id.SendREQ(testREQParams())) // 3 retries, 384 ms apart
	const interval = 2*64*time.Millisecond + 256*time.Millisecond
	for range 5 {
		h.clk.Advance(interval)
	}
	s := log.take()
	want := []MADDirection{MADSent, MADRetransmitted, MADRetransmitted, MADRetransmitted, MADTimedOut}
	if !sameDirs(dirs(s), want) {
		t.Fatalf("observed %v, want %v", dirs(s), want)
	}
	for i, m := range s {
		if m.attr != wire.AttrREQ || m.port != 1 || m.peer.LID != peerLID || m.peer.QPN != 1 {
			t.Errorf("event %d: attr %#x port %d peer %+v", i, m.attr, m.port, m.peer)
		}
		if m.mad != s[0].mad {
			t.Errorf("event %d: MAD differs from the first send", i)
		}
		if m.retx != (m.dir == MADRetransmitted) {
			t.Errorf("event %d (%v): Retransmission %v", i, m.dir, m.retx)
		}
		if at := m.at.Sub(start); at != time.Duration(i)*interval {
			t.Errorf("event %d (%v) at %v, want %v", i, m.dir, at, time.Duration(i)*interval)
		}
	}
	if st := h.cm.Stats(); st.Sent != 4 || st.Retransmitted != 3 || st.TimedOut != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestObserveReceive: a received MAD is observed before the answer it
// caused; an undecodable MAD and a message that matches nothing are
// MADDropped with their reason; a REQ that raises an event is received.
func TestObserveReceive(t *testing.T) {
	var log madLog
	h := observedHarness(t, &log)

	// A DREQ for no id: the CM answers with a DREP.
	h.inject(0x77, &wire.DREQ{LocalCommID: peerComm, RemoteCommID: 0xdead, RemoteQPN: localQPN})
	s := log.take()
	if !sameDirs(dirs(s), []MADDirection{MADReceived, MADSent}) || s[0].attr != wire.AttrDREQ || s[1].attr != wire.AttrDREP {
		t.Fatalf("DREQ for no id: observed %+v", s)
	}
	if s[0].peer.LID != peerLID || s[0].reason != "" {
		t.Errorf("received DREQ: peer %+v reason %q", s[0].peer, s[0].reason)
	}
	h.sent()

	// An RTU for no id: nothing answers, nothing happens.
	h.inject(0x78, &wire.RTU{LocalCommID: peerComm, RemoteCommID: 0xdead})
	s = log.take()
	if len(s) != 1 || s[0].dir != MADDropped || s[0].reason != "ignored" || s[0].attr != wire.AttrRTU {
		t.Fatalf("RTU for no id: observed %+v", s)
	}

	// Not a CM message.
	var r hw.Received
	r.MAD[0], r.MAD[1] = 1, 0x81 // base version 1, class 0x81: not CM
	r.Src = peerAddr
	h.injectMAD(&r)
	s = log.take()
	if len(s) != 1 || s[0].dir != MADDropped || len(s[0].reason) < len("undecodable: ") || s[0].reason[:13] != "undecodable: " {
		t.Fatalf("undecodable MAD: observed %+v", s)
	}
	if st := h.cm.Stats(); st.Dropped != 1 || st.Received != 3 {
		t.Errorf("stats %+v: want 3 received, 1 dropped", st)
	}

	// A REQ for a listener raises REQ_RECEIVED: received, nothing sent.
	l := h.newID()
	must(t, l.Listen(0x1234, 0))
	h.inject(0x79, peerREQ(0x1234))
	s = log.take()
	if !sameDirs(dirs(s), []MADDirection{MADReceived}) || s[0].attr != wire.AttrREQ {
		t.Fatalf("REQ for a listener: observed %+v", s)
	}
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventREQReceived {
		t.Fatalf("events %+v", evs)
	}
}

type failingEP struct{ fakeEP }

var errRefused = errors.New("no route to the peer")

func (e *failingEP) Send(context.Context, hw.Address, *hw.MAD) error { return errRefused }

type failingPort struct{ *fakePort }

func (p failingPort) OpenMAD(hw.Registration) (hw.Endpoint, error) {
	return &failingEP{fakeEP{closed: make(chan struct{})}}, nil
}

type failingDev struct{ *fakeDev }

func (d failingDev) Ports() []hw.Port { return []hw.Port{failingPort{d.ports[0]}} }

// TestObserveSendFailed: a refused send is MADSendFailed with the
// endpoint's error as Reason, a refused retransmission too, with
// Retransmission set.
func TestObserveSendFailed(t *testing.T) {
	var log madLog
	h := newHarness(t)
	h.cm.Close()
	h.cm = New(failingDev{h.port.dev}, Options{Clock: h.clk, CommIDOperand: 0x1000, Observer: &log})
	must(t, h.cm.Start())
	t.Cleanup(func() { h.cm.Close() })
	id := h.newID()
	must(t, id.SendREQ(testREQParams()))
	h.clk.Advance(384 * time.Millisecond)
	s := log.take()
	if !sameDirs(dirs(s), []MADDirection{MADSendFailed, MADSendFailed}) {
		t.Fatalf("observed %v", dirs(s))
	}
	if s[0].reason != errRefused.Error() || s[0].retx || !s[1].retx {
		t.Errorf("reasons %q %q, retransmission %v %v", s[0].reason, s[1].reason, s[0].retx, s[1].retx)
	}
	if st := h.cm.Stats(); st.SendErrors != 2 || st.Sent != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestObservers: the fan-out calls every observer, in order, with the
// same event.
func TestObservers(t *testing.T) {
	var order []string
	a := observerFunc(func(ev *MADEvent) { order = append(order, "a:"+ev.Dir.String()) })
	b := observerFunc(func(ev *MADEvent) { order = append(order, "b:"+ev.Dir.String()) })
	h := observedHarness(t, Observers{a, b})
	must(t, h.newID().SendREQ(testREQParams()))
	if len(order) != 2 || order[0] != "a:sent" || order[1] != "b:sent" {
		t.Fatalf("calls %v", order)
	}
	if MADDirection(42).String() != "MADDirection(42)" || MADTimedOut.String() != "timed-out" {
		t.Errorf("names %q %q", MADDirection(42), MADTimedOut)
	}
}

type observerFunc func(*MADEvent)

func (f observerFunc) ObserveMAD(ev *MADEvent) { f(ev) }

// timeObserver is a TimeObserver whose wish is set by the test.
type timeObserver struct {
	madLog
	want bool
}

func (o *timeObserver) WantsTime() bool { return o.want }

// A TimeObserver that wants no time gets events with a zero Time (the CM
// reads no clock for them); one that wants it, in Observers with another
// that does not, gets the CM's clock.
func TestObserverWithoutTime(t *testing.T) {
	idle := &timeObserver{}
	h := observedHarness(t, idle)
	must(t, h.newID().SendREQ(testREQParams()))
	h.inject(0x77, &wire.DREQ{LocalCommID: peerComm, RemoteCommID: 0xdead, RemoteQPN: localQPN})
	s := idle.take() // the REQ; the DREQ and the DREP answering it
	if !sameDirs(dirs(s), []MADDirection{MADSent, MADReceived, MADSent}) {
		t.Fatalf("observed %v", dirs(s))
	}
	for i, m := range s {
		if !m.at.IsZero() {
			t.Errorf("event %d (%v): Time %v, want zero", i, m.dir, m.at)
		}
	}

	idle.want = true
	other := &timeObserver{}
	h = observedHarness(t, Observers{other, idle})
	must(t, h.newID().SendREQ(testREQParams()))
	for _, o := range []*timeObserver{idle, other} {
		s := o.take()
		if len(s) != 1 || !s[0].at.Equal(h.clk.Now()) {
			t.Errorf("observed %+v, want one event at %v", s, h.clk.Now())
		}
	}
}

// On an endpoint that is a hw.Deliverer, the CM handles MADs in the
// function it gives Deliver (on the endpoint's reading goroutine), not
// through Recv: a DREQ for no id handed to it is answered with a DREP.
func TestCMUsesDeliverer(t *testing.T) {
	h := newHarnessOn(t, true)
	var f *func(*hw.Received)
	for deadline := time.Now().Add(10 * time.Second); f == nil; {
		if f = h.port.dep.f.Load(); f == nil {
			if time.Now().After(deadline) {
				t.Fatal("the CM never called Deliver")
			}
			time.Sleep(time.Millisecond)
		}
	}
	var r hw.Received
	must(t, wire.Encode(&r.MAD, 0x77, &wire.DREQ{LocalCommID: peerComm, RemoteCommID: 0xdead, RemoteQPN: localQPN}))
	r.Src = peerAddr
	(*f)(&r)
	if s := h.sent(); len(s) != 1 {
		t.Fatalf("sent %v, want one DREP", s)
	} else if _, ok := s[0].(*wire.DREP); !ok {
		t.Fatalf("sent %T, want a DREP", s[0])
	}
}
