package cmcore

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"golang.org/x/sys/unix"
)

// TestInitQPAttrStates: which connection states allow which transition
// (ib-cm.md §7), everything else EINVAL.
func TestInitQPAttrStates(t *testing.T) {
	conn := []string{"REQ_RCVD", "MRA_REQ_SENT", "REP_RCVD", "MRA_REP_SENT", "REP_SENT", "MRA_REP_RCVD", "ESTABLISHED", "ESTABLISHED/passive"}
	allowed := map[uint8]map[string]bool{
		QPStateInit: setOf(append([]string{"REQ_SENT", "MRA_REQ_RCVD"}, conn...)...),
		QPStateRTR:  setOf(conn...),
		QPStateRTS:  setOf(conn...),
		4:           {},
	}
	for qs, ok := range allowed {
		for _, st := range reachable {
			if st != "ESTABLISHED" && len(st) > 11 && st[:12] == "ESTABLISHED/" && st != "ESTABLISHED/passive" {
				continue // LAP sub-states: see TestInitQPAttrAfterLAP
			}
			h := newHarness(t)
			id := h.reach(st)
			_, mask, err := id.InitQPAttr(qs)
			if ok[st] {
				if err != nil || mask&QPAttrState == 0 && qs != QPStateRTS {
					t.Errorf("%s → QP state %d: mask %#x err %v", st, qs, mask, err)
				}
			} else if !errors.Is(err, unix.EINVAL) {
				t.Errorf("%s → QP state %d: err %v, want EINVAL", st, qs, err)
			}
		}
	}
}

func setOf(s ...string) map[string]bool {
	m := make(map[string]bool)
	for _, v := range s {
		m[v] = true
	}
	return m
}

func TestInitQPAttrActive(t *testing.T) {
	h := newHarness(t)
	id := h.reach("ESTABLISHED")
	a, mask, err := id.InitQPAttr(QPStateInit)
	must(t, err)
	if mask != QPAttrState|QPAttrAccessFlags|QPAttrPKeyIndex|QPAttrPort ||
		a.AccessFlags != AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic || a.PortNum != 1 || a.PKeyIndex != 0 {
		t.Errorf("INIT %#x %+v", mask, a)
	}
	a, mask, err = id.InitQPAttr(QPStateRTR)
	must(t, err)
	if mask != QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer {
		t.Errorf("RTR mask %#x", mask)
	}
	// Active: rq_psn = own REQ PSN, dest = REP QPN, responder resources =
	// REP initiator depth.
	if a.RQPSN != 0x1000 || a.DestQPN != peerQPN || a.MaxDestRdAtomic != 2 || a.MinRNRTimer != 0 ||
		a.PathMTU != 4 || a.AH.DLID != peerLID || a.AH.SL != 2 || a.AH.StaticRate != 3 || a.AH.IsGlobal {
		t.Errorf("RTR %+v", a)
	}
	a, mask, err = id.InitQPAttr(QPStateRTS)
	must(t, err)
	if mask != QPAttrState|QPAttrSQPSN|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic|QPAttrTimeout {
		t.Errorf("RTS mask %#x", mask)
	}
	// sq_psn = REP PSN; retry = own; rnr = REP's; max_rd_atomic = REP
	// responder resources; timeout = cm_ack_timeout(15, 14) = 16.
	if a.SQPSN != 0x3000 || a.RetryCnt != 7 || a.RNRRetry != 5 || a.MaxRdAtomic != 1 || a.Timeout != 16 {
		t.Errorf("RTS %+v", a)
	}
}

