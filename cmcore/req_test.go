package cmcore

import (
	"bytes"
	"errors"
	"golang.org/x/sys/unix"
	"slices"
	"testing"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

func TestREQReceivedEvent(t *testing.T) {
	h := newHarness(t)
	l := h.newID()
	l.SetContext("listener ctx")
	must(t, l.Listen(0x1200, 0xFF00)) // matches 0x1234 under the mask
	req := peerREQ(0x1234)
	req.PrivateData = []byte("hello")
	h.inject(0xabcd, req)
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREQReceived {
		t.Fatalf("events %v", evs)
	}
	e := evs[0]
	if e.Listener != l || e.ID == l || e.ID == nil {
		t.Fatalf("listener %p child %p, want listener %p and a new id", e.Listener, e.ID, l)
	}
	if e.ID.Context() != "listener ctx" {
		t.Errorf("child context %v, want the listener's", e.ID.Context())
	}
	p := e.REQ
	// Perspective swaps of §3.5.
	if p.ResponderResources != req.InitiatorDepth || p.InitiatorDepth != req.ResponderResources ||
		p.LocalCMResponseTimeout != req.RemoteCMResponseTimeout || p.RemoteCMResponseTimeout != req.LocalCMResponseTimeout {
		t.Errorf("swapped params %+v", p)
	}
	if p.RemoteCAGUID != peerGUID || p.RemoteQPN != peerQPN || p.StartingPSN != req.StartingPSN ||
		p.QPType != QPTypeRC || p.RetryCount != 5 || p.RNRRetryCount != 4 || p.Port != 1 || p.BTHPKey != 0xffff {
		t.Errorf("params %+v", p)
	}
	// The path seen from our side (§6.2).
	pp := p.Primary
	if pp.SGID != localGID || pp.DGID != peerGID || pp.DLID != peerLID || pp.SLID != localLID ||
		pp.PKey != 0xffff || pp.MTU != 4 || pp.PacketLifeTime != 16 || pp.HopLimit != 0 || !pp.Reversible {
		t.Errorf("primary path %+v", pp)
	}
	if p.Alternate != nil {
		t.Errorf("alternate path %+v from a REQ without one", p.Alternate)
	}
	if !bytes.HasPrefix(e.PrivateData, []byte("hello")) || len(e.PrivateData) != wire.REQPrivateDataSize {
		t.Errorf("private data %q (%d bytes)", e.PrivateData[:8], len(e.PrivateData))
	}
	a := e.ID.Attr()
	if a.ServiceID != 0x1234 || a.ServiceMask != ^uint64(0) || a.RemoteCommID != peerComm || a.LocalCommID == 0 {
		t.Errorf("child attr %+v", a)
	}
	// Answering goes back with the REQ's TID, to the REQ's source.
	must(t, e.ID.SendREP(&REPParams{QPN: localQPN}))
	ep := h.port.ep
	ep.mu.Lock()
	last := ep.sent[len(ep.sent)-1]
	ep.mu.Unlock()
	hdr, _ := wire.DecodeHeader(&last.mad)
	if hdr.TID != 0xabcd || last.dst.LID != peerLID {
		t.Errorf("REP TID %#x to LID %d, want %#x to %d", hdr.TID, last.dst.LID, 0xabcd, peerLID)
	}
}

func TestREQWithoutListenerIsRejected(t *testing.T) {
	h := newHarness(t)
	l := h.newID()
	must(t, l.Listen(0x1, 0))
	h.inject(0x77, peerREQ(0x2))
	r := one[*wire.REJ](t, h.sent())
	if r.Reason != wire.REJInvalidServiceID || r.LocalCommID != 0 || r.RemoteCommID != peerComm || r.MessageRejected != wire.MessageREQ {
		t.Errorf("REJ %+v, want reason 8 for REQ %#x", r, peerComm)
	}
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("events %v", evs)
	}
	if ids, _ := h.cm.Count(); ids != 1 {
		t.Errorf("%d ids, want only the listener", ids)
	}
}

