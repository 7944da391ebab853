package wire

import (
	"bytes"
	"math/bits"
	"reflect"
	"testing"

	"github.com/ucmd/ucmd/hw"
)

// Golden vectors from a Linux 6.1 kernel CM (testdata/*.hex, captured in
// the project's two-guest qemu setup, docs/ib-cm.md §12).

func mustDecode[T Message](t *testing.T, mad *hw.MAD) (Header, T) {
	t.Helper()
	h, m, err := Decode(mad)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	msg, ok := m.(T)
	if !ok {
		t.Fatalf("decoded %T", m)
	}
	if h.BaseVersion != 1 || h.MgmtClass != MgmtClassCM || h.ClassVersion != 2 || h.Method != MethodSend ||
		h.Status != 0 || h.ClassSpecific != 0 || h.AttrMod != 0 {
		t.Errorf("header %+v", h)
	}
	return h, msg
}

// roundTrip checks that re-encoding a decoded capture gives its bytes back.
func roundTrip(t *testing.T, h Header, m Message, want *hw.MAD) {
	t.Helper()
	var got hw.MAD
	if err := Encode(&got, h.TID, m); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	diffMAD(t, &got, want)
}

func ipv4MappedGID(a, b, c, d byte) hw.GID {
	return hw.GID{10: 0xff, 11: 0xff, 12: a, 13: b, 14: c, 15: d}
}

func isZero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

// The hand-made REQ that the kernel accepted, rebuilt from its parameters.
func TestReqtestREQ(t *testing.T) {
	want := readCapture(t, "reqtest-req.hex")
	req := &REQ{
		LocalCommID:             0x0c0ffe3a,
		ServiceID:               0x000000000106270f,
		LocalCAGUID:             0x505400fffe770002,
		LocalQPN:                0xabc,
		ResponderResources:      1,
		InitiatorDepth:          1,
		RemoteCMResponseTimeout: 20,
		TransportType:           TransportRC,
		EndToEndFlowControl:     true,
		StartingPSN:             0x123456,
		LocalCMResponseTimeout:  20,
		RetryCount:              7,
		PartitionKey:            0xffff,
		PathMTU:                 3, // 1024
		RNRRetryCount:           7,
		MaxCMRetries:            15,
		Primary: Path{
			LocalLID: 0xffff, RemoteLID: 0xffff,
			LocalGID:   ipv4MappedGID(192, 168, 77, 2),
			RemoteGID:  ipv4MappedGID(192, 168, 77, 1),
			PacketRate: 3, HopLimit: 64, LocalACKTimeout: 18,
		},
	}
	var got hw.MAD
	if err := Encode(&got, 0x0c0ffe3a, req); err != nil {
		t.Fatal(err)
	}
	diffMAD(t, &got, want)
	_, dec := mustDecode[*REQ](t, want)
	if exp := padded(req); !reflect.DeepEqual(dec, exp) {
		t.Errorf("decoded %+v, want %+v", dec, exp)
	}
}

// The kernel's REJ 8 to that REQ, and the same REJ from us: an unmatched
// REQ is answered cm_issue_rej style (local comm ID = the REQ's bytes 4..7,
// i.e. 0; remote comm ID = the REQ's local comm ID; the REQ's TID echoed).
func TestKernelREJInvalidServiceID(t *testing.T) {
	capture := readCapture(t, "kernel-6.1-rej-invalid-sid.hex")
	h, rej := mustDecode[*REJ](t, capture)
	if h.TID != 0x000000030c0ffe3a || h.AttrID != AttrREJ {
		t.Errorf("header TID %#x attr %#x", h.TID, h.AttrID)
	}
	if rej.LocalCommID != 0 || rej.RemoteCommID != 0x0c0ffe3a || rej.MessageRejected != MessageREQ ||
		rej.Reason != REJInvalidServiceID || rej.ARI != nil || len(rej.PrivateData) != REJPrivateDataSize || !isZero(rej.PrivateData) {
		t.Errorf("REJ %+v", rej)
	}
	roundTrip(t, h, rej, capture)

	// Our answer to the same REQ. umad gave it TID upper half 3 in flight.
	reqMAD := readCapture(t, "reqtest-req.hex")
	rh, req := mustDecode[*REQ](t, reqMAD)
	tid := 3<<32 | rh.TID
	ours := &REJ{
		LocalCommID:     0,
		RemoteCommID:    req.LocalCommID,
		MessageRejected: MessageREQ,
		Reason:          REJInvalidServiceID,
	}
	var got hw.MAD
	if err := Encode(&got, tid, ours); err != nil {
		t.Fatal(err)
	}
	diffMAD(t, &got, capture)
}