func TestInitQPAttrPassive(t *testing.T) {
	h := newHarness(t)
	id := h.reach("REP_SENT") // REP: QPN localQPN, PSN 0x4000, resp 2, init depth 3
	a, _, err := id.InitQPAttr(QPStateRTR)
	must(t, err)
	if a.RQPSN != 0x4000 || a.DestQPN != peerQPN || a.MaxDestRdAtomic != 2 || a.AH.DLID != peerLID {
		t.Errorf("RTR %+v", a)
	}
	a, _, err = id.InitQPAttr(QPStateRTS)
	must(t, err)
	// sq_psn = REQ PSN; retry and RNR retry from the REQ; timeout = REQ
	// local ACK timeout.
	if a.SQPSN != 0x2000 || a.RetryCnt != 5 || a.RNRRetry != 4 || a.MaxRdAtomic != 3 || a.Timeout != 17 {
		t.Errorf("RTS %+v", a)
	}
}

func TestInitQPAttrAfterLAP(t *testing.T) {
	h := newHarness(t)
	id := h.reach("ESTABLISHED/LAP_RCVD")
	a, mask, err := id.InitQPAttr(QPStateRTS)
	must(t, err)
	if mask != QPAttrAltPath|QPAttrPathMigState || a.PathMigState != MigRearm || a.AltAH.DLID != 6 || a.AltPortNum != 1 {
		t.Errorf("RTS after LAP: %#x %+v", mask, a)
	}
	_, mask, _ = id.InitQPAttr(QPStateRTR)
	if mask&QPAttrAltPath == 0 {
		t.Errorf("RTR mask %#x lacks ALT_PATH with an alternate path", mask)
	}
}

// NOTIFY(PATH_MIG) swaps the primary and alternate addresses, as
// cm_migrate does from Linux 4.19 (checked) to the last kernels with
// ib_ucm: the QP's primary is then the LAP's path and its alternate the
// old primary, and a second PATH_MIG goes back.
func TestPathMigSwapsTheAddresses(t *testing.T) {
	h := newHarness(t)
	id := h.reach("ESTABLISHED/LAP_IDLE") // the peer's LAP: alternate DLID 6
	before, _, err := id.InitQPAttr(QPStateRTR)
	must(t, err)
	must(t, id.Notify(NotifyPathMig))
	a, mask, err := id.InitQPAttr(QPStateRTR)
	must(t, err)
	if a.AH.DLID != 6 {
		t.Errorf("primary DLID after PATH_MIG %d, want the alternate's 6", a.AH.DLID)
	}
	if mask&QPAttrAltPath == 0 || a.AltAH.DLID != before.AH.DLID {
		t.Errorf("alternate after PATH_MIG: mask %#x DLID %d, want the old primary's %d", mask, a.AltAH.DLID, before.AH.DLID)
	}
	must(t, id.Notify(NotifyPathMig))
	if b, _, _ := id.InitQPAttr(QPStateRTR); b.AH.DLID != before.AH.DLID || b.AltAH.DLID != 6 {
		t.Errorf("after a second PATH_MIG: primary DLID %d, alternate %d; want %d and 6 back", b.AH.DLID, b.AltAH.DLID, before.AH.DLID)
	}
}

// A LAP whose alternate path no local port can take (the GID named as
// ours is not ours) is dropped, as cm_lap_handler drops it: no event, no
// LAP_RCVD, no alternate path for the QP, and no MRA for a duplicate.
func TestLAPWithUnusablePathDropped(t *testing.T) {
	h := newHarness(t)
	id := h.reach("ESTABLISHED")
	lap := h.peerLAP(id)
	lap.Alternate.RemoteGID[15] ^= 0xff
	h.inject(0x55, lap)
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("LAP with an alternate path not ours gave %v", evs)
	}
	if _, ls := id.State(); ls != LAPUninit {
		t.Errorf("LAP state %v, want LAP_UNINIT", ls)
	}
	if _, mask, _ := id.InitQPAttr(QPStateRTS); mask&QPAttrAltPath != 0 {
		t.Errorf("RTS mask %#x has ALT_PATH after a dropped LAP", mask)
	}
	h.inject(0x55, h.peerLAP(id))
	must(t, id.SendMRA(20, nil))
	h.sent()
	h.inject(0x55, lap)
	if sent := h.sent(); len(sent) != 0 {
		t.Errorf("duplicate LAP with an unusable path in MRA_LAP_SENT answered with %v", sent)
	}
}