// TestDuplicateREQ is §4.6: a REQ for a connection we already have.
func TestDuplicateREQ(t *testing.T) {
	for _, c := range []struct {
		state string
		reply uint16
	}{
		{"REQ_RCVD", 0},                // the user has not answered: drop
		{"MRA_REQ_SENT", wire.AttrMRA}, // resend our MRA
		{"REP_SENT", 0},                // our REP retransmission covers it
		{"ESTABLISHED/passive", 0},
	} {
		t.Run(c.state, func(t *testing.T) {
			h := newHarness(t)
			id := h.reach(c.state)
			h.inject(0x77, peerREQ(0x1234))
			sent := h.sent()
			if evs := h.takeEvents(); len(evs) != 0 {
				t.Fatalf("duplicate REQ gave events %v", evs)
			}
			if c.reply == 0 {
				none(t, sent)
				return
			}
			m := one[*wire.MRA](t, sent)
			if m.ServiceTimeout != 20 || !bytes.HasPrefix(m.PrivateData, []byte("mra")) || m.LocalCommID != id.localID || m.MessageMRAed != wire.MessageREQ {
				t.Errorf("resent MRA %+v", m)
			}
		})
	}
}

// TestStaleREQ: a new REQ reusing the QPN of a live connection gets REJ 10
// and the old connection is disconnected.
func TestStaleREQ(t *testing.T) {
	h := newHarness(t)
	old := h.reach("ESTABLISHED/passive")
	req := peerREQ(0x1234)
	req.LocalCommID = peerComm + 7 // new connection, same QPN
	h.inject(0x99, req)
	sent := h.sent()
	if len(sent) != 2 {
		t.Fatalf("sent %v, want REJ and DREQ", sent)
	}
	r, ok := sent[0].(*wire.REJ)
	if !ok || r.Reason != wire.REJStaleConn || r.MessageRejected != wire.MessageREQ || r.RemoteCommID != peerComm+7 || r.LocalCommID != 0 {
		t.Errorf("first %+v, want REJ 10 of REQ %#x", sent[0], peerComm+7)
	}
	if d, ok := sent[1].(*wire.DREQ); !ok || d.LocalCommID != old.localID {
		t.Errorf("second %+v, want DREQ of the old connection", sent[1])
	}
	if s, _ := old.State(); s != StateDREQSent {
		t.Errorf("old connection %v, want DREQ_SENT", s)
	}
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("events %v", evs)
	}
}

// TestStaleREP: a REP whose QPN belongs to another live connection is
// rejected with REJ 10 (Rejected = REP), the old one is disconnected, and
// our REQ stays outstanding.
func TestStaleREP(t *testing.T) {
	h := newHarness(t)
	old := h.reach("ESTABLISHED/passive")
	id := h.reach("REQ_SENT")
	rep := h.peerREP(id)
	rep.LocalCommID = peerComm + 9
	h.inject(0x5, rep)
	sent := h.sent()
	if len(sent) != 2 {
		t.Fatalf("sent %v, want REJ and DREQ", sent)
	}
	if r, ok := sent[0].(*wire.REJ); !ok || r.Reason != wire.REJStaleConn || r.MessageRejected != wire.MessageREP || r.RemoteCommID != peerComm+9 || r.LocalCommID != id.localID {
		t.Errorf("first %+v, want REJ 10 of the REP", sent[0])
	}
	if _, ok := sent[1].(*wire.DREQ); !ok {
		t.Errorf("second %T, want DREQ", sent[1])
	}
	if s, _ := id.State(); s != StateREQSent {
		t.Errorf("our id %v, want still REQ_SENT", s)
	}
	if s, _ := old.State(); s != StateDREQSent {
		t.Errorf("old %v, want DREQ_SENT", s)
	}
}

// TestDuplicateREPOtherID: a REP naming a remote comm ID another id
// already has (same CA GUID) is a duplicate and dropped.
func TestDuplicateREPOtherID(t *testing.T) {
	h := newHarness(t)
	h.reach("ESTABLISHED") // holds (peerComm, peerGUID)
	id := h.reach("REQ_SENT")
	rep := h.peerREP(id)
	rep.LocalQPN = peerQPN + 1
	h.inject(0x5, rep)
	none(t, h.sent())
	if s, _ := id.State(); s != StateREQSent {
		t.Errorf("state %v, want REQ_SENT", s)
	}
}

