package trace

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

var t0 = time.Date(2026, 12, 1, 22, 40, 0, 0, time.UTC)

// testMAD encodes m; the messages here are valid, so a failure is a
// broken test.
func testMAD(tid uint64, m wire.Message) []byte {
	var mad hw.MAD
	if err := wire.Encode(&mad, tid, m); err != nil {
		panic(err)
	}
	return mad[:]
}

func testREQ() *wire.REQ {
	return &wire.REQ{
		LocalCommID: 0x11223344, ServiceID: 0x1234, LocalCAGUID: 0x0002c90300000001, LocalQPN: 0x000111,
		ResponderResources: 4, InitiatorDepth: 2, RemoteCMResponseTimeout: 16, StartingPSN: 0x1000,
		LocalCMResponseTimeout: 16, RetryCount: 7, PartitionKey: 0xffff, PathMTU: 3, RNRRetryCount: 6, MaxCMRetries: 3,
		Primary: wire.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: hw.GID{0xfe, 0x80, 8: 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56},
			RemoteGID: hw.GID{0xfe, 0x80, 8: 0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef}, PacketRate: 3, HopLimit: 64, SubnetLocal: false, LocalACKTimeout: 18},
	}
}

// roceEvent: a REQ sent from fe80::5054:ff:fe12:3456 to
// fe80::5054:ff:feab:cdef (rxe's link-local GIDs) with flow label 0x12345.
func roceEvent() Event {
	return Event{
		Time: t0, Dev: "rxe0", Port: 1, Link: LinkRoCE, Dir: "sent", MAD: testMAD(0x11223344, testREQ()),
		Local:  Endpoint{GID: "fe80::5054:ff:fe12:3456", QPN: 1},
		Remote: Endpoint{GID: "fe80::5054:ff:feab:cdef", QPN: 1},
		PKey:   0xffff, GRH: &GRH{TrafficClass: 0x28, FlowLabel: 0x12345, HopLimit: 64},
	}
}

// roce4Event: the same REQ received over IPv4 (IPv4-mapped GIDs).
func roce4Event() Event {
	ev := roceEvent()
	ev.Dir = "received"
	ev.Local.GID, ev.Remote.GID = "10.0.0.1", "10.0.0.2"
	ev.GRH = &GRH{TrafficClass: 0, HopLimit: 64}
	return ev
}

func ibEvent(global bool) Event {
	ev := Event{
		Time: t0, Dev: "mlx5_0", Port: 1, Link: LinkIB, Dir: "sent", MAD: testMAD(0x11223344, testREQ()),
		Local: Endpoint{LID: 1, QPN: 1}, Remote: Endpoint{LID: 2, QPN: 1}, PKey: 0x8001, SL: 2,
	}
	if global {
		ev.Local.GID, ev.Remote.GID = "fe80::2:c903:0:1", "fe80::2:c903:0:2"
		ev.GRH = &GRH{TrafficClass: 0, FlowLabel: 0, HopLimit: 255}
	}
	return ev
}

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// The ICRC is the one RoCE hardware computes: a CNP captured on a
// ConnectX-4 Lx (published with scapy's RoCE tests) ends in the ICRC our
// function gives for its headers, stored in the same byte order.
func TestRoCEICRCMatchesHardware(t *testing.T) {
	pkt := unhex(t, `e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2
		003c 718c 4000 4011 9161 0a00 1101 0a00
		1201 0000 12b7 0028 0000 8100 ffff 4000
		0118 0000 0000 0000 0000 0000 0000 0000
		0000 0000 0000 82fd 002a`)
	body := pkt[14 : len(pkt)-4]
	got := binary.LittleEndian.AppendUint32(nil, roceICRC(body, true))
	if !bytes.Equal(got, pkt[len(pkt)-4:]) {
		t.Fatalf("ICRC %x, the hardware sent %x", got, pkt[len(pkt)-4:])
	}
}

// Golden frames: the headers are written out here by hand from the specs
// (Ethernet, IPv6/IPv4, UDP 4791, BTH, DETH; LRH, GRH), the MAD is the
// REQ's encoding, and the trailing CRCs are pinned.
func TestFrameGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   Event
		hdr  string
		crc  string
	}{{
		name: "RoCEv2 IPv6, sent",
		ev:   roceEvent(),
		hdr: `525400abcdef 525400123456 86dd
			6 28 12345 0120 11 40 fe800000000000005054 00fffe123456 fe800000000000005054 00fffeabcdef
			e341 12b7 0120 0000
			64 00 ffff 00 000001 00 000000
			80010000 00 000001`,
		crc: "e525f5eb",
	}, {
		name: "RoCEv2 IPv4, received",
		ev:   roce4Event(),
		hdr: `02000a000001 02000a000002 0800
			45 00 0134 0000 4000 40 11 25b7 0a000002 0a000001
			c000 12b7 0120 0000
			64 00 ffff 00 000001 00 000000
			80010000 00 000001`,
		crc: "a5bbd2f3",
	}, {
		name: "InfiniBand, LRH only",
		ev:   ibEvent(false),
		hdr: `0 0 2 2 0002 0048 0001
			64 00 8001 00 000001 00 000000
			80010000 00 000001`,
		crc: "bc657a4b 176e",
	}, {
		name: "InfiniBand, LRH and GRH",
		ev:   ibEvent(true),
		hdr: `0 0 2 3 0002 0052 0001
			6 00 00000 0118 1b ff fe800000000000000002c90300000001 fe800000000000000002c90300000002
			64 00 8001 00 000001 00 000000
			80010000 00 000001`,
		crc: "882635bb 8a6d",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Frame(&tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			want := append(unhex(t, tc.hdr), tc.ev.MAD...)
			want = append(want, unhex(t, tc.crc)...)
			if !bytes.Equal(f, want) {
				t.Fatalf("frame\n%x\nwant\n%x", f, want)
			}
		})
	}
}

// The IPv4 header checksum is valid (the header sums to 0xffff).
func TestIPv4Checksum(t *testing.T) {
	ev := roce4Event()
	f, err := Frame(&ev)
	if err != nil {
		t.Fatal(err)
	}
	if ipv4Checksum(f[14:34]) != 0 {
		t.Fatalf("IPv4 header %x does not check", f[14:34])
	}
}

func TestFrameErrors(t *testing.T) {
	ev := roceEvent()
	ev.Remote.GID = ""
	if _, err := Frame(&ev); err == nil || !strings.Contains(err.Error(), "without a destination GID") {
		t.Errorf("RoCE without a peer GID: %v", err)
	}
	ev = roceEvent()
	ev.MAD = ev.MAD[:10]
	if _, err := Frame(&ev); err == nil {
		t.Error("short MAD framed")
	}
	ev = roceEvent()
	ev.Link = ""
	if _, err := Frame(&ev); err == nil {
		t.Error("unknown link layer framed")
	}
}

// A MAC comes back from a link-local GID's EUI-64; others get 02:00 and
// the address's last four bytes.
func TestMACFor(t *testing.T) {
	for gid, want := range map[string]string{
		"fe80::5054:ff:fe12:3456": "525400123456",
		"10.1.2.3":                "02000a010203",
		"2001:db8::1":             "020000000001",
	} {
		a := netip.MustParseAddr(gid)
		if a.Is4() {
			a = netip.AddrFrom16(a.As16())
		}
		m := macFor(a)
		if got := hex.EncodeToString(m[:]); got != want {
			t.Errorf("macFor(%s) = %s, want %s", gid, got, want)
		}
	}
}
