package interop

// Host-side golden vectors (no build tag, no VM): MADs the Linux 6.1 kernel
// CM sent to cmcore during `make interop`, stored in
// cmcore/wire/testdata/kernel-6.1-interop-*.hex. Each is decoded with
// cmcore/wire, checked field by field against what the scenario set up,
// and re-encoded to the same bytes.

import (
	"bytes"
	"encoding/hex"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

// readGolden parses "OFF: xxxxxxxx xxxxxxxx ... [# comment]" rows; bytes
// not listed are zero.
func readGolden(t *testing.T, name string) *hw.MAD {
	t.Helper()
	b, err := os.ReadFile("../../cmcore/wire/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var m hw.MAD
	for ln, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		off, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		o, err := strconv.ParseUint(off, 16, 16)
		if err != nil {
			t.Fatalf("%s:%d: offset %q", name, ln+1, off)
		}
		row, err := hex.DecodeString(strings.Join(strings.Fields(rest), ""))
		if err != nil || int(o)+len(row) > len(m) {
			t.Fatalf("%s:%d: bad row", name, ln+1)
		}
		copy(m[o:], row)
	}
	return &m
}

func decodeGolden[T wire.Message](t *testing.T, name string) (*hw.MAD, wire.Header, T) {
	t.Helper()
	mad := readGolden(t, name)
	h, m, err := wire.Decode(mad)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	msg, ok := m.(T)
	if !ok {
		t.Fatalf("%s: decoded %T", name, m)
	}
	if h.BaseVersion != 1 || h.MgmtClass != wire.MgmtClassCM || h.ClassVersion != 2 || h.Method != wire.MethodSend ||
		h.Status != 0 || h.ClassSpecific != 0 || h.AttrMod != 0 {
		t.Errorf("%s: header %+v", name, h)
	}
	var again hw.MAD
	if err := wire.Encode(&again, h.TID, msg); err != nil {
		t.Fatalf("%s: encode: %v", name, err)
	}
	if again != *mad {
		t.Errorf("%s: re-encoded differs:\n%s", name, hex.Dump(again[:]))
	}
	return mad, h, msg
}

func wantPD(t *testing.T, what string, pd []byte, prefix string, size int) {
	t.Helper()
	if len(pd) != size || !bytes.HasPrefix(pd, []byte(prefix)) || !isZero(pd[len(prefix):]) {
		t.Errorf("%s private data (%d bytes) %q, want %q then zeros (%d bytes)", what, len(pd), pd, prefix, size)
	}
}

func isZero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

var (
	goldenGIDA = hw.GID{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 77, 15: 1}
	goldenGIDB = hw.GID{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 77, 15: 2}
)

const goldenGUIDA = 0x505400fffe770001

// The kernel's REQ (rdma_connect to 192.168.77.2:7481 with "kernel-req").
func TestGoldenKernelREQ(t *testing.T) {
	_, h, m := decodeGolden[*wire.REQ](t, "kernel-6.1-interop-req-pd.hex")
	// cm_form_tid: hi_tid 2, comm ID byte-swapped (docs/ib-cm.md §8.4)
	if h.TID != 0x0000000257005999 || m.LocalCommID != 0x99590057 {
		t.Errorf("TID %#x comm ID %#x", h.TID, m.LocalCommID)
	}
	want := wire.REQ{
		LocalCommID: 0x99590057, ServiceID: 0x0000000001060000 | 7481, LocalCAGUID: goldenGUIDA,
		LocalQPN: 0x13, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		TransportType: wire.TransportRC, StartingPSN: 0x0983dc, LocalCMResponseTimeout: 20,
		RetryCount: 7, PartitionKey: 0xffff, PathMTU: 3, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: wire.Path{
			LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: goldenGIDA, RemoteGID: goldenGIDB,
			FlowLabel: 0x901a9, PacketRate: 0, TrafficClass: 0, HopLimit: 64, SL: 0,
			SubnetLocal: false, LocalACKTimeout: 19,
		},
	}
	pd := m.PrivateData
	m.PrivateData = nil
	if !reflect.DeepEqual(*m, want) {
		t.Errorf("REQ\n got %+v\nwant %+v", *m, want)
	}
	// cma_hdr: version 0, IPv4, source port, 192.168.77.1 → .2, then the user's
	if len(pd) != wire.REQPrivateDataSize || pd[0] != 0 || pd[1] != 0x40 ||
		!bytes.Equal(pd[16:20], []byte{192, 168, 77, 1}) || !bytes.Equal(pd[32:36], []byte{192, 168, 77, 2}) {
		t.Errorf("cma_hdr % x", pd[:36])
	}
	wantPD(t, "REQ user", pd[36:], "kernel-req", wire.REQPrivateDataSize-36)
}

// The kernel's REP (rdma_accept with "kernel-rep") to cmcore's REQ.
func TestGoldenKernelREP(t *testing.T) {
	_, h, m := decodeGolden[*wire.REP](t, "kernel-6.1-interop-rep-pd.hex")
	if h.TID != 0x00000003c1865908 { // our REQ's, as umad sent it
		t.Errorf("TID %#x", h.TID)
	}
	want := wire.REP{
		LocalCommID: 0x90590057, RemoteCommID: 0xc1865908, LocalQPN: 0x11, StartingPSN: 0x3e62de,
		ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7,
		LocalCAGUID: goldenGUIDA,
	}
	pd := m.PrivateData
	m.PrivateData = nil
	if !reflect.DeepEqual(*m, want) {
		t.Errorf("REP\n got %+v\nwant %+v", *m, want)
	}
	wantPD(t, "REP", pd, "kernel-rep", wire.REPPrivateDataSize)
}

// rdma_reject("kernel-rej"): REJ 28 of the REQ, no ARI.
func TestGoldenKernelREJConsumer(t *testing.T) {
	_, h, m := decodeGolden[*wire.REJ](t, "kernel-6.1-interop-rej-consumer.hex")
	if h.TID != 0x00000009a88d87f9 || m.LocalCommID != 0x96590057 || m.RemoteCommID != 0xa88d87f9 ||
		m.MessageRejected != wire.MessageREQ || m.Reason != wire.REJConsumerDefined || len(m.ARI) != 0 {
		t.Errorf("TID %#x REJ %+v", h.TID, *m)
	}
	wantPD(t, "REJ", m.PrivateData, "kernel-rej", wire.REJPrivateDataSize)
}

// The kernel's RTU and DREQ (rdma_disconnect) as the active side: both
// carry the TID of its REQ (cm_form_tid is per id, not per message).
func TestGoldenKernelRTUDREQ(t *testing.T) {
	_, h, rtu := decodeGolden[*wire.RTU](t, "kernel-6.1-interop-rtu.hex")
	if h.TID != 0x0000000257005999 || rtu.LocalCommID != 0x99590057 || rtu.RemoteCommID != 0x4671503b {
		t.Errorf("RTU TID %#x %+v", h.TID, *rtu)
	}
	wantPD(t, "RTU", rtu.PrivateData, "", wire.RTUPrivateDataSize)
	_, h, dreq := decodeGolden[*wire.DREQ](t, "kernel-6.1-interop-dreq.hex")
	if h.TID != 0x0000000257005999 || dreq.LocalCommID != 0x99590057 || dreq.RemoteCommID != 0x4671503b ||
		dreq.RemoteQPN != 0x095107 { // the QPN of cmcore's REP
		t.Errorf("DREQ TID %#x %+v", h.TID, *dreq)
	}
	wantPD(t, "DREQ", dreq.PrivateData, "", wire.DREQPrivateDataSize)
}

// The kernel's DREP echoes our DREQ's TID (umad's hi_tid 3 | our comm ID).
func TestGoldenKernelDREP(t *testing.T) {
	_, h, m := decodeGolden[*wire.DREP](t, "kernel-6.1-interop-drep.hex")
	if h.TID != 0x00000003c1865908 || m.LocalCommID != 0x90590057 || m.RemoteCommID != 0xc1865908 {
		t.Errorf("DREP TID %#x %+v", h.TID, *m)
	}
	wantPD(t, "DREP", m.PrivateData, "", wire.DREPPrivateDataSize)
}

// SIDR with rdma_cm's UDP port space: the kernel's SIDR_REPs to cmcore
// (success with the UD QPN and RDMA_UDP_QKEY; rdma_reject; no listener)
// and the kernel's own SIDR_REQ.
func TestGoldenKernelSIDR(t *testing.T) {
	for _, c := range []struct {
		file   string
		want   wire.SIDRREP
		prefix string
	}{
		{"kernel-6.1-interop-sidr-rep.hex", wire.SIDRREP{RequestID: 0xfe644480, Status: wire.SIDRSuccess,
			QPN: 0x19, ServiceID: 0x0000000001110000 | 7491, QKey: 0x01234567}, "kernel-sidr"},
		{"kernel-6.1-interop-sidr-rep-reject.hex", wire.SIDRREP{RequestID: 0xfe644481, Status: wire.SIDRReject,
			ServiceID: 0x0000000001110000 | 7492}, "kernel-no"},
		{"kernel-6.1-interop-sidr-rep-unsupported.hex", wire.SIDRREP{RequestID: 0xfe644482, Status: wire.SIDRUnsupported,
			ServiceID: 0x0000000001110000 | 7591}, ""},
	} {
		_, h, m := decodeGolden[*wire.SIDRREP](t, c.file)
		if uint32(h.TID) != c.want.RequestID { // echoes our SIDR_REQ's TID
			t.Errorf("%s: TID %#x", c.file, h.TID)
		}
		pd := m.PrivateData
		m.PrivateData = nil
		if len(m.Info) == 0 {
			m.Info = nil
		}
		if !reflect.DeepEqual(*m, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.file, *m, c.want)
		}
		wantPD(t, c.file, pd, c.prefix, wire.SIDRREPPrivateDataSize)
	}

	_, h, req := decodeGolden[*wire.SIDRREQ](t, "kernel-6.1-interop-sidr-req.hex")
	// cm_form_tid again: the request ID byte-swapped in the TID's low half
	if h.TID != 0x000000020a2d2f79 || req.RequestID != 0x792f2d0a || req.PartitionKey != 0xffff ||
		req.ServiceID != 0x0000000001110000|7493 {
		t.Errorf("SIDR_REQ TID %#x %+v", h.TID, *req)
	}
	pd := req.PrivateData
	if len(pd) != wire.SIDRREQPrivateDataSize || pd[0] != 0 || pd[1] != 0x40 ||
		!bytes.Equal(pd[16:20], []byte{192, 168, 77, 1}) || !bytes.Equal(pd[32:36], []byte{192, 168, 77, 2}) {
		t.Errorf("cma_hdr % x", pd[:36])
	}
	wantPD(t, "SIDR_REQ user", pd[36:], "kernel-sidr", wire.SIDRREQPrivateDataSize-36)
}

// rdma_cm's lazy MRA, sent by ib_cm on our retransmitted REQ: MRA of the
// REQ, service timeout 24, the TID of our REQ.
func TestGoldenKernelMRA(t *testing.T) {
	_, h, m := decodeGolden[*wire.MRA](t, "kernel-6.1-interop-mra.hex")
	want := wire.MRA{LocalCommID: 0xbf7dc18d, RemoteCommID: 0x61f3a336, MessageMRAed: wire.MessageREQ, ServiceTimeout: 24}
	pd := m.PrivateData
	m.PrivateData = nil
	if h.TID != 0x0000001761f3a336 || !reflect.DeepEqual(*m, want) {
		t.Errorf("TID %#x MRA %+v, want %+v", h.TID, *m, want)
	}
	wantPD(t, "MRA", pd, "", wire.MRAPrivateDataSize)
}