func TestREQBadPath(t *testing.T) {
	cases := []struct {
		name   string
		mod    func(*wire.REQ)
		reason uint16
	}{
		{"GID not ours", func(r *wire.REQ) { r.Primary.RemoteGID = hw.GID{0xfe, 0x80, 15: 9} }, wire.REJInvalidGID},
		{"P_Key not in table", func(r *wire.REQ) { r.PartitionKey = 0x7777 }, wire.REJInvalidGID},
		{"alternate GID not ours", func(r *wire.REQ) {
			r.Alternate = r.Primary
			r.Alternate.RemoteGID = hw.GID{0xfe, 0x80, 15: 9}
		}, wire.REJInvalidAltGID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			l := h.newID()
			must(t, l.Listen(0x1234, 0))
			req := peerREQ(0x1234)
			c.mod(req)
			h.inject(0x77, req)
			r := one[*wire.REJ](t, h.sent())
			if r.Reason != c.reason || r.MessageRejected != wire.MessageREQ || r.RemoteCommID != peerComm {
				t.Errorf("REJ %+v, want reason %d", r, c.reason)
			}
			if c.reason == wire.REJInvalidGID && !bytes.Equal(r.ARI, localGID[:]) {
				t.Errorf("ARI %x, want our GID 0 %x", r.ARI, localGID[:])
			}
			if evs := h.takeEvents(); len(evs) != 0 {
				t.Errorf("events %v", evs)
			}
			if ids, _ := h.cm.Count(); ids != 1 {
				t.Errorf("%d ids left", ids)
			}
		})
	}
}

// A path whose SGID the port's snapshot lacks is tried again on a fresh
// one: an address added a moment ago (the snapshot is seconds old) is
// found, as the kernel's GID cache has it at once.
func TestSendREQFindsAGIDNewerThanTheSnapshot(t *testing.T) {
	h := newHarness(t)
	added := hw.GID{0xfe, 0x80, 15: 0x42}
	fresh := h.port.attr
	fresh.GIDs = append(slices.Clone(fresh.GIDs), hw.GIDEntry{Index: 1, GID: added, Type: hw.GIDTypeIB})
	h.port.fresh = &fresh
	id := h.newID()
	p := testREQParams()
	p.Primary.SGID = added
	must(t, id.SendREQ(p))
	r := one[*wire.REQ](t, h.sent())
	if r.Primary.LocalGID != added {
		t.Errorf("REQ from GID %v, want the one added %v", r.Primary.LocalGID, added)
	}
	if h.port.freshReads != 1 {
		t.Errorf("%d fresh reads, want 1", h.port.freshReads)
	}
}

// The snapshot's entries a connection takes are checked against the
// tables as they are: a P_Key an SM moved, an address that left its slot,
// since the snapshot, are taken where they are now (one read of the
// tables), or refused as the kernel's current cache would refuse them.
func TestPathEntriesMovedSinceTheSnapshot(t *testing.T) {
	moved := hw.GID{0xfe, 0x80, 15: 0x42}
	for _, c := range []struct {
		name    string
		path    func(*PathRecord)
		now     func(*hw.PortAttr) // the tables now, from the snapshot's
		pkIdx   uint16
		gidIdx  uint8
		wantErr error
	}{{
		name:  "P_Key moved",
		path:  func(p *PathRecord) { p.PKey = 0x8001 },
		now:   func(a *hw.PortAttr) { a.PKeys = []uint16{0xffff, 0x8002, 0x8001} },
		pkIdx: 2,
	}, {
		name: "GID moved",
		path: func(p *PathRecord) { p.SGID, p.HopLimit = moved, 2 },
		now: func(a *hw.PortAttr) {
			a.GIDs = append(a.GIDs[:1:1], hw.GIDEntry{Index: 3, GID: moved, Type: hw.GIDTypeIB})
		},
		gidIdx: 3,
	}, {
		name:    "GID gone",
		path:    func(p *PathRecord) { p.SGID, p.HopLimit = moved, 2 },
		now:     func(a *hw.PortAttr) { a.GIDs = a.GIDs[:1:1] },
		wantErr: unix.EINVAL,
	}, {
		name:    "P_Key gone",
		path:    func(p *PathRecord) { p.PKey = 0x8001 },
		now:     func(a *hw.PortAttr) { a.PKeys = []uint16{0xffff} },
		wantErr: unix.ENOENT,
	}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.port.attr.GIDs = append(h.port.attr.GIDs, hw.GIDEntry{Index: 1, GID: moved, Type: hw.GIDTypeIB})
			now := h.port.attr
			now.GIDs, now.PKeys = slices.Clone(now.GIDs), slices.Clone(now.PKeys)
			c.now(&now)
			h.port.fresh = &now
			id := h.newID()
			p := testREQParams()
			c.path(p.Primary)
			err := id.SendREQ(p)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("SendREQ: %v, want %v", err, c.wantErr)
				}
				return
			}
			must(t, err)
			dst := h.lastDst()
			one[*wire.REQ](t, h.sent())
			qa, _, err := id.InitQPAttr(QPStateInit)
			must(t, err)
			if dst.PKeyIndex != c.pkIdx || qa.PKeyIndex != c.pkIdx {
				t.Errorf("P_Key index: REQ sent on %d, QP's %d; want %d", dst.PKeyIndex, qa.PKeyIndex, c.pkIdx)
			}
			if c.gidIdx != 0 && (dst.GRH == nil || dst.GRH.SGIDIndex != c.gidIdx || id.av.GRH.SGIDIndex != c.gidIdx) {
				t.Errorf("REQ sent with GRH %+v, QP's SGID index %d; want %d", dst.GRH, id.av.GRH.SGIDIndex, c.gidIdx)
			}
			if h.port.freshReads != 1 {
				t.Errorf("%d fresh reads, want 1", h.port.freshReads)
			}
		})
	}
}

