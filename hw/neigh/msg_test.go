package neigh

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Golden bytes are little-endian (netlink's structs are in the host's
// order): on a big-endian host the tests that compare them skip.
func skipBigEndian(t *testing.T) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("golden bytes are little-endian")
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHeaderSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"nlmsghdr", sizeofNlMsghdr, unix.SizeofNlMsghdr},
		{"rtmsg", sizeofRtMsg, unix.SizeofRtMsg},
		{"ndmsg", sizeofNdMsg, unix.SizeofNdMsg},
		{"rtattr", sizeofRtAttr, unix.SizeofRtAttr},
		{"nlmsgerr", sizeofNlMsgerr, unix.SizeofNlMsgerr},
	} {
		if c.got != c.want {
			t.Errorf("sizeof %s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// Each struct's fields at their offsets, and back.
func TestStructBytes(t *testing.T) {
	skipBigEndian(t)
	h := nlMsghdr{Len: 0x11223344, Type: 0x5566, Flags: 0x7788, Seq: 0x99aabbcc, PID: 0xddeeff00}
	r := rtMsg{Family: 1, DstLen: 2, SrcLen: 3, TOS: 4, Table: 5, Protocol: 6, Scope: 7, Type: 8, Flags: 0x0a0b0c0d}
	n := ndMsg{Family: 10, Ifindex: -2, State: 0x1234, Flags: 0x56, Type: 0x78}
	for _, c := range []struct {
		name   string
		enc    func([]byte)
		size   int
		want   string
		decode func([]byte) (any, any, error)
	}{
		{"nlmsghdr", h.Encode, sizeofNlMsghdr, "44332211 6655 8877 ccbbaa99 00ffeedd",
			func(b []byte) (any, any, error) { var d nlMsghdr; err := d.Decode(b); return d, h, err }},
		{"rtmsg", r.Encode, sizeofRtMsg, "01 02 03 04 05 06 07 08 0d0c0b0a",
			func(b []byte) (any, any, error) { var d rtMsg; err := d.Decode(b); return d, r, err }},
		{"ndmsg", n.Encode, sizeofNdMsg, "0a 00 0000 feffffff 3412 56 78",
			func(b []byte) (any, any, error) { var d ndMsg; err := d.Decode(b); return d, n, err }},
	} {
		b := make([]byte, c.size)
		c.enc(b)
		if want := unhex(t, c.want); !bytes.Equal(b, want) {
			t.Errorf("%s: %x, want %x", c.name, b, want)
		}
		if got, want, err := c.decode(b); err != nil || got != want {
			t.Errorf("%s decoded: %+v, %v; want %+v", c.name, got, err, want)
		}
		if _, _, err := c.decode(b[:c.size-1]); !errors.Is(err, errShort) {
			t.Errorf("%s from %d bytes: %v, want errShort", c.name, c.size-1, err)
		}
	}
}

func TestRequestBytes(t *testing.T) {
	skipBigEndian(t)
	for _, c := range []struct {
		name string
		got  []byte
		want string
	}{
		{"route", routeRequest(7, 3, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")), `
			34000000 1a00 0100 07000000 00000000
			02 20 20 00 00 00 00 00 00000000
			0800 0100 0a000002
			0800 0200 0a000001
			0800 0400 03000000`},
		{"route without source", routeRequest(8, 3, netip.Addr{}, netip.MustParseAddr("fe80::2")), `
			38000000 1a00 0100 08000000 00000000
			0a 80 00 00 00 00 00 00 00000000
			1400 0100 fe800000000000000000000000000002
			0800 0400 03000000`},
		{"neighbour", neighRequest(9, 2, netip.MustParseAddr("fe80::2")), `
			30000000 1e00 0100 09000000 00000000
			0a 00 0000 02000000 0000 00 00
			1400 0100 fe800000000000000000000000000002`},
		{"use", useRequest(1, 2, netip.MustParseAddr("10.0.0.2")), `
			24000000 1c00 0505 01000000 00000000
			02 00 0000 02000000 0000 01 00
			0800 0100 0a000002`},
	} {
		if want := unhex(t, c.want); !bytes.Equal(c.got, want) {
			t.Errorf("%s request:\n got %x\nwant %x", c.name, c.got, want)
		}
	}
}

func TestParseReplies(t *testing.T) {
	skipBigEndian(t)
	// Two messages in one datagram: a route through a gateway, then an
	// error for another request.
	b := unhex(t, `
		3c000000 1800 0000 05000000 00000000
		02 20 00 00 fe 02 00 01 00020000
		0800 0100 0a000002
		0800 0400 03000000
		0800 0500 0a0000fe
		0800 0f00 fe000000
		24000000 0200 0000 06000000 00000000
		feffffff 10000000 1a00 0100 06000000 00000000`)
	msgs, err := splitReplies(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].Type != unix.RTM_NEWROUTE || msgs[0].Seq != 5 || msgs[1].Type != unix.NLMSG_ERROR || msgs[1].Seq != 6 {
		t.Fatalf("messages %+v", msgs)
	}
	rt, err := parseRoute(msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := (route{typ: unix.RTN_UNICAST, oif: 3, gateway: netip.MustParseAddr("10.0.0.254")}); rt != want {
		t.Errorf("route %+v, want %+v", rt, want)
	}
	if e, err := msgs[1].errno(); err != nil || e != unix.ENOENT {
		t.Errorf("errno %v, %v; want ENOENT", e, err)
	}

	// RTA_VIA: an IPv4 route through an IPv6 gateway.
	via := unhex(t, `
		34000000 1800 0000 05000000 00000000
		02 20 00 00 fe 02 00 01 00000000
		1600 1200 0a00 fe800000000000000000000000000001 0000`)
	msgs, err = splitReplies(via)
	if err != nil {
		t.Fatal(err)
	}
	if rt, err := parseRoute(msgs[0]); err != nil || rt.gateway != netip.MustParseAddr("fe80::1") {
		t.Errorf("route through RTA_VIA %+v, %v", rt, err)
	}

	n := unhex(t, `
		28000000 1c00 0000 09000000 00000000
		0a 00 0000 02000000 0200 00 01
		1400 0100 fe800000000000000000000000000002`)
	msgs, err = splitReplies(n)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := parseNeigh(msgs[0]); err != nil || st != unix.NUD_REACHABLE {
		t.Errorf("neighbour state %#x, %v; want REACHABLE", st, err)
	}
}

func TestMalformedReplies(t *testing.T) {
	for name, b := range map[string]string{
		"length past the datagram": "40000000 1800 0000 05000000 00000000",
		"length under a header":    "08000000 1800 0000 05000000 00000000",
	} {
		if _, err := splitReplies(unhex(t, b)); !errors.Is(err, unix.EBADMSG) {
			t.Errorf("%s: %v, want EBADMSG", name, err)
		}
	}
	short := reply{nlMsghdr: nlMsghdr{Type: unix.RTM_NEWROUTE}, body: make([]byte, 4)}
	if _, err := parseRoute(short); !errors.Is(err, errShort) {
		t.Errorf("short route: %v", err)
	}
	if _, err := parseNeigh(short); !errors.Is(err, errShort) {
		t.Errorf("short neighbour: %v", err)
	}
	if _, err := (reply{nlMsghdr: nlMsghdr{Type: unix.NLMSG_ERROR}}).errno(); !errors.Is(err, errShort) {
		t.Errorf("short error: %v", err)
	}
	var h nlMsghdr
	if err := h.Decode(make([]byte, 15)); !errors.Is(err, errShort) {
		t.Errorf("short header: %v", err)
	}
	badAttr := reply{nlMsghdr: nlMsghdr{Type: unix.RTM_NEWROUTE}, body: append(make([]byte, sizeofRtMsg), 0x40, 0, 1, 0)}
	if _, err := parseRoute(badAttr); !errors.Is(err, unix.EBADMSG) {
		t.Errorf("attribute past the message: %v", err)
	}
}
