package cmcore

import (
	"bytes"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw/sim"
)

// TestMRADelayedAnswersDuplicates: with IB_CM_MRA_FLAG_DELAY nothing is
// sent at once; the peer's retransmitted REQ gets the MRA (low 5 bits).
func TestMRADelayedAnswersDuplicates(t *testing.T) {
	h := newHarness(t)
	id := h.child()
	must(t, id.SendMRA(MRAFlagDelay|24, []byte("later")))
	none(t, h.sent())
	h.inject(0x77, peerREQ(0x1234))
	m := one[*wire.MRA](t, h.sent())
	if m.ServiceTimeout != 24 || m.MessageMRAed != wire.MessageREQ || !bytes.HasPrefix(m.PrivateData, []byte("later")) {
		t.Errorf("MRA %+v", m)
	}
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("events %v", evs)
	}
}

func TestREPReceivedEvent(t *testing.T) {
	h := newHarness(t)
	id := h.reach("REQ_SENT")
	rep := h.peerREP(id)
	rep.FailoverAccepted, rep.SRQ, rep.EndToEndFlowControl = 2, true, true
	h.inject(1, rep)
	evs := h.takeEvents()
	if len(evs) != 1 {
		t.Fatalf("events %v", evs)
	}
	want := REPEventParam{
		RemoteCAGUID: peerGUID, RemoteQPN: peerQPN, StartingPSN: 0x3000,
		ResponderResources: rep.InitiatorDepth, InitiatorDepth: rep.ResponderResources, // swapped
		TargetACKDelay: 15, FailoverAccepted: 2, FlowControl: true, RNRRetryCount: 5, SRQ: true,
	}
	if evs[0].REP != want {
		t.Errorf("REP params %+v, want %+v", evs[0].REP, want)
	}
	if a := id.Attr(); a.RemoteCommID != peerComm {
		t.Errorf("remote comm ID %#x", a.RemoteCommID)
	}
}

// TestDREQForUnknownID: answered with a DREP built from the DREQ: IDs
// swapped, same TID, back to the source.
func TestDREQForUnknownID(t *testing.T) {
	h := newHarness(t)
	h.inject(0xfeed, &wire.DREQ{LocalCommID: 0x1111, RemoteCommID: 0x2222, RemoteQPN: 5})
	ep := h.port.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if len(ep.sent) != 1 {
		t.Fatalf("sent %d", len(ep.sent))
	}
	hdr, m, _ := wire.Decode(&ep.sent[0].mad)
	d, ok := m.(*wire.DREP)
	if !ok || d.LocalCommID != 0x2222 || d.RemoteCommID != 0x1111 || hdr.TID != 0xfeed || ep.sent[0].dst.LID != peerLID {
		t.Errorf("answer %+v TID %#x to %+v", m, hdr.TID, ep.sent[0].dst)
	}
}

// TestCommEstStopsREPRetransmission: the QP saw traffic before the RTU.
func TestCommEstStopsREPRetransmission(t *testing.T) {
	h := newHarness(t)
	id := h.reach("REP_SENT")
	must(t, id.Notify(NotifyCommEst))
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventUserEstablished {
		t.Fatalf("events %v", evs)
	}
	h.clk.Advance(time.Hour)
	none(t, h.sent())
	// The late RTU is a duplicate now.
	h.inject(1, &wire.RTU{LocalCommID: peerComm, RemoteCommID: id.localID})
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("late RTU gave %v", evs)
	}
}

// TestDestroyChildFromListenerHandler: the listener's handler rejects a
// new connection by destroying it inside the REQ event.
func TestDestroyChildFromListenerHandler(t *testing.T) {
	h := newHarness(t)
	l := h.newID()
	must(t, l.Listen(0x1234, 0))
	h.onEvent = func(ev *Event) Outcome { ev.ID.Destroy(); return Keep }
	h.inject(0x77, peerREQ(0x1234))
	rejWith(wire.REJConsumerDefined, nil, wire.MessageREQ, true)(t, h.sent())
	if ids, _ := h.cm.Count(); ids != 1 {
		t.Errorf("%d ids, want the listener only", ids)
	}
}

// TestSimRoCEConnect: a full lifecycle between two RoCE devices (GRH on
// every MAD, LIDs 0).
func TestSimRoCEConnect(t *testing.T) {
	n := newSimNet(t, 1, sim.Knobs{})
	da, err := n.f.AddRoCE("ra", 1)
	must(t, err)
	db, err := n.f.AddRoCE("rb", 1)
	must(t, err)
	ca, cb := n.startCM(da), n.startCM(db)
	t.Cleanup(n.close)
	ra, rb := newRecorder(), newRecorder()
	var child *ID
	rb.react = func(ev *Event) Outcome {
		switch ev.Type {
		case EventREQReceived:
			child = ev.ID
			if ev.REQ.Primary.HopLimit == 0 || ev.REQ.Primary.DLID != 0 {
				t.Errorf("RoCE path %+v", ev.REQ.Primary)
			}
			return destroyIf(ev.ID.SendREP(&REPParams{QPN: 0x200}))
		case EventDREQReceived:
			return destroyIf(ev.ID.SendDREP(nil))
		}
		return Keep
	}
	ra.react = func(ev *Event) Outcome {
		if ev.Type == EventREPReceived {
			return destroyIf(ev.ID.SendRTU(nil))
		}
		return Keep
	}
	l := cb.CreateID(rb.handle)
	must(t, l.Listen(0x1234, 0))
	aa, _ := da.Port(1).Attr()
	ba, _ := db.Port(1).Attr()
	p := testREQParams()
	p.Primary = &PathRecord{SGID: aa.GIDs[0].GID, DGID: ba.GIDs[0].GID, PKey: 0xffff, MTU: 3, HopLimit: 1, PacketLifeTime: 18}
	a := ca.CreateID(ra.handle)
	must(t, a.SendREQ(p))
	n.run(time.Second)
	must(t, a.SendDREQ(nil))
	n.run(time.Minute)
	wantEvents(t, "active", ra.log[a], EventREPReceived, EventDREPReceived, EventTimewaitExit)
	wantEvents(t, "passive", rb.log[child], EventREQReceived, EventRTUReceived, EventDREQReceived, EventTimewaitExit)
}
