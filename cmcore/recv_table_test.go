package cmcore

import (
	"strings"
	"testing"

	"github.com/ucmd/ucmd/cmcore/wire"
)

// rxOK is one cell of ib-cm.md §3.4: the state left, the event delivered
// and the reply sent. The zero value is a silent drop.
type rxOK struct {
	after string // reach name; "" = unchanged
	event EventType
	hasEv bool
	reply uint16 // attribute ID of the reply, 0 = none
}

func ev(after string, e EventType) rxOK { return rxOK{after: after, event: e, hasEv: true} }
func reply(attr uint16) rxOK            { return rxOK{reply: attr} }

type rxRow struct {
	name string
	msg  func(h *harness, id *ID) wire.Message
	// cells lists the non-drop outcomes by state; every other reachable
	// state must drop the message silently.
	cells map[string]rxOK
}

func withStates(m map[string]rxOK, states []string, ok rxOK) map[string]rxOK {
	for _, s := range states {
		m[s] = ok
	}
	return m
}

var unknownRemote = []string{"IDLE", "LISTEN", "REQ_SENT", "MRA_REQ_RCVD", "SIDR_REQ_SENT"}

var rxRows = []rxRow{
	{"REP", func(h *harness, id *ID) wire.Message { return h.peerREP(id) }, withStates(map[string]rxOK{
		"REQ_SENT":     ev("REP_RCVD", EventREPReceived),
		"MRA_REQ_RCVD": ev("REP_RCVD", EventREPReceived),
		"MRA_REP_SENT": reply(wire.AttrMRA), // duplicate REP: resend our MRA
	}, established, reply(wire.AttrRTU))}, // duplicate REP: resend RTU
	{"RTU", func(h *harness, id *ID) wire.Message {
		return &wire.RTU{LocalCommID: peerComm, RemoteCommID: id.localID}
	}, map[string]rxOK{
		"REP_SENT":     ev("ESTABLISHED", EventRTUReceived),
		"MRA_REP_RCVD": ev("ESTABLISHED", EventRTUReceived),
	}},
	{"DREQ", func(h *harness, id *ID) wire.Message {
		return &wire.DREQ{LocalCommID: peerComm, RemoteCommID: id.localID, RemoteQPN: localQPN}
	}, withStates(withStates(map[string]rxOK{
		"REP_SENT":     ev("DREQ_RCVD", EventDREQReceived),
		"MRA_REP_RCVD": ev("DREQ_RCVD", EventDREQReceived),
		"DREQ_SENT":    ev("DREQ_RCVD", EventDREQReceived),
		"TIMEWAIT":     reply(wire.AttrDREP), // resend DREP, no event
	}, established, ev("DREQ_RCVD", EventDREQReceived)),
		unknownRemote, reply(wire.AttrDREP))}, // no such connection: DREP anyway
	{"DREQ/wrong-QPN", func(h *harness, id *ID) wire.Message {
		return &wire.DREQ{LocalCommID: peerComm, RemoteCommID: id.localID, RemoteQPN: localQPN + 1}
	}, withStates(map[string]rxOK{}, unknownRemote, reply(wire.AttrDREP))},
	{"DREP", func(h *harness, id *ID) wire.Message {
		return &wire.DREP{LocalCommID: peerComm, RemoteCommID: id.localID}
	}, map[string]rxOK{
		"DREQ_SENT": ev("TIMEWAIT", EventDREPReceived),
		"DREQ_RCVD": ev("TIMEWAIT", EventDREPReceived),
	}},
	{"MRA/REQ", func(h *harness, id *ID) wire.Message {
		return &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageREQ, ServiceTimeout: 18}
	}, map[string]rxOK{"REQ_SENT": ev("MRA_REQ_RCVD", EventMRAReceived)}},
	{"MRA/REP", func(h *harness, id *ID) wire.Message {
		return &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageREP, ServiceTimeout: 18}
	}, map[string]rxOK{"REP_SENT": ev("MRA_REP_RCVD", EventMRAReceived)}},
	{"MRA/other", func(h *harness, id *ID) wire.Message {
		return &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageOther, ServiceTimeout: 18}
	}, map[string]rxOK{"ESTABLISHED/LAP_SENT": ev("ESTABLISHED/MRA_LAP_RCVD", EventMRAReceived)}},
	{"MRA/3", func(h *harness, id *ID) wire.Message {
		return &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: 3, ServiceTimeout: 18}
	}, map[string]rxOK{}},
	// The peer rejects our REQ: Local Comm ID 0, Message Rejected REQ.
	{"REJ/of-REQ", func(h *harness, id *ID) wire.Message {
		return &wire.REJ{RemoteCommID: id.localID, MessageRejected: wire.MessageREQ, Reason: wire.REJConsumerDefined}
	}, map[string]rxOK{
		"REQ_SENT":     ev("IDLE", EventREJReceived),
		"MRA_REQ_RCVD": ev("IDLE", EventREJReceived),
	}},
	{"REJ/other", func(h *harness, id *ID) wire.Message {
		return &wire.REJ{LocalCommID: peerComm, RemoteCommID: id.localID, MessageRejected: wire.MessageOther, Reason: wire.REJConsumerDefined}
	}, rejCells("IDLE")},
	{"REJ/stale", func(h *harness, id *ID) wire.Message {
		return &wire.REJ{LocalCommID: peerComm, RemoteCommID: id.localID, MessageRejected: wire.MessageOther, Reason: wire.REJStaleConn}
	}, rejCells("TIMEWAIT")},
	// REJ reason 4 is found by (remote CA GUID from the ARI, remote comm ID).
	{"REJ/timeout", func(h *harness, id *ID) wire.Message {
		ari := make([]byte, 8)
		putBE64(ari, peerGUID)
		return &wire.REJ{LocalCommID: peerComm, RemoteCommID: 0xdead, MessageRejected: wire.MessageOther, Reason: wire.REJTimeout, ARI: ari}
	}, rejCells("IDLE")},
	{"LAP", func(h *harness, id *ID) wire.Message { return h.peerLAP(id) }, map[string]rxOK{
		"ESTABLISHED":              ev("ESTABLISHED/LAP_RCVD", EventLAPReceived),
		"ESTABLISHED/passive":      ev("ESTABLISHED/LAP_RCVD", EventLAPReceived),
		"ESTABLISHED/LAP_IDLE":     ev("ESTABLISHED/LAP_RCVD", EventLAPReceived),
		"ESTABLISHED/MRA_LAP_SENT": reply(wire.AttrMRA),
	}},
	{"APR", func(h *harness, id *ID) wire.Message {
		return &wire.APR{LocalCommID: peerComm, RemoteCommID: id.localID, APStatus: wire.APRSuccess}
	}, map[string]rxOK{
		"ESTABLISHED/LAP_SENT":     ev("ESTABLISHED/LAP_IDLE", EventAPRReceived),
		"ESTABLISHED/MRA_LAP_RCVD": ev("ESTABLISHED/LAP_IDLE", EventAPRReceived),
	}},
	{"SIDR_REP", func(h *harness, id *ID) wire.Message {
		return &wire.SIDRREP{RequestID: id.localID, Status: wire.SIDRSuccess, QPN: 0x99, QKey: 0x11}
	}, map[string]rxOK{"SIDR_REQ_SENT": ev("IDLE", EventSIDRREPReceived)}},
}

