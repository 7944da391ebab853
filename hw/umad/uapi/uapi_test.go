package uapi

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"runtime"
	"strings"
	"testing"
)

// The golden bytes below are little-endian, 64-bit (amd64, arm64, riscv64):
// the layout was checked against sizeof/offsetof from the kernel header
// compiled with gcc on amd64.
func littleEndian64(t *testing.T) {
	t.Helper()
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], 1)
	if b[0] != 1 || runtime.GOARCH == "386" || runtime.GOARCH == "arm" {
		t.Skip("golden bytes are for little-endian 64-bit hosts")
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	var clean strings.Builder
	for line := range strings.Lines(s) {
		line, _, _ = strings.Cut(line, "#")
		clean.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(clean.String())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestIoctlNumbers(t *testing.T) {
	switch runtime.GOARCH {
	case "amd64", "arm64", "riscv64", "386", "arm", "s390x", "loong64":
	default:
		t.Skip("kernel values below are for the generic _IOC layout")
	}
	for _, c := range []struct {
		name      string
		got, want uint
	}{
		// From <rdma/rdma_user_ioctl.h> compiled on amd64.
		{"IB_USER_MAD_REGISTER_AGENT", IB_USER_MAD_REGISTER_AGENT, 0xc01c1b01},
		{"IB_USER_MAD_UNREGISTER_AGENT", IB_USER_MAD_UNREGISTER_AGENT, 0x40041b02},
		{"IB_USER_MAD_ENABLE_PKEY", IB_USER_MAD_ENABLE_PKEY, 0x1b03},
		{"IB_USER_MAD_REGISTER_AGENT2", IB_USER_MAD_REGISTER_AGENT2, 0xc0281b04},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

func TestUserMADHdrWithGRH(t *testing.T) {
	littleEndian64(t)
	h := UserMADHdr{
		ID: 2, Status: 0, TimeoutMS: 0, Retries: 0, Length: 320,
		QPN: 1, QKey: 0x80010000, LID: 0, SL: 0, PathBits: 0,
		GRHPresent: 1, GIDIndex: 1, HopLimit: 64, TrafficClass: 0x10,
		GID:       [16]byte{0xfe, 0x80, 8: 0x50, 0x54, 0x00, 0xff, 0xfe, 0x77, 0x00, 0x01},
		FlowLabel: 0x000abcde, PKeyIndex: 3,
	}
	want := unhex(t, `
		02000000 00000000 00000000 00000000  # id status timeout_ms retries
		40010000 00000001 80010000 0000  # length qpn(be) qkey(be) lid(be)
		00 00 01 01 40 10  # sl path_bits grh_present gid_index hop_limit tclass
		fe800000 00000000 505400ff fe770001  # gid
		000abcde 0300 000000000000  # flow_label(be) pkey_index reserved`)
	if len(want) != SizeofUserMADHdr {
		t.Fatalf("golden is %d bytes", len(want))
	}
	got := bytes.Repeat([]byte{0xee}, SizeofUserMADHdr) // reserved must be cleared
	if err := h.Encode(got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%x\nwant\n%x", got, want)
	}
	var back UserMADHdr
	if err := back.Decode(want); err != nil || back != h {
		t.Fatalf("decoded %+v (%v), want %+v", back, err, h)
	}
}

func TestUserMADHdrWithoutGRH(t *testing.T) {
	littleEndian64(t)
	// What umad returns for a MAD from LID 0x0102, SL 5, path bits 3,
	// P_Key index 1 on an InfiniBand port.
	in := unhex(t, `
		05000000 00000000 00000000 00000000
		40010000 00000001 00000000 0102
		05 03 00 00 00 00
		00000000 00000000 00000000 00000000
		00000000 0100 000000000000`)
	var h UserMADHdr
	if err := h.Decode(in); err != nil {
		t.Fatal(err)
	}
	want := UserMADHdr{ID: 5, Length: 320, QPN: 1, LID: 0x0102, SL: 5, PathBits: 3, PKeyIndex: 1}
	if h != want {
		t.Fatalf("decoded %+v, want %+v", h, want)
	}
	out := make([]byte, SizeofUserMADHdr)
	h.Encode(out)
	if !bytes.Equal(out, in) {
		t.Fatalf("re-encoded\n%x\nwant\n%x", out, in)
	}
}

func TestRegReq(t *testing.T) {
	littleEndian64(t)
	r := RegReq{QPN: 1, MgmtClass: 0x07, MgmtClassVersion: 2}
	for _, m := range []uint8{0x03, 0x41, 0x7f} {
		if !r.SetMethod(m) {
			t.Fatalf("SetMethod(%#x) refused", m)
		}
	}
	if r.SetMethod(0x83) {
		t.Error("SetMethod accepted a response method")
	}
	want := unhex(t, `
		00000000  # id
		08000000 00000000  # method_mask[0]: bit 3
		02000000 00000080  # method_mask[1]: bits 65 and 127
		01 07 02 000000 00 00  # qpn class version oui[3] rmpp_version pad`)
	if len(want) != SizeofRegReq {
		t.Fatalf("golden is %d bytes", len(want))
	}
	got := bytes.Repeat([]byte{0xee}, SizeofRegReq)
	if err := r.Encode(got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%x\nwant\n%x", got, want)
	}
	binary.NativeEndian.PutUint32(got, 7) // the kernel writes the id back
	if id, err := DecodeRegReqID(got); err != nil || id != 7 {
		t.Errorf("agent id %d, %v", id, err)
	}
}

func TestShortBuffers(t *testing.T) {
	var h UserMADHdr
	if h.Encode(make([]byte, 63)) != ErrShort || h.Decode(make([]byte, 63)) != ErrShort {
		t.Error("63-byte header buffer accepted")
	}
	var r RegReq
	if r.Encode(make([]byte, 27)) != ErrShort {
		t.Error("27-byte registration buffer accepted")
	}
	if _, err := DecodeRegReqID(nil); err != ErrShort {
		t.Error("empty registration buffer accepted")
	}
}