// SendREQ and SendSIDRREQ check the path's entries (sysfs reads) without
// the CM's lock, which every command and MAD of the device waits for.
func TestPathLookedUpOutsideTheLock(t *testing.T) {
	h := newHarness(t)
	held := 0
	h.port.checking = func() {
		if !h.cm.mu.TryLock() {
			held++
			return
		}
		h.cm.mu.Unlock()
	}
	must(t, h.newID().SendREQ(testREQParams()))
	must(t, h.newID().SendSIDRREQ(&SIDRREQParams{Path: testPath(), ServiceID: 0x1234, TimeoutMs: 100, MaxCMRetries: 1}))
	if h.port.entryChecks != 2 || held != 0 {
		t.Errorf("%d entry checks, %d of them under the CM's lock; want 2, 0", h.port.entryChecks, held)
	}
}

// A REQ that arrives on one port naming another's GID (a peer's path
// cached across an SM's new LIDs) reports the port its QP is on, the
// path's, as cm_format_req_event does: the port INIT_QP_ATTR gives.
func TestREQEventPortIsThePaths(t *testing.T) {
	h := newHarnessOn(t, false, hw.PortAttr{
		LinkLayer: hw.LinkInfiniBand, State: hw.PortActive, LID: localLID + 1,
		GIDs:  []hw.GIDEntry{{Index: 0, GID: hw.GID{0xfe, 0x80, 15: 0x77}, Type: hw.GIDTypeIB}},
		PKeys: []uint16{0xffff},
	})
	l := h.newID()
	must(t, l.Listen(0x1234, 0))
	var r hw.Received
	must(t, wire.Encode(&r.MAD, 0x77, peerREQ(0x1234))) // names port 1's GID
	r.Src = peerAddr
	h.cm.handleMAD(h.cm.ports[1], &r) // arrives on port 2
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREQReceived {
		t.Fatalf("events %v, want the REQ", evs)
	}
	qa, _, err := evs[0].ID.InitQPAttr(QPStateInit)
	must(t, err)
	if evs[0].REQ.Port != 1 || qa.PortNum != 1 {
		t.Errorf("REQ event on port %d, QP on port %d; want both 1, the path's", evs[0].REQ.Port, qa.PortNum)
	}
}

// The entry checked is the table's, not the path's P_Key, which may
// differ in the membership bit: a peer's limited-member REQ against a
// full-member table costs no read of the tables, and entries that cannot
// be read leave the snapshot's lookup as it was.
func TestPathEntriesCheckedAsTheTableHasThem(t *testing.T) {
	h := newHarness(t)
	l := h.newID()
	must(t, l.Listen(0x1234, 0))
	for i := range 3 {
		req := peerREQ(0x1234)
		req.LocalCommID += uint32(i)
		req.LocalQPN += uint32(i)
		req.PartitionKey = 0x7fff // limited member; the table has 0xffff
		h.inject(0x77+uint64(i), req)
	}
	if n := len(h.takeEvents()); n != 3 || h.port.freshReads != 0 {
		t.Errorf("%d REQs delivered, %d fresh reads; want 3, 0", n, h.port.freshReads)
	}
	h.port.checkErr = errors.New("read gids/0: input/output error")
	must(t, h.newID().SendREQ(testREQParams()))
	if h.port.freshReads != 0 {
		t.Errorf("entries that cannot be read: %d fresh reads, want 0", h.port.freshReads)
	}
}