func TestKernelREQ(t *testing.T) {
	capture := readCapture(t, "kernel-6.1-req.hex")
	h, req := mustDecode[*REQ](t, capture)
	if h.TID != 0x00000002ee9b3b4a || h.AttrID != AttrREQ {
		t.Errorf("header TID %#x attr %#x", h.TID, h.AttrID)
	}
	// cm_form_tid on a little-endian host: the low half is the comm ID
	// byte-swapped (docs/ib-cm.md §8.4).
	if got := bits.ReverseBytes32(uint32(h.TID)); got != req.LocalCommID {
		t.Errorf("TID low half byte-swapped = %#x, local comm ID %#x", got, req.LocalCommID)
	}
	want := &REQ{
		LocalCommID:             0x4a3b9bee,
		ServiceID:               0x0000000001061c06, // RDMA_PS_TCP << 16 | 7174
		LocalCAGUID:             0x505400fffe770001,
		LocalQKey:               0,
		LocalQPN:                0x12,
		ResponderResources:      1,
		InitiatorDepth:          1,
		RemoteCMResponseTimeout: 20,
		TransportType:           TransportRC,
		EndToEndFlowControl:     false,
		StartingPSN:             0x1c4748,
		LocalCMResponseTimeout:  20,
		RetryCount:              7,
		PartitionKey:            0xffff,
		PathMTU:                 3,
		RNRRetryCount:           7,
		MaxCMRetries:            15,
		Primary: Path{
			LocalLID: 0xffff, RemoteLID: 0xffff, // permissive: hop limit > 1
			LocalGID:        ipv4MappedGID(192, 168, 77, 1),
			RemoteGID:       ipv4MappedGID(192, 168, 77, 2),
			FlowLabel:       0x15f19,
			PacketRate:      0,
			HopLimit:        64,
			SubnetLocal:     false,
			LocalACKTimeout: 19, // cm_ack_timeout(ack delay 15, packet life time 18)
		},
	}
	got := *req
	got.PrivateData = nil
	if !reflect.DeepEqual(got, *want) {
		t.Errorf("REQ\n%+v\nwant\n%+v", got, *want)
	}
	if req.Alternate.LocalLID != 0 {
		t.Error("alternate path present")
	}
	// rdma_cm's cma_hdr: version 0, IPv4, source port, then two 16-byte
	// addresses with the IPv4 address in the last 4 bytes.
	pd := req.PrivateData
	if len(pd) != REQPrivateDataSize || pd[0] != 0 || pd[1] != 0x40 || pd[2] != 0x8e || pd[3] != 0x8d ||
		!bytes.Equal(pd[16:20], []byte{192, 168, 77, 1}) || !bytes.Equal(pd[32:36], []byte{192, 168, 77, 2}) {
		t.Errorf("private data %x", pd)
	}
	roundTrip(t, h, req, capture)

	// What B answered (reqtest rejsrv; A's rping reported REJECTED, error 8).
	var rej hw.MAD
	if err := Encode(&rej, h.TID, &REJ{RemoteCommID: req.LocalCommID, MessageRejected: MessageREQ, Reason: REJInvalidServiceID}); err != nil {
		t.Fatal(err)
	}
	diffMAD(t, &rej, madOf(t, "01070203 00000000 00000002 ee9b3b4a 00120000 00000000",
		"000: 00000000 4a3b9bee 00000008 # local 0 | remote = the kernel's comm ID | REQ, no ARI, reason 8"))
}

func TestKernelREP(t *testing.T) {
	capture := readCapture(t, "kernel-6.1-rep.hex")
	h, rep := mustDecode[*REP](t, capture)
	if h.TID != 0x000000060c0ffe10 || h.AttrID != AttrREP {
		t.Errorf("header TID %#x attr %#x", h.TID, h.AttrID)
	}
	want := REP{
		LocalCommID:        0x2370595e,
		RemoteCommID:       0x0c0ffe10,
		LocalQPN:           0x13,
		StartingPSN:        0x9b455d,
		ResponderResources: 1,
		InitiatorDepth:     1,
		TargetACKDelay:     15, // rxe local_ca_ack_delay
		FailoverAccepted:   FailoverAccepted,
		RNRRetryCount:      7,
		LocalCAGUID:        0x505400fffe770001,
	}
	got := *rep
	got.PrivateData = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("REP\n%+v\nwant\n%+v", got, want)
	}
	if len(rep.PrivateData) != REPPrivateDataSize {
		t.Errorf("private data %d bytes", len(rep.PrivateData))
	}
	roundTrip(t, h, rep, capture)

	// The RTU and DREQ B sent next, which A's kernel accepted (rping saw
	// the connection established, then DISCONNECT). RTU reuses the REQ's
	// TID; the DREQ has a new one; its remote QPN is the REP's QPN.
	var rtu hw.MAD
	if err := Encode(&rtu, 0x0c0ffe10, &RTU{LocalCommID: rep.RemoteCommID, RemoteCommID: rep.LocalCommID}); err != nil {
		t.Fatal(err)
	}
	diffMAD(t, &rtu, madOf(t, "01070203 00000000 00000000 0c0ffe10 00140000 00000000",
		"000: 0c0ffe10 2370595e"))
	var dreq hw.MAD
	if err := Encode(&dreq, 0x8c0ffe10, &DREQ{LocalCommID: rep.RemoteCommID, RemoteCommID: rep.LocalCommID, RemoteQPN: rep.LocalQPN}); err != nil {
		t.Fatal(err)
	}
	diffMAD(t, &dreq, madOf(t, "01070203 00000000 00000000 8c0ffe10 00150000 00000000",
		"000: 0c0ffe10 2370595e 00001300 # IDs | remote QPN 0x13, reserved"))
}