// TestREQFromPath is §6.1: what the REQ carries for a path.
func TestREQFromPath(t *testing.T) {
	h := newHarness(t)
	p := testREQParams()
	p.Primary.HopLimit = 3 // routed
	p.Primary.FlowLabel = 0xABCDE
	p.Primary.TrafficClass = 9
	alt := *p.Primary
	alt.SLID, alt.DLID, alt.HopLimit = 3, 4, 0
	p.Alternate = &alt
	must(t, h.newID().SendREQ(p))
	req := one[*wire.REQ](t, h.sent())
	pp := req.Primary
	if pp.LocalLID != permissiveLID || pp.RemoteLID != permissiveLID || pp.SubnetLocal ||
		pp.LocalGID != localGID || pp.RemoteGID != peerGID || pp.FlowLabel != 0xABCDE || pp.HopLimit != 3 ||
		pp.TrafficClass != 9 || pp.SL != 2 || pp.PacketRate != 3 || pp.LocalACKTimeout != ackTimeout(15, 14) {
		t.Errorf("routed primary %+v", pp)
	}
	ap := req.Alternate
	if ap.LocalLID != 3 || ap.RemoteLID != 4 || !ap.SubnetLocal {
		t.Errorf("alternate %+v", ap)
	}
	if req.PartitionKey != 0xffff || req.PathMTU != 4 || req.LocalCAGUID != localGUID || req.ServiceID != 0x1234 ||
		req.TransportType != wire.TransportRC || req.LocalQPN != localQPN || req.StartingPSN != 0x1000 ||
		req.ResponderResources != 4 || req.InitiatorDepth != 2 || req.MaxCMRetries != 3 {
		t.Errorf("REQ %+v", req)
	}
}

// ipv4GID is the IPv4-mapped GID of 10.0.0.last.
func ipv4GID(last byte) hw.GID {
	return hw.GID{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, last}
}

// roce makes the harness's port an active RoCE port whose GID table holds
// localGID at index 0, then gids.
func (h *harness) roce(gids ...hw.GIDEntry) {
	h.port.attr = hw.PortAttr{
		LinkLayer: hw.LinkEthernet, State: hw.PortActive,
		GIDs:  append([]hw.GIDEntry{{Index: 0, GID: localGID, Type: hw.GIDTypeRoCEv1}}, gids...),
		PKeys: []uint16{0xffff},
	}
}

// rocePath is a RoCE v2 path from gid to itself.
func rocePath(gid hw.GID) *PathRecord {
	return &PathRecord{SGID: gid, DGID: gid, PKey: 0xffff, MTU: 3, HopLimit: 64, PacketLifeTime: 18, GIDType: hw.GIDTypeRoCEv2}
}

// A SGID past GID index 255 (RoCE tables have up to 1,024 slots) cannot
// be named in umad's 8-bit gid_index: the path is refused with EINVAL, not
// sent from the GID the wrapped index names.
func TestSGIDPastIndex255(t *testing.T) {
	h := newHarness(t)
	v2, wrapped := ipv4GID(7), ipv4GID(8)
	h.roce(hw.GIDEntry{Index: 44, GID: wrapped, Type: hw.GIDTypeRoCEv2}, hw.GIDEntry{Index: 300, GID: v2, Type: hw.GIDTypeRoCEv2})
	id := h.newID()
	p := testREQParams()
	p.Primary = rocePath(v2)
	if err := id.SendREQ(p); !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "GID index 300") {
		t.Fatalf("SendREQ from GID index 300: %v, want EINVAL naming the index", err)
	}
	none(t, h.sent())
	if s, _ := id.State(); s != StateIdle {
		t.Errorf("state %v after the refused REQ, want IDLE", s)
	}
}