// An id that cannot send a REQ gets EINVAL for that, whatever its path,
// as ib_send_cm_req checks the state first: not the path's ENOENT.
func TestSendREQStateBeforePath(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	must(t, id.SendREQ(testREQParams()))
	p := testREQParams()
	p.Primary.PKey = 0x7777 // in no table: ENOENT from an idle id
	if err := id.SendREQ(p); !errors.Is(err, unix.EINVAL) {
		t.Errorf("second SEND_REQ with a P_Key in no table: %v, want EINVAL", err)
	}
	if err := h.newID().SendREQ(p); !errors.Is(err, unix.ENOENT) {
		t.Errorf("SEND_REQ of an idle id with a P_Key in no table: %v, want ENOENT", err)
	}
}

// Entries that hold cost no read of the tables.
func TestPathEntriesHoldNoRead(t *testing.T) {
	h := newHarness(t)
	must(t, h.newID().SendREQ(testREQParams()))
	if h.port.entryChecks != 1 || h.port.freshReads != 0 {
		t.Errorf("%d entry checks, %d fresh reads; want 1, 0", h.port.entryChecks, h.port.freshReads)
	}
}

// REJ 12's ARI is the GID at index 0, as cm_req_handler queries it, and
// absent when that slot is empty: not the first GID the table holds.
func TestREQInvalidGIDARIIsSlotZero(t *testing.T) {
	h := newHarness(t)
	h.port.attr.GIDs = []hw.GIDEntry{{Index: 1, GID: localGID, Type: hw.GIDTypeIB}}
	l := h.newID()
	must(t, l.Listen(0x1234, 0))
	req := peerREQ(0x1234)
	req.Primary.RemoteGID = hw.GID{0xfe, 0x80, 15: 9}
	h.inject(0x77, req)
	r := one[*wire.REJ](t, h.sent())
	if r.Reason != wire.REJInvalidGID || len(r.ARI) != 0 {
		t.Errorf("REJ reason %d ARI %x, want %d with no ARI (slot 0 is empty)", r.Reason, r.ARI, wire.REJInvalidGID)
	}
}

// TestREQOutcome: a REQ_RECEIVED handler's outcome alone decides what the
// peer gets: Keep nothing yet (the id waits in REQ_RCVD), Destroy a REJ 28,
// DestroySilently nothing at all, so that its retry is a new REQ.
func TestREQOutcome(t *testing.T) {
	t.Run("Keep", func(t *testing.T) {
		h := newHarness(t)
		l := h.newID()
		must(t, l.Listen(0x1234, 0))
		h.onEvent = func(*Event) Outcome { return Keep }
		h.inject(0x77, peerREQ(0x1234))
		none(t, h.sent())
		evs := h.takeEvents()
		if len(evs) != 1 {
			t.Fatalf("events %v", evs)
		}
		if st, _ := evs[0].ID.State(); st != StateREQRcvd {
			t.Errorf("kept id in %v, want REQ_RCVD", st)
		}
	})
	t.Run("DestroySilently drops silently", func(t *testing.T) {
		h := newHarness(t)
		l := h.newID()
		must(t, l.Listen(0x1234, 0))
		h.onEvent = func(*Event) Outcome { return DestroySilently }
		h.inject(0x77, peerREQ(0x1234))
		none(t, h.sent())
		// The peer's retransmission is a new REQ, not a duplicate.
		h.onEvent = nil
		h.takeEvents()
		h.inject(0x77, peerREQ(0x1234))
		if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventREQReceived {
			t.Fatalf("retried REQ gave %v", evs)
		}
	})
	t.Run("Destroy rejects", func(t *testing.T) {
		h := newHarness(t)
		l := h.newID()
		must(t, l.Listen(0x1234, 0))
		h.onEvent = func(*Event) Outcome { return Destroy }
		h.inject(0x77, peerREQ(0x1234))
		rejWith(wire.REJConsumerDefined, nil, wire.MessageREQ, true)(t, h.sent())
	})
}

