package abi

import (
	"bytes"
	"reflect"
	"testing"
)

func goldenOf(t *testing.T, name string) (Struct, []byte) {
	t.Helper()
	for _, tc := range goldenCases {
		if tc.name == name {
			return tc.val, unhex(t, tc.golden)
		}
	}
	t.Fatalf("no golden case %s", name)
	return nil, nil
}

// An event response carries each union member at offset 24, zero-padded to
// the full 168 bytes, and reads it back.
func TestEventRespUnionMembers(t *testing.T) {
	requireLittleEndian(t)
	// The fixed part: uid, id, event, present, reserved.
	head := unhex(t, `01 02 03 04 05 06 07 08  09 0a 0b 0c  0d 0e 0f 10  11 12 13 14  00 00 00 00`)
	resp := func() EventResp {
		return EventResp{
			UID:     0x0807060504030201,
			ID:      0x0c0b0a09,
			Event:   CMEvent(0x100f0e0d),
			Present: Present(0x14131211),
		}
	}
	type member struct {
		name string // union member's struct
		set  func(u *EventUnion, v Struct)
		get  func(u *EventUnion) Struct
	}
	for _, m := range []member{
		{"ib_ucm_req_event_resp",
			func(u *EventUnion, v Struct) { u.SetREQ(*v.(*REQEventResp)) },
			func(u *EventUnion) Struct { m := u.REQ(); return &m }},
		{"ib_ucm_rep_event_resp",
			func(u *EventUnion, v Struct) { u.SetREP(*v.(*REPEventResp)) },
			func(u *EventUnion) Struct { m := u.REP(); return &m }},
		{"ib_ucm_rej_event_resp",
			func(u *EventUnion, v Struct) { u.SetREJ(*v.(*REJEventResp)) },
			func(u *EventUnion) Struct { m := u.REJ(); return &m }},
		{"ib_ucm_mra_event_resp",
			func(u *EventUnion, v Struct) { u.SetMRA(*v.(*MRAEventResp)) },
			func(u *EventUnion) Struct { m := u.MRA(); return &m }},
		{"ib_ucm_lap_event_resp",
			func(u *EventUnion, v Struct) { u.SetLAP(*v.(*LAPEventResp)) },
			func(u *EventUnion) Struct { m := u.LAP(); return &m }},
		{"ib_ucm_apr_event_resp",
			func(u *EventUnion, v Struct) { u.SetAPR(*v.(*APREventResp)) },
			func(u *EventUnion) Struct { m := u.APR(); return &m }},
		{"ib_ucm_sidr_req_event_resp",
			func(u *EventUnion, v Struct) { u.SetSIDRREQ(*v.(*SIDRREQEventResp)) },
			func(u *EventUnion) Struct { m := u.SIDRREQ(); return &m }},
		{"ib_ucm_sidr_rep_event_resp",
			func(u *EventUnion, v Struct) { u.SetSIDRREP(*v.(*SIDRREPEventResp)) },
			func(u *EventUnion) Struct { m := u.SIDRREP(); return &m }},
	} {
		t.Run(m.name, func(t *testing.T) {
			val, member := goldenOf(t, m.name)
			r := resp()
			// Start from a union full of another member's bytes: the
			// setter must clear them.
			for i := range r.U {
				r.U[i] = 0xee
			}
			m.set(&r.U, val)

			want := make([]byte, EventRespSize)
			copy(want, head)
			copy(want[EventUnionOffset:], member)
			got := make([]byte, EventRespSize)
			r.Encode(got)
			if !bytes.Equal(got, want) {
				t.Fatalf("event response:\n got %x\nwant %x", got, want)
			}

			var back EventResp
			back.Decode(got)
			if back != r {
				t.Errorf("decoded %+v, want %+v", back, r)
			}
			if mv := m.get(&back.U); !reflect.DeepEqual(mv, val) {
				t.Errorf("member read back %+v, want %+v", mv, val)
			}
		})
	}
	t.Run("send_status", func(t *testing.T) {
		r := resp()
		for i := range r.U {
			r.U[i] = 0xee
		}
		r.U.SetSendStatus(0x1c1b1a19)
		want := make([]byte, EventRespSize)
		copy(want, head)
		copy(want[EventUnionOffset:], []byte{0x19, 0x1a, 0x1b, 0x1c})
		got := make([]byte, EventRespSize)
		r.Encode(got)
		if !bytes.Equal(got, want) {
			t.Fatalf("event response:\n got %x\nwant %x", got, want)
		}
		if s := r.U.SendStatus(); s != 0x1c1b1a19 {
			t.Errorf("SendStatus() = %#x", s)
		}
	})
}

