package cmcore

import (
	"testing"

	"github.com/ucmd/ucmd/cmcore/wire"
)

// Every state an id can be in, reached through the protocol (API calls and
// peer messages), not by poking fields.
var reachable = []string{
	"IDLE", "LISTEN", "REQ_SENT", "MRA_REQ_RCVD", "REQ_RCVD", "MRA_REQ_SENT",
	"REP_SENT", "MRA_REP_RCVD", "REP_RCVD", "MRA_REP_SENT",
	"ESTABLISHED", "ESTABLISHED/passive", "ESTABLISHED/LAP_SENT", "ESTABLISHED/MRA_LAP_RCVD",
	"ESTABLISHED/LAP_RCVD", "ESTABLISHED/MRA_LAP_SENT", "ESTABLISHED/LAP_IDLE",
	"DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "SIDR_REQ_SENT", "SIDR_REQ_RCVD",
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// reach returns an id in the named state; sent MADs and events are cleared.
func (h *harness) reach(name string) *ID {
	t := h.t
	t.Helper()
	id := h.reach1(name)
	h.sent()
	h.takeEvents()
	return id
}

func (h *harness) child() *ID {
	h.t.Helper()
	l := h.newID()
	must(h.t, l.Listen(0x1234, 0))
	h.inject(0x77, peerREQ(0x1234))
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREQReceived {
		h.t.Fatalf("REQ to a listener gave events %v", evs)
	}
	return evs[0].ID
}

func (h *harness) reach1(name string) *ID {
	t := h.t
	t.Helper()
	switch name {
	case "IDLE":
		return h.newID()
	case "LISTEN":
		id := h.newID()
		must(t, id.Listen(0x9999, 0))
		return id
	case "REQ_SENT":
		id := h.newID()
		must(t, id.SendREQ(testREQParams()))
		return id
	case "MRA_REQ_RCVD":
		id := h.reach1("REQ_SENT")
		h.inject(1, &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageREQ, ServiceTimeout: 20})
		return id
	case "REP_RCVD":
		id := h.reach1("REQ_SENT")
		h.inject(1, h.peerREP(id))
		return id
	case "MRA_REP_SENT":
		id := h.reach1("REP_RCVD")
		must(t, id.SendMRA(20, nil))
		return id
	case "ESTABLISHED":
		id := h.reach1("REP_RCVD")
		must(t, id.SendRTU([]byte("rtu")))
		return id
	case "REQ_RCVD":
		return h.child()
	case "MRA_REQ_SENT":
		id := h.child()
		must(t, id.SendMRA(20, []byte("mra")))
		return id
	case "REP_SENT":
		id := h.child()
		must(t, id.SendREP(&REPParams{QPN: localQPN, StartingPSN: 0x4000, ResponderResources: 2, InitiatorDepth: 3}))
		return id
	case "MRA_REP_RCVD":
		id := h.reach1("REP_SENT")
		h.inject(1, &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageREP, ServiceTimeout: 20})
		return id
	case "ESTABLISHED/passive":
		id := h.reach1("REP_SENT")
		h.inject(1, &wire.RTU{LocalCommID: peerComm, RemoteCommID: id.localID})
		return id
	case "ESTABLISHED/LAP_SENT":
		id := h.reach1("ESTABLISHED")
		alt := testPath()
		alt.SLID, alt.DLID = 3, 4
		must(t, id.SendLAP(alt, nil))
		return id
	case "ESTABLISHED/MRA_LAP_RCVD":
		id := h.reach1("ESTABLISHED/LAP_SENT")
		h.inject(1, &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageOther, ServiceTimeout: 20})
		return id
	case "ESTABLISHED/LAP_RCVD":
		id := h.reach1("ESTABLISHED")
		h.inject(0x55, h.peerLAP(id))
		return id
	case "ESTABLISHED/MRA_LAP_SENT":
		id := h.reach1("ESTABLISHED/LAP_RCVD")
		must(t, id.SendMRA(20, nil))
		return id
	case "ESTABLISHED/LAP_IDLE":
		id := h.reach1("ESTABLISHED/LAP_RCVD")
		must(t, id.SendAPR(wire.APRSuccess, nil, nil))
		return id
	case "DREQ_SENT":
		id := h.reach1("ESTABLISHED")
		must(t, id.SendDREQ(nil))
		return id
	case "DREQ_RCVD":
		id := h.reach1("ESTABLISHED")
		h.inject(0x66, &wire.DREQ{LocalCommID: peerComm, RemoteCommID: id.localID, RemoteQPN: localQPN})
		return id
	case "TIMEWAIT":
		id := h.reach1("DREQ_SENT")
		h.inject(1, &wire.DREP{LocalCommID: peerComm, RemoteCommID: id.localID})
		return id
	case "SIDR_REQ_SENT":
		id := h.newID()
		must(t, id.SendSIDRREQ(&SIDRREQParams{Path: testPath(), ServiceID: 0x4444, TimeoutMs: 100, MaxCMRetries: 2}))
		return id
	case "SIDR_REQ_RCVD":
		l := h.newID()
		must(t, l.Listen(0x4444, 0))
		h.inject(0x88, &wire.SIDRREQ{RequestID: peerComm, PartitionKey: 0xffff, ServiceID: 0x4444})
		evs := h.takeEvents()
		if len(evs) != 1 || evs[0].Type != EventSIDRREQReceived {
			t.Fatalf("SIDR_REQ to a listener gave events %v", evs)
		}
		return evs[0].ID
	}
	t.Fatalf("unknown state %q", name)
	return nil
}

func (h *harness) peerLAP(id *ID) *wire.LAP {
	return &wire.LAP{
		LocalCommID: peerComm, RemoteCommID: id.localID, RemoteQPN: localQPN, RemoteCMResponseTimeout: 31,
		Alternate: wire.Path{LocalLID: 6, RemoteLID: 5, LocalGID: peerGID, RemoteGID: localGID, SubnetLocal: true, LocalACKTimeout: 15},
	}
}

// wantState names how reach's names map to (State, LAPState).
func wantState(name string) (State, LAPState) {
	switch name {
	case "ESTABLISHED", "ESTABLISHED/passive":
		return StateEstablished, LAPUninit
	case "ESTABLISHED/LAP_SENT":
		return StateEstablished, LAPSent
	case "ESTABLISHED/MRA_LAP_RCVD":
		return StateEstablished, LAPMRALAPRcvd
	case "ESTABLISHED/LAP_RCVD":
		return StateEstablished, LAPRcvd
	case "ESTABLISHED/MRA_LAP_SENT":
		return StateEstablished, LAPMRALAPSent
	case "ESTABLISHED/LAP_IDLE":
		return StateEstablished, LAPIdle
	}
	for s := StateIdle; s <= StateSIDRREQRcvd; s++ {
		if s.String() == name {
			return s, LAPUninit
		}
	}
	panic(name)
}

func TestReachEveryState(t *testing.T) {
	for _, name := range reachable {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			id := h.reach(name)
			ws, wl := wantState(name)
			if s, l := id.State(); s != ws || (l != wl && name != "LISTEN") {
				t.Fatalf("state %v/%v, want %v/%v", s, l, ws, wl)
			}
		})
	}
}