func TestSIDRREQ(t *testing.T) {
	h := newHarness(t)
	h.inject(0x88, &wire.SIDRREQ{RequestID: 5, PartitionKey: 0xffff, ServiceID: 0x4444})
	if r := one[*wire.SIDRREP](t, h.sent()); r.Status != wire.SIDRUnsupported || r.RequestID != 5 {
		t.Errorf("no listener: SIDR_REP %+v, want status 1", r)
	}
	l := h.newID()
	must(t, l.Listen(0x4444, 0))
	h.inject(0x88, &wire.SIDRREQ{RequestID: 5, PartitionKey: 0xffff, ServiceID: 0x4444, PrivateData: []byte("x")})
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventSIDRREQReceived || evs[0].Listener != l {
		t.Fatalf("events %v", evs)
	}
	if p := evs[0].SIDRREQ; p.ServiceID != 0x4444 || p.PKey != 0xffff || p.Port != 1 {
		t.Errorf("params %+v", p)
	}
	h.inject(0x88, &wire.SIDRREQ{RequestID: 5, PartitionKey: 0xffff, ServiceID: 0x4444})
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("duplicate SIDR_REQ gave %v", evs)
	}
	must(t, evs[0].ID.SendSIDRREP(&SIDRREPParams{Status: wire.SIDRSuccess, QPN: 0x55, QKey: 0x66, Info: []byte{1}}))
	r := one[*wire.SIDRREP](t, h.sent())
	if r.RequestID != 5 || r.QPN != 0x55 || r.QKey != 0x66 || r.ServiceID != 0x4444 {
		t.Errorf("SIDR_REP %+v", r)
	}
}

func TestSIDRREPReceived(t *testing.T) {
	h := newHarness(t)
	id := h.reach("SIDR_REQ_SENT")
	h.inject(1, &wire.SIDRREP{RequestID: id.localID, Status: 0, QPN: 0x99, QKey: 0x11, Info: []byte{7, 8}})
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].SIDRREP != (SIDRREPEventParam{Status: 0, QKey: 0x11, QPN: 0x99}) || !bytes.Equal(evs[0].Info, []byte{7, 8}) {
		t.Fatalf("events %+v", evs)
	}
}

func TestREJReceivedEvent(t *testing.T) {
	h := newHarness(t)
	id := h.reach("REQ_SENT")
	h.inject(1, &wire.REJ{RemoteCommID: id.localID, MessageRejected: wire.MessageREQ, Reason: 27, ARI: []byte{1, 2, 3}, PrivateData: []byte("why")})
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].REJ.Reason != 27 || !bytes.Equal(evs[0].Info, []byte{1, 2, 3}) || !bytes.HasPrefix(evs[0].PrivateData, []byte("why")) {
		t.Fatalf("events %+v", evs)
	}
}

// A REJ whose ARI length says more than its 72-byte area (7 bits: up to
// 127) still rejects the connection, with the whole area as its ARI; it
// is not dropped, which would leave the REQ to time out.
func TestREJWithOverlongARILength(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	must(t, id.SendREQ(testREQParams()))
	h.sent()
	ari := bytes.Repeat([]byte{0x5a}, wire.REJARISize)
	var r hw.Received
	must(t, wire.Encode(&r.MAD, 1, &wire.REJ{LocalCommID: peerComm, RemoteCommID: id.localID,
		MessageRejected: wire.MessageREQ, Reason: wire.REJConsumerDefined, ARI: ari}))
	r.MAD[wire.HeaderSize+9] = 127 << 1
	r.Src = peerAddr
	h.injectMAD(&r)
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREJReceived || evs[0].REJ.Reason != wire.REJConsumerDefined || !bytes.Equal(evs[0].Info, ari) {
		t.Fatalf("events %+v, want REJ_RECEIVED with the 72-byte ARI", evs)
	}
	if s, _ := id.State(); s != StateIdle {
		t.Errorf("state %v, want IDLE", s)
	}
}