// Reserved bytes of the fixed part are ignored on decode.
func TestEventRespReserved(t *testing.T) {
	b := make([]byte, EventRespSize)
	for i := 20; i < 24; i++ {
		b[i] = 0xff
	}
	var r EventResp
	r.Decode(b)
	if r != (EventResp{}) {
		t.Errorf("reserved bytes leaked into %+v", r)
	}
}

// The private-data and info sizes delivered per event (ucm-abi.md §2.5) are
// the CM message limits (§2.6).
func TestCMEventTable(t *testing.T) {
	for _, tc := range []struct {
		ev         CMEvent
		name       string
		data, info int
	}{
		{0, "REQ_ERROR", 0, 0},
		{1, "REQ_RECEIVED", 92, 0},
		{2, "REP_ERROR", 0, 0},
		{3, "REP_RECEIVED", 196, 0},
		{4, "RTU_RECEIVED", 224, 0},
		{5, "USER_ESTABLISHED", 0, 0},
		{6, "DREQ_ERROR", 0, 0},
		{7, "DREQ_RECEIVED", 220, 0},
		{8, "DREP_RECEIVED", 224, 0},
		{9, "TIMEWAIT_EXIT", 0, 0},
		{10, "MRA_RECEIVED", 222, 0},
		{11, "REJ_RECEIVED", 148, 72},
		{12, "LAP_ERROR", 0, 0},
		{13, "LAP_RECEIVED", 168, 0},
		{14, "APR_RECEIVED", 148, 72},
		{15, "SIDR_REQ_ERROR", 0, 0},
		{16, "SIDR_REQ_RECEIVED", 216, 0},
		{17, "SIDR_REP_RECEIVED", 136, 72},
		{18, "CMEvent(18)", 0, 0},
	} {
		if got := tc.ev.String(); got != tc.name {
			t.Errorf("CMEvent(%d).String() = %q, want %q", uint32(tc.ev), got, tc.name)
		}
		if got := tc.ev.PrivateDataLen(); got != tc.data {
			t.Errorf("%v.PrivateDataLen() = %d, want %d", tc.ev, got, tc.data)
		}
		if got := tc.ev.MaxInfoLen(); got != tc.info {
			t.Errorf("%v.MaxInfoLen() = %d, want %d", tc.ev, got, tc.info)
		}
	}
}

func TestBitStrings(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{Present(0).String(), "0"},
		{(PresData | PresPrimary | PresAlternate).String(), "DATA|PRIMARY|ALTERNATE"},
		{(PresInfo | 0x40).String(), "INFO|0x40"},
		{QPAttrMask(0).String(), "0"},
		{(QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN).String(),
			"STATE|AV|PATH_MTU|RQ_PSN|DEST_QPN"},
		{(QPAttrPathMigState | 1<<21).String(), "PATH_MIG_STATE|0x200000"},
		{QPStateRTS.String(), "RTS"},
		{QPState(9).String(), "QPState(9)"},
		{QPTypeRC.String(), "RC"},
		{QPTypeXRCIni.String(), "XRC_INI"},
		{QPType(1).String(), "QPType(1)"},
		{IBEventCommEst.String(), "COMM_EST"},
		{IBEventPathMig.String(), "PATH_MIG"},
		{IBEvent(5).String(), "IBEvent(5)"},
		{Header{Cmd: CmdSendREQ, In: 64}.String(), "SEND_REQ in=64 out=0"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	// Mask bits are the kernel's IB_QP_* values.
	if QPAttrSQPSN != 1<<16 || QPAttrDestQPN != 1<<20 || QPAttrAltPath != 1<<14 {
		t.Errorf("QP attribute mask bits drifted")
	}
	if PresData != 1 || PresInfo != 2 || PresPrimary != 4 || PresAlternate != 8 {
		t.Errorf("present bits drifted")
	}
}

// The send-side limits of ucm-abi.md §2.6.
func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want int
	}{
		{"REQ", MaxREQPrivateData, 92},
		{"MRA", MaxMRAPrivateData, 222},
		{"REJ", MaxREJPrivateData, 148},
		{"REJ ARI", MaxREJARI, 72},
		{"REP", MaxREPPrivateData, 196},
		{"RTU", MaxRTUPrivateData, 224},
		{"DREQ", MaxDREQPrivateData, 220},
		{"DREP", MaxDREPPrivateData, 224},
		{"LAP", MaxLAPPrivateData, 168},
		{"APR", MaxAPRPrivateData, 148},
		{"APR info", MaxAPRInfo, 72},
		{"SIDR_REQ", MaxSIDRREQPrivateData, 216},
		{"SIDR_REP", MaxSIDRREPPrivateData, 136},
		{"SIDR_REP info", MaxSIDRREPInfo, 72},
	} {
		if tc.got != tc.want {
			t.Errorf("%s limit = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}