// rejCells is the REJ row for a REJ that finds the id by (rem, loc) or by
// the ARI GUID: the states that have learned the peer's comm ID.
// stale=TIMEWAIT for reason 10, which sends the REQ_RCVD.. states to
// TIMEWAIT instead of IDLE.
func rejCells(early string) map[string]rxOK {
	m := map[string]rxOK{
		"REQ_RCVD":             ev(early, EventREJReceived),
		"MRA_REQ_SENT":         ev(early, EventREJReceived),
		"REP_SENT":             ev(early, EventREJReceived),
		"MRA_REP_RCVD":         ev(early, EventREJReceived),
		"REP_RCVD":             ev("TIMEWAIT", EventREJReceived),
		"MRA_REP_SENT":         ev("TIMEWAIT", EventREJReceived),
		"DREQ_SENT":            ev("TIMEWAIT", EventREJReceived),
		"ESTABLISHED":          ev("TIMEWAIT", EventREJReceived),
		"ESTABLISHED/passive":  ev("TIMEWAIT", EventREJReceived),
		"ESTABLISHED/LAP_SENT": ev("TIMEWAIT", EventREJReceived),
	}
	return m
}

// TestReceiveStateTable runs every §3.4 row (except REQ and SIDR_REQ,
// which create ids and have their own tests) in every state.
func TestReceiveStateTable(t *testing.T) {
	for _, row := range rxRows {
		for _, st := range reachable {
			t.Run(row.name+"/"+st, func(t *testing.T) {
				h := newHarness(t)
				id := h.reach(st)
				s0, l0 := id.State()
				if row.name == "REJ/timeout" && st == "SIDR_REQ_RCVD" {
					t.Skip("SIDR responders are not in the remote-ID table")
				}
				h.inject(0x4242, row.msg(h, id))
				sent, evs := h.sent(), h.takeEvents()
				want := row.cells[st]
				s, l := id.State()
				if want.after == "" {
					if s != s0 || l != l0 {
						t.Errorf("state %v/%v → %v/%v, want unchanged", s0, l0, s, l)
					}
				} else {
					ws, wl := wantState(want.after)
					if s != ws || (strings.Contains(want.after, "/") && l != wl) {
						t.Errorf("state %v/%v, want %s", s, l, want.after)
					}
				}
				switch {
				case !want.hasEv && len(evs) != 0:
					t.Errorf("event %v, want none", evs[0].Type)
				case want.hasEv && (len(evs) != 1 || evs[0].Type != want.event || evs[0].ID != id):
					t.Errorf("events %v, want %v on the id", evs, want.event)
				}
				switch {
				case want.reply == 0 && len(sent) != 0:
					t.Errorf("replied %T, want nothing", sent[0])
				case want.reply != 0 && (len(sent) != 1 || sent[0].AttrID() != want.reply):
					t.Errorf("replied %v, want %#x", sent, want.reply)
				}
			})
		}
	}
}