// A routed REQ (paths not subnet local, permissive LIDs: what a CM sends
// for a hop limit above 1) takes the LIDs and SL from the received packet
// on IB, primary and alternate alike, as cm_process_routed_req does: the
// packet's source LID and SL for the REQ's local LID, its destination
// path bits for the remote LID. A subnet-local path keeps its LIDs, but
// for the primary DLID, always the packet's source LID.
func TestRoutedREQ(t *testing.T) {
	h := newHarness(t)
	l := h.newID()
	must(t, l.Listen(0x7777, 0))
	req := peerREQ(0x7777)
	routed := wire.Path{LocalLID: permissiveLID, RemoteLID: permissiveLID, LocalGID: peerGID, RemoteGID: localGID,
		HopLimit: 4, SL: 7, PacketRate: 3, LocalACKTimeout: 17}
	req.Primary, req.Alternate = routed, routed
	src := hw.Address{LID: 0x33, SL: 5, PathBits: 0, QPN: 1, GRH: &hw.GRH{GID: peerGID, HopLimit: 64}}
	h.injectFrom(src, 9, req)
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREQReceived || evs[0].REQ.Alternate == nil {
		t.Fatalf("events %+v, want REQ_RECEIVED with an alternate path", evs)
	}
	for name, p := range map[string]PathRecord{"primary": evs[0].REQ.Primary, "alternate": *evs[0].REQ.Alternate} {
		if p.DLID != 0x33 || p.SLID != 0 || p.SL != 5 {
			t.Errorf("%s path DLID %#x SLID %#x SL %d, want the packet's 0x33, its path bits 0 and its SL 5", name, p.DLID, p.SLID, p.SL)
		}
	}

	local := peerREQ(0x7777)
	local.LocalCommID++
	local.LocalQPN++
	local.Primary.LocalLID, local.Primary.RemoteLID = permissiveLID, permissiveLID
	h.injectFrom(src, 10, local)
	evs = h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREQReceived {
		t.Fatalf("events %+v, want REQ_RECEIVED", evs)
	}
	if p := evs[0].REQ.Primary; p.DLID != 0x33 || p.SLID != permissiveLID || p.SL != local.Primary.SL {
		t.Errorf("subnet-local path DLID %#x SLID %#x SL %d, want 0x33, 0xffff and the REQ's SL %d", p.DLID, p.SLID, p.SL, local.Primary.SL)
	}
}

// The answers to a duplicate REQ or REP go back where the duplicate came
// from, as the kernel's do (cm_alloc_response_msg from the received work
// completion), not to the connection's own address: its LID, SL, path
// bits and P_Key index (ib-cm.md §8.1).
func TestDuplicatesAnsweredAtTheirSource(t *testing.T) {
	src := hw.Address{LID: 7, SL: 4, PathBits: 1, QPN: 1, QKey: cmQKey, PKeyIndex: 1}
	for _, c := range []struct {
		state string
		dup   func(h *harness, id *ID) wire.Message
		want  uint16 // the answer's attribute
	}{
		{"MRA_REQ_SENT", func(*harness, *ID) wire.Message { return peerREQ(0x1234) }, wire.AttrMRA},
		{"ESTABLISHED", func(h *harness, id *ID) wire.Message { return h.peerREP(id) }, wire.AttrRTU},
		{"MRA_REP_SENT", func(h *harness, id *ID) wire.Message { return h.peerREP(id) }, wire.AttrMRA},
	} {
		t.Run(c.state, func(t *testing.T) {
			h := newHarness(t)
			id := h.reach(c.state)
			h.sent()
			h.injectFrom(src, 0x77, c.dup(h, id))
			ep := h.port.ep
			ep.mu.Lock()
			s := ep.sent
			ep.mu.Unlock()
			if len(s) != 1 {
				t.Fatalf("%d MADs sent for the duplicate, want 1", len(s))
			}
			attr, _, err := wire.Decode(&s[0].mad)
			if err != nil || attr.AttrID != c.want {
				t.Fatalf("answer %+v, %v: want attribute %#x", attr, err, c.want)
			}
			if d := s[0].dst; d.LID != src.LID || d.SL != src.SL || d.PathBits != src.PathBits || d.PKeyIndex != src.PKeyIndex {
				t.Errorf("answer sent to %+v, want the duplicate's source %+v", d, src)
			}
		})
	}
}
