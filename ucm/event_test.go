package ucm

import (
	"bytes"
	"testing"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
)

// makeEvent follows ib_ucm_event_process: the private data at its area's
// full size, info only when non-empty, and the present bits to match.
func TestMakeEventPresentAndSizes(t *testing.T) {
	alt := cmcore.PathRecord{DLID: 9}
	for typ := cmcore.EventType(0); typ < abi.NumCMEvents; typ++ {
		ev := &cmcore.Event{Type: typ, PrivateData: []byte("pd"), Info: []byte{1, 2, 3}, SendStatus: 5}
		ev.REQ.Alternate = &alt
		e := makeEvent(ev)
		ct := abi.CMEvent(typ)
		if len(e.data) != ct.PrivateDataLen() {
			t.Errorf("%v: %d data bytes, want %d", ct, len(e.data), ct.PrivateDataLen())
		}
		if len(e.data) > 0 && !bytes.HasPrefix(e.data, []byte("pd")) {
			t.Errorf("%v: data %q", ct, e.data[:2])
		}
		wantInfo := typ == cmcore.EventREJReceived || typ == cmcore.EventAPRReceived || typ == cmcore.EventSIDRREPReceived
		if (e.info != nil) != wantInfo {
			t.Errorf("%v: info %v", ct, e.info)
		}
		var want abi.Present
		if len(e.data) > 0 {
			want |= abi.PresData
		}
		if wantInfo {
			want |= abi.PresInfo
		}
		switch typ {
		case cmcore.EventREQReceived:
			want |= abi.PresPrimary | abi.PresAlternate
		case cmcore.EventLAPReceived:
			want |= abi.PresAlternate
		}
		if e.resp.Present != want {
			t.Errorf("%v: present %v, want %v", ct, e.resp.Present, want)
		}
		if e.resp.Event != ct {
			t.Errorf("event %v, want %v", e.resp.Event, ct)
		}
	}
}

func TestMakeEventUnion(t *testing.T) {
	e := makeEvent(&cmcore.Event{Type: cmcore.EventREJReceived, REJ: cmcore.REJEventParam{Reason: 28}})
	if r := e.resp.U.REJ().Reason; r != 28 {
		t.Errorf("REJ reason %d", r)
	}
	e = makeEvent(&cmcore.Event{Type: cmcore.EventREQError, SendStatus: cmcore.WCRespTimeout})
	if s := e.resp.U.SendStatus(); s != uint32(cmcore.WCRespTimeout) {
		t.Errorf("send status %d", s)
	}
	e = makeEvent(&cmcore.Event{Type: cmcore.EventSIDRREQReceived, SIDRREQ: cmcore.SIDRREQEventParam{PKey: 0x8001, Port: 1}})
	if m := e.resp.U.SIDRREQ(); m.PKey != 0x8001 || m.Port != 1 {
		t.Errorf("SIDR_REQ %+v", m)
	}
	e = makeEvent(&cmcore.Event{Type: cmcore.EventREJReceived, Info: make([]byte, 100)})
	if len(e.info) != abi.MaxREJARI {
		t.Errorf("ARI of %d bytes, want at most %d", len(e.info), abi.MaxREJARI)
	}
}

func TestPathRoundTrip(t *testing.T) {
	p := abi.PathRec{
		DGID: [16]byte{0xfe, 0x80, 15: 1}, SGID: [16]byte{0xfe, 0x80, 15: 2}, DLID: 3, SLID: 4,
		RawTraffic: 1, FlowLabel: 0x12345, Reversible: 1, MTU: 5, PKey: 0x8001, HopLimit: 6,
		TrafficClass: 7, NumbPath: 8, SL: 9, MTUSelector: 2, RateSelector: 2, Rate: 10,
		PacketLifeTimeSelector: 2, PacketLifeTime: 11, Preference: 12,
	}
	if got := pathToABI(pathFromABI(&p)); got != p {
		t.Errorf("round trip\n got %+v\nwant %+v", got, p)
	}
}

func TestQPAttrToABI(t *testing.T) {
	a := cmcore.QPAttr{
		AH:    cmcore.AddressVector{DLID: 7, SL: 1, PortNum: 1, IsGlobal: true, GRH: cmcore.GRHAttr{HopLimit: 64, SGIDIndex: 2}},
		AltAH: cmcore.AddressVector{DLID: 8, PortNum: 2}, PathMTU: 4, DestQPN: 0x10, RQPSN: 0x11, SQPSN: 0x12,
		AccessFlags: 0xe, PKeyIndex: 3, PortNum: 1, MaxDestRdAtomic: 4, MaxRdAtomic: 5, Timeout: 14,
		RetryCnt: 6, RNRRetry: 7, AltPortNum: 2, AltPKeyIndex: 1, AltTimeout: 15, PathMigState: 1,
	}
	q := qpAttrToABI(&a, 0x1234, abi.QPStateRTR)
	if q.QPAttrMask != 0x1234 || q.QPState != abi.QPStateRTR || q.AHAttr.DLID != 7 || q.AHAttr.GRH.HopLimit != 64 ||
		q.AHAttr.IsGlobal != 1 || q.AltAHAttr.DLID != 8 || q.AltAHAttr.IsGlobal != 0 || q.PathMTU != 4 ||
		q.DestQPNum != 0x10 || q.RQPSN != 0x11 || q.SQPSN != 0x12 || q.QPAccessFlags != 0xe || q.PKeyIndex != 3 ||
		q.PortNum != 1 || q.MaxDestRdAtomic != 4 || q.MaxRdAtomic != 5 || q.Timeout != 14 || q.RetryCnt != 6 ||
		q.RNRRetry != 7 || q.AltPortNum != 2 || q.AltPKeyIndex != 1 || q.AltTimeout != 15 || q.PathMigState != abi.MigRearm {
		t.Errorf("%+v", q)
	}
}
