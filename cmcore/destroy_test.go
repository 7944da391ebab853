package cmcore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"golang.org/x/sys/unix"
)

// TestDestroyTable is the ib_destroy_cm_id table of ib-cm.md §3.2: what
// goes out per state, then silence: no retransmission and no event ever.
func TestDestroyTable(t *testing.T) {
	guid := make([]byte, 8)
	binary.BigEndian.PutUint64(guid, localGUID)
	cases := []struct {
		state string
		check func(t *testing.T, sent []wire.Message)
	}{
		{"IDLE", none},
		{"LISTEN", none},
		{"SIDR_REQ_SENT", none},
		{"SIDR_REQ_RCVD", func(t *testing.T, s []wire.Message) {
			r := one[*wire.SIDRREP](t, s)
			if r.Status != wire.SIDRReject || r.RequestID != peerComm {
				t.Errorf("SIDR_REP %+v, want status REJECT for %#x", r, peerComm)
			}
		}},
		{"REQ_SENT", rejWith(wire.REJTimeout, guid, wire.MessageOther, false)},
		{"MRA_REQ_RCVD", rejWith(wire.REJTimeout, guid, wire.MessageOther, false)},
		{"REQ_RCVD", rejWith(wire.REJConsumerDefined, nil, wire.MessageREQ, true)},
		{"MRA_REQ_SENT", rejWith(wire.REJConsumerDefined, nil, wire.MessageREQ, false)},
		{"REP_SENT", rejWith(wire.REJConsumerDefined, nil, wire.MessageOther, false)},
		{"MRA_REP_RCVD", rejWith(wire.REJConsumerDefined, nil, wire.MessageOther, false)},
		{"REP_RCVD", rejWith(wire.REJConsumerDefined, nil, wire.MessageREP, false)},
		{"MRA_REP_SENT", rejWith(wire.REJConsumerDefined, nil, wire.MessageREP, false)},
		{"ESTABLISHED", func(t *testing.T, s []wire.Message) {
			d := one[*wire.DREQ](t, s)
			if d.RemoteQPN != peerQPN || d.RemoteCommID != peerComm {
				t.Errorf("DREQ %+v", d)
			}
		}},
		{"ESTABLISHED/LAP_SENT", func(t *testing.T, s []wire.Message) { one[*wire.DREQ](t, s) }},
		{"DREQ_SENT", none},
		{"DREQ_RCVD", func(t *testing.T, s []wire.Message) { one[*wire.DREP](t, s) }},
		{"TIMEWAIT", none},
	}
	for _, c := range cases {
		t.Run(c.state, func(t *testing.T) {
			h := newHarness(t)
			id := h.reach(c.state)
			id.Destroy()
			c.check(t, h.sent())
			// Nothing more, ever: no retransmission, no event, and the
			// id's comm ID is released once timewait is over.
			h.clk.Advance(time.Hour)
			if s := h.sent(); len(s) != 0 {
				t.Errorf("after destroy the CM still sent %v", s)
			}
			if evs := h.takeEvents(); len(evs) != 0 {
				t.Errorf("after destroy got events %v", evs)
			}
			if ids, _ := h.cm.Count(); ids > 1 { // the listener of passive states
				t.Errorf("%d ids left after destroy and timewait", ids)
			}
			id.Destroy() // twice is harmless
		})
	}
}

func none(t *testing.T, s []wire.Message) {
	t.Helper()
	if len(s) != 0 {
		t.Errorf("sent %v, want nothing", s)
	}
}

func one[T wire.Message](t *testing.T, s []wire.Message) T {
	t.Helper()
	var zero T
	if len(s) != 1 {
		t.Fatalf("sent %d messages %v, want one %T", len(s), s, zero)
	}
	m, ok := s[0].(T)
	if !ok {
		t.Fatalf("sent %T, want %T", s[0], zero)
	}
	return m
}