// TestRoCE: paths resolve through the GID table (GRH always), REQs from
// RoCE peers give RoCE paths, and LAP/APR are dropped on RoCE ports.
func TestRoCE(t *testing.T) {
	h := newHarness(t)
	v1 := ipv4GID(1)
	h.roce(hw.GIDEntry{Index: 1, GID: v1, Type: hw.GIDTypeRoCEv1}, hw.GIDEntry{Index: 2, GID: v1, Type: hw.GIDTypeRoCEv2})
	id := h.newID()
	p := testREQParams()
	p.Primary = rocePath(v1)
	must(t, id.SendREQ(p))
	ep := h.port.ep
	ep.mu.Lock()
	dst := ep.sent[0].dst
	ep.mu.Unlock()
	if dst.GRH == nil || dst.GRH.SGIDIndex != 2 || dst.GRH.GID != v1 || dst.LID != 0 {
		t.Fatalf("RoCE REQ sent to %+v %+v, want GRH from GID index 2", dst, dst.GRH)
	}
	h.sent()

	// A RoCE REQ arriving: the path is RoCE v2 (from the receiving entry).
	l := h.newID()
	must(t, l.Listen(0x1234, 0))
	req := peerREQ(0x1234)
	req.Primary.LocalGID, req.Primary.RemoteGID = v1, v1
	req.Primary.LocalLID, req.Primary.RemoteLID = 0, 0
	peerRoCE := peerAddr
	peerRoCE.LID = 0
	peerRoCE.GRH = &hw.GRH{GID: v1, SGIDIndex: 2, HopLimit: 64}
	h.injectFrom(peerRoCE, 9, req)
	evs := h.takeEvents()
	if len(evs) != 1 {
		t.Fatalf("events %v, sent %v", evs, h.sent())
	}
	pp := evs[0].REQ.Primary
	if pp.GIDType != hw.GIDTypeRoCEv2 || pp.DLID != 0 || pp.HopLimit != 64 {
		t.Errorf("RoCE path %+v", pp)
	}
	child := evs[0].ID
	a, _, err := child.InitQPAttr(QPStateRTR)
	must(t, err)
	if !a.AH.IsGlobal || a.AH.GRH.SGIDIndex != 2 {
		t.Errorf("RoCE RTR AH %+v", a.AH)
	}
	// Finish the connection and check LAP is ignored on RoCE.
	must(t, child.SendREP(&REPParams{QPN: localQPN}))
	h.inject(1, &wire.RTU{LocalCommID: peerComm, RemoteCommID: child.localID})
	h.takeEvents()
	h.sent()
	h.inject(1, h.peerLAP(child))
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("LAP on RoCE gave %v", evs)
	}
}

// The passive QP sends to the LID the REQ names for the peer, where its
// MADs go to the packet's source: the two differ when the peer's CM
// sends from another LID of its LMC range, or across subnets, where a
// Linux 6.1+ REQ carries its inbound path's DLID (cm_req_handler's
// av.dlid_datapath, cm_init_qp_rtr_attr). A permissive LID in the REQ
// leaves the packet's.
func TestPassiveRTRDLIDIsTheREQsLocalLID(t *testing.T) {
	routedSrc := hw.Address{LID: 0x33, QPN: 1, SL: 2, GRH: &hw.GRH{GID: peerGID, HopLimit: 0xff}}
	for _, c := range []struct {
		name          string
		local         uint16
		routed        bool
		src           hw.Address
		wantRTR, want uint16 // the QP's DLID; the MADs' and the event path's
	}{
		{"subnet-local, MAD from another LID of the peer's", 0x21, false, hw.Address{LID: 0x20, QPN: 1, SL: 2}, 0x21, 0x20},
		{"routed, the inbound path's DLID in the REQ", 0x44, true, routedSrc, 0x44, 0x33},
		{"routed, permissive LID", permissiveLID, true, routedSrc, 0x33, 0x33},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			l := h.newID()
			must(t, l.Listen(0x7777, 0))
			req := peerREQ(0x7777)
			req.Primary.LocalLID = c.local
			if c.routed {
				req.Primary.SubnetLocal, req.Primary.HopLimit, req.Primary.RemoteLID = false, 4, permissiveLID
			}
			h.injectFrom(c.src, 9, req)
			evs := h.takeEvents()
			if len(evs) != 1 || evs[0].Type != EventREQReceived {
				t.Fatalf("events %+v", evs)
			}
			if got := evs[0].REQ.Primary.DLID; got != c.want {
				t.Errorf("event path DLID %#x, want the packet's %#x", got, c.want)
			}
			id := evs[0].ID
			a, _, err := id.InitQPAttr(QPStateRTR)
			must(t, err)
			if a.AH.DLID != c.wantRTR {
				t.Errorf("RTR DLID %#x, want %#x", a.AH.DLID, c.wantRTR)
			}
			must(t, id.SendREP(&REPParams{QPN: localQPN}))
			if dst := h.lastDst(); dst.LID != c.want {
				t.Errorf("REP sent to LID %#x, want the packet's %#x", dst.LID, c.want)
			}
		})
	}
}