// rejWith checks a REJ's reason, ARI, Message Rejected and whether the
// Local Comm ID is zero (§3.3).
func rejWith(reason uint16, ari []byte, rejected uint8, zeroLocal bool) func(*testing.T, []wire.Message) {
	return func(t *testing.T, s []wire.Message) {
		t.Helper()
		r := one[*wire.REJ](t, s)
		if r.Reason != reason || !bytes.Equal(r.ARI, ari) || r.MessageRejected != rejected || (r.LocalCommID == 0) != zeroLocal {
			t.Errorf("REJ reason %d ARI %x rejected %d local %#x; want %d %x %d zero-local=%v",
				r.Reason, r.ARI, r.MessageRejected, r.LocalCommID, reason, ari, rejected, zeroLocal)
		}
	}
}

// TestDestroyKeepsCommIDUntilTimewaitEnds: a comm ID is not handed out
// again while its timewait runs, and is afterwards.
func TestDestroyKeepsCommIDUntilTimewaitEnds(t *testing.T) {
	h := newHarness(t)
	id := h.reach("TIMEWAIT")
	old := id.localID
	id.Destroy()
	if ids, _ := h.cm.Count(); ids != 1 {
		t.Fatalf("comm ID released during timewait (ids = %d)", ids)
	}
	if h.cm.ids.lookup(old) != id {
		t.Fatal("timewait id not held")
	}
	if got := h.cm.acquire(old, peerComm); got != nil {
		t.Fatal("a destroyed id is still found by lookups")
	}
	h.clk.Advance(time.Hour)
	if ids, _ := h.cm.Count(); ids != 0 {
		t.Fatalf("comm ID not released after timewait (ids = %d)", ids)
	}
}

// TestDestroyFromHandler: Destroy inside the id's own handler returns, and
// no later event is delivered.
func TestDestroyFromHandler(t *testing.T) {
	h := newHarness(t)
	id := h.reach("ESTABLISHED")
	h.onEvent = func(ev *Event) Outcome { ev.ID.Destroy(); return Keep }
	h.inject(0x66, &wire.DREQ{LocalCommID: peerComm, RemoteCommID: id.localID, RemoteQPN: localQPN})
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventDREQReceived {
		t.Fatalf("events %v", evs)
	}
	one[*wire.DREP](t, h.sent()) // destroy in DREQ_RCVD answers
	h.clk.Advance(time.Hour)
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Fatalf("events after destroy: %v", evs)
	}
}

// TestDestroyDuringRunningHandler: Destroy from another goroutine while
// the id's handler runs does its work at once and returns without waiting
// for the handler (this test asserted the kernel's wait before issue 16.2:
// no Destroy can both wait for a running handler and be callable from that
// handler without knowing which goroutine calls it, and waiting is what
// made handlers of two CMs deadlock; see TestCrossCMDestroyFromHandlers).
// The handler, still running, finds the id gone; no later event comes.
func TestDestroyDuringRunningHandler(t *testing.T) {
	h := newHarness(t)
	id := h.reach("ESTABLISHED")
	inHandler, release := make(chan struct{}), make(chan struct{})
	var late error
	h.onEvent = func(ev *Event) Outcome {
		close(inHandler)
		<-release
		late = ev.ID.SendDREP(nil)
		return Destroy // already destroyed: nothing more happens
	}
	injected := make(chan struct{})
	go func() {
		h.inject(0x66, &wire.DREQ{LocalCommID: peerComm, RemoteCommID: id.localID, RemoteQPN: localQPN})
		close(injected)
	}()
	<-inHandler
	destroyed := make(chan struct{})
	go func() { id.Destroy(); close(destroyed) }()
	select {
	case <-destroyed:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Destroy waits for the running handler")
	}
	one[*wire.DREP](t, h.sent()) // destroy in DREQ_RCVD answered at once
	close(release)
	<-injected
	if !errors.Is(late, unix.EINVAL) {
		t.Errorf("SendDREP from the handler after Destroy: %v, want EINVAL", late)
	}
	none(t, h.sent())
	h.clk.Advance(time.Hour)
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventDREQReceived {
		t.Fatalf("events %v, want the DREQ only", evs)
	}
	if ids, _ := h.cm.Count(); ids != 0 {
		t.Errorf("%d ids left", ids)
	}
}