// The REQ's LID is the QP's only while the REQ's primary path is the
// primary: a PATH_MIG gives the RTR address the alternate's DLID, and
// after a PATH_MIG back the MADs still go to the REQ packet's source.
func TestPassiveDatapathDLIDAcrossPathMig(t *testing.T) {
	h := newHarness(t)
	l := h.newID()
	must(t, l.Listen(0x7777, 0))
	req := peerREQ(0x7777)
	req.Primary.LocalLID = 0x21
	req.Alternate = req.Primary
	req.Alternate.LocalLID = 0x30
	src := hw.Address{LID: 0x20, QPN: 1, SL: 2, QKey: cmQKey}
	h.injectFrom(src, 9, req)
	id := h.takeEvents()[0].ID
	must(t, id.SendREP(&REPParams{QPN: localQPN}))
	h.injectFrom(src, 10, &wire.RTU{LocalCommID: peerComm, RemoteCommID: id.localID})
	h.sent()
	rtr := func() uint16 {
		a, _, err := id.InitQPAttr(QPStateRTR)
		must(t, err)
		return a.AH.DLID
	}
	if d := rtr(); d != 0x21 {
		t.Errorf("RTR DLID %#x, want the REQ's 0x21", d)
	}
	must(t, id.Notify(NotifyPathMig))
	if d := rtr(); d != 0x30 {
		t.Errorf("RTR DLID after PATH_MIG %#x, want the alternate's 0x30", d)
	}
	must(t, id.Notify(NotifyPathMig))
	must(t, id.SendDREQ(nil))
	if dst := h.lastDst(); dst.LID != src.LID {
		t.Errorf("DREQ after a PATH_MIG and back sent to LID %#x, want the packet's %#x", dst.LID, src.LID)
	}
}