// TestDestroyListenerRejectsUndeliveredRequests: a REQ event still queued
// when its listener goes away is not lost silently: the new connection is
// rejected (consumer defined), as ucm's purge did.
func TestDestroyListenerRejectsUndeliveredRequests(t *testing.T) {
	h := newHarness(t)
	l := h.newID()
	must(t, l.Listen(0x1234, 0))
	other := h.reach("ESTABLISHED")
	// While the DREQ event of another id is being handled, a REQ arrives
	// for l and l is destroyed before its event is delivered.
	h.onEvent = func(ev *Event) Outcome {
		if ev.Type == EventDREQReceived {
			h.onEvent = nil
			req := peerREQ(0x1234)
			req.LocalCommID, req.LocalQPN = peerComm+1, peerQPN+1
			h.inject(0x77, req)
			l.Destroy()
		}
		return Keep
	}
	h.sent()
	h.inject(0x66, &wire.DREQ{LocalCommID: peerComm, RemoteCommID: other.localID, RemoteQPN: localQPN})
	for _, ev := range h.takeEvents() {
		if ev.Type == EventREQReceived {
			t.Fatal("REQ delivered on a destroyed listener")
		}
	}
	rejWith(wire.REJConsumerDefined, nil, wire.MessageREQ, true)(t, h.sent())
}

// Destroy reports an id the CM keeps for its timewait, and the release
// hook gets its context once the CM lets go: at the timewait's end, or at
// Close; an id that does not linger is never reported.
func TestDestroyLingersUntilReleased(t *testing.T) {
	h := newHarness(t)
	var released []any
	h.cm.OnReleased(func(ctx any) { released = append(released, ctx) })

	idle := h.newID()
	idle.SetContext("idle")
	if idle.Destroy() {
		t.Error("an IDLE id lingers after Destroy")
	}
	id := h.reach("ESTABLISHED")
	id.SetContext("established")
	if !id.Destroy() {
		t.Fatal("an ESTABLISHED id, now in timewait, does not linger")
	}
	if id.Destroy() {
		t.Error("a second Destroy reported the id lingering again")
	}
	if len(released) != 0 {
		t.Fatalf("released %v before the timewait ended", released)
	}
	h.clk.Advance(msDuration(convertToMs(id.av.Timeout)))
	if len(released) != 1 || released[0] != "established" {
		t.Fatalf("released %v after the timewait, want [established]", released)
	}

	other := h.reach("ESTABLISHED")
	other.SetContext("at close")
	if !other.Destroy() {
		t.Fatal("the second connection does not linger")
	}
	h.cm.Close()
	if len(released) != 2 || released[1] != "at close" {
		t.Fatalf("released %v after Close, want [established, at close]", released)
	}
}

// An XRC target destroyed in ESTABLISHED sends nothing and keeps nothing:
// its QP disconnects nothing, so there is no DREQ and no timewait
// (cm_destroy_id goes straight to IDLE), and its comm ID is free at once.
func TestDestroyEstablishedXRCTargetDoesNotLinger(t *testing.T) {
	h := newHarness(t)
	l := h.newID()
	must(t, l.Listen(0x7777, 0))
	req := peerREQ(0x7777)
	req.TransportType, req.ExtendedTransport = wire.TransportExtended, wire.ExtendedTransportXRC
	h.inject(9, req)
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREQReceived {
		t.Fatalf("events %+v", evs)
	}
	id := evs[0].ID
	must(t, id.SendREP(&REPParams{QPN: localQPN}))
	h.inject(10, &wire.RTU{LocalCommID: peerComm, RemoteCommID: id.localID})
	if s, _ := id.State(); s != StateEstablished || id.qpType != QPTypeXRCTgt {
		t.Fatalf("state %v, QP type %v: want an ESTABLISHED XRC target", s, id.qpType)
	}
	h.sent()
	if id.Destroy() {
		t.Error("the XRC target lingers after Destroy")
	}
	none(t, h.sent())
	if ids, _ := h.cm.Count(); ids != 1 { // the listener
		t.Errorf("%d ids held after Destroy, want only the listener's", ids)
	}
}