// A passive RoCE connection's QP sends from the GID entry its REQ arrived
// on (cm_req_handler takes the packet's sgid_attr), not the first entry
// with the address: a VLAN netdev repeats its parent's link-local GID, and
// an entry added since the port's snapshot would otherwise fall back to
// RoCE v1. Its MADs carry the REQ's traffic class and flow label, not the
// packet's (zero for RoCE v2 over IPv4).
func TestPassiveRoCEUsesTheArrivalEntry(t *testing.T) {
	g := ipv4GID(9)
	for _, c := range []struct {
		name  string
		snap  []hw.GIDEntry
		fresh []hw.GIDEntry // the table read again, if it differs
		at    uint8         // the entry umad reports the REQ arrived on
	}{
		{"VLAN", []hw.GIDEntry{
			{Index: 1, GID: g, Type: hw.GIDTypeRoCEv1}, {Index: 2, GID: g, Type: hw.GIDTypeRoCEv2}, // eth0
			{Index: 3, GID: g, Type: hw.GIDTypeRoCEv1}, {Index: 4, GID: g, Type: hw.GIDTypeRoCEv2}, // eth0.100
		}, nil, 4},
		{"RoCE v1 on VLAN", []hw.GIDEntry{
			{Index: 1, GID: g, Type: hw.GIDTypeRoCEv1}, {Index: 2, GID: g, Type: hw.GIDTypeRoCEv2},
			{Index: 3, GID: g, Type: hw.GIDTypeRoCEv1}, {Index: 4, GID: g, Type: hw.GIDTypeRoCEv2},
		}, nil, 3},
		{"entry newer than the snapshot", nil, []hw.GIDEntry{
			{Index: 1, GID: g, Type: hw.GIDTypeRoCEv1}, {Index: 2, GID: g, Type: hw.GIDTypeRoCEv2},
		}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.roce(c.snap...)
			if c.fresh != nil {
				f := h.port.attr
				f.GIDs = append(slices.Clone(f.GIDs), c.fresh...)
				h.port.fresh = &f
			}
			l := h.newID()
			must(t, l.Listen(0x1234, 0))
			req := peerREQ(0x1234)
			req.Primary.LocalGID, req.Primary.RemoteGID = peerGID, g
			req.Primary.LocalLID, req.Primary.RemoteLID = 0, 0
			req.Primary.TrafficClass, req.Primary.FlowLabel = 106, 0x12345
			src := peerAddr
			src.LID = 0
			src.GRH = &hw.GRH{GID: peerGID, SGIDIndex: c.at, HopLimit: 0xff}
			h.injectFrom(src, 9, req)
			evs := h.takeEvents()
			if len(evs) != 1 || evs[0].Type != EventREQReceived {
				t.Fatalf("events %v, sent %v", evs, h.sent())
			}
			id := evs[0].ID
			a, _, err := id.InitQPAttr(QPStateRTR)
			must(t, err)
			if a.AH.GRH.SGIDIndex != c.at {
				t.Errorf("RTR sends from GID index %d, want %d, the REQ's", a.AH.GRH.SGIDIndex, c.at)
			}
			must(t, id.SendREP(&REPParams{QPN: localQPN}))
			dst := h.lastDst()
			if dst.GRH == nil || dst.GRH.SGIDIndex != c.at || dst.GRH.GID != peerGID {
				t.Fatalf("REP sent to %+v %+v, want from GID index %d to %v", dst, dst.GRH, c.at, peerGID)
			}
			if dst.GRH.TrafficClass != 106 || dst.GRH.FlowLabel != 0x12345 {
				t.Errorf("REP traffic class %d, flow label %#x; want the REQ's 106, 0x12345", dst.GRH.TrafficClass, dst.GRH.FlowLabel)
			}
			if src.GRH.TrafficClass != 0 {
				t.Errorf("the received packet's address was changed")
			}
		})
	}
}

// A path that names no GID type goes out as RoCE v2 where the address has
// both entries (rdma_cm's default), and as RoCE v1 where it has only that.
func TestActiveRoCEPrefersV2(t *testing.T) {
	v4, v1only := ipv4GID(1), ipv4GID(2)
	h := newHarness(t)
	h.roce(hw.GIDEntry{Index: 1, GID: v4, Type: hw.GIDTypeRoCEv1}, hw.GIDEntry{Index: 2, GID: v4, Type: hw.GIDTypeRoCEv2},
		hw.GIDEntry{Index: 5, GID: v1only, Type: hw.GIDTypeRoCEv1})
	for _, c := range []struct {
		gid  hw.GID
		want uint8
	}{{v4, 2}, {v1only, 5}} {
		id := h.newID()
		p := testREQParams()
		p.Primary = rocePath(c.gid)
		p.Primary.GIDType = 0 // what ucm's path conversion gives
		must(t, id.SendREQ(p))
		if dst := h.lastDst(); dst.GRH == nil || dst.GRH.SGIDIndex != c.want {
			t.Errorf("REQ from %v sent from %+v, want GID index %d", c.gid, dst.GRH, c.want)
		}
	}
}
