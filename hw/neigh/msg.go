package neigh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The rtnetlink structs Resolver exchanges, from include/uapi/linux/
// netlink.h, rtnetlink.h and neighbour.h, with the project's codec verbs
// (docs/design.md §10.3). Netlink speaks the host's byte order; attributes
// are padded to 4 bytes.

var order = binary.NativeEndian

// errShort: a message shorter than its struct. The kernel sends whole
// structs, so it means a bug or a foreign sender.
var errShort = errors.New("rtnetlink: short message")

// nlMsghdr is struct nlmsghdr.
type nlMsghdr struct {
	Len   uint32
	Type  uint16
	Flags uint16
	Seq   uint32
	PID   uint32
}

// sizeofNlMsghdr is the size of struct nlmsghdr.
const sizeofNlMsghdr = 16

func (h *nlMsghdr) Encode(b []byte) {
	_ = b[sizeofNlMsghdr-1]
	order.PutUint32(b[0:], h.Len)
	order.PutUint16(b[4:], h.Type)
	order.PutUint16(b[6:], h.Flags)
	order.PutUint32(b[8:], h.Seq)
	order.PutUint32(b[12:], h.PID)
}

func (h *nlMsghdr) Decode(b []byte) error {
	if len(b) < sizeofNlMsghdr {
		return fmt.Errorf("nlmsghdr in %d bytes: %w", len(b), errShort)
	}
	*h = nlMsghdr{Len: order.Uint32(b[0:]), Type: order.Uint16(b[4:]), Flags: order.Uint16(b[6:]),
		Seq: order.Uint32(b[8:]), PID: order.Uint32(b[12:])}
	return nil
}

// rtMsg is struct rtmsg, the fixed part of a route message.
type rtMsg struct {
	Family, DstLen, SrcLen, TOS uint8
	Table, Protocol, Scope      uint8
	Type                        uint8 // RTN_UNICAST, RTN_LOCAL, ...
	Flags                       uint32
}

// sizeofRtMsg is the size of struct rtmsg.
const sizeofRtMsg = 12

func (m *rtMsg) Encode(b []byte) {
	_ = b[sizeofRtMsg-1]
	b[0], b[1], b[2], b[3] = m.Family, m.DstLen, m.SrcLen, m.TOS
	b[4], b[5], b[6], b[7] = m.Table, m.Protocol, m.Scope, m.Type
	order.PutUint32(b[8:], m.Flags)
}

func (m *rtMsg) Decode(b []byte) error {
	if len(b) < sizeofRtMsg {
		return fmt.Errorf("rtmsg in %d bytes: %w", len(b), errShort)
	}
	*m = rtMsg{Family: b[0], DstLen: b[1], SrcLen: b[2], TOS: b[3],
		Table: b[4], Protocol: b[5], Scope: b[6], Type: b[7], Flags: order.Uint32(b[8:])}
	return nil
}

// ndMsg is struct ndmsg, the fixed part of a neighbour message.
type ndMsg struct {
	Family  uint8
	Ifindex int32
	State   uint16 // NUD_*
	Flags   uint8  // NTF_*
	Type    uint8
}

// sizeofNdMsg is the size of struct ndmsg.
const sizeofNdMsg = 12

func (m *ndMsg) Encode(b []byte) {
	_ = b[sizeofNdMsg-1]
	b[0], b[1], b[2], b[3] = m.Family, 0, 0, 0
	order.PutUint32(b[4:], uint32(m.Ifindex))
	order.PutUint16(b[8:], m.State)
	b[10], b[11] = m.Flags, m.Type
}

func (m *ndMsg) Decode(b []byte) error {
	if len(b) < sizeofNdMsg {
		return fmt.Errorf("ndmsg in %d bytes: %w", len(b), errShort)
	}
	*m = ndMsg{Family: b[0], Ifindex: int32(order.Uint32(b[4:])), State: order.Uint16(b[8:]), Flags: b[10], Type: b[11]}
	return nil
}

// sizeofRtAttr is the size of struct rtattr (and struct nlattr): a
// 16-bit length, header included, then a 16-bit type.
const sizeofRtAttr = 4

// sizeofNlMsgerr is struct nlmsgerr: the error (negative errno, 0 for an
// acknowledgement), then the request's nlmsghdr.
const sizeofNlMsgerr = 4 + sizeofNlMsghdr

func align4(n int) int { return (n + 3) &^ 3 }

// request builds one message: nlmsghdr, a fixed header, then attributes.
type request struct{ b []byte }

func newRequest(typ, flags uint16, seq uint32) request {
	b := make([]byte, sizeofNlMsghdr, 64)
	(&nlMsghdr{Type: typ, Flags: flags, Seq: seq}).Encode(b)
	return request{b}
}

func (r *request) fixed(n int) []byte {
	r.b = append(r.b, make([]byte, n)...)
	return r.b[len(r.b)-n:]
}

func (r *request) attr(typ uint16, data []byte) {
	n := sizeofRtAttr + len(data)
	a := r.fixed(align4(n))
	order.PutUint16(a[0:], uint16(n))
	order.PutUint16(a[2:], typ)
	copy(a[sizeofRtAttr:], data)
}

func (r *request) u32(typ uint16, v uint32) {
	var b [4]byte
	order.PutUint32(b[:], v)
	r.attr(typ, b[:])
}

func (r *request) bytes() []byte {
	order.PutUint32(r.b[0:], uint32(len(r.b))) // nlmsg_len
	return r.b
}

func family(a netip.Addr) uint8 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// routeRequest is RTM_GETROUTE for dst from src out of oif, as the RDMA
// address resolver asks the kernel's routing (addr4_resolve/addr6_resolve:
// the source GID's address, bound to its netdev).
func routeRequest(seq uint32, oif int, src, dst netip.Addr) []byte {
	r := newRequest(unix.RTM_GETROUTE, unix.NLM_F_REQUEST, seq)
	rt := rtMsg{Family: family(dst), DstLen: uint8(dst.BitLen())}
	if src.IsValid() {
		rt.SrcLen = uint8(src.BitLen())
	}
	rt.Encode(r.fixed(sizeofRtMsg))
	r.attr(unix.RTA_DST, dst.AsSlice())
	if src.IsValid() {
		r.attr(unix.RTA_SRC, src.AsSlice())
	}
	r.u32(unix.RTA_OIF, uint32(oif))
	return r.bytes()
}

// neighRequest is RTM_GETNEIGH for one entry (Linux 5.0 and later answer
// it without a dump).
func neighRequest(seq uint32, ifindex int, addr netip.Addr) []byte {
	r := newRequest(unix.RTM_GETNEIGH, unix.NLM_F_REQUEST, seq)
	(&ndMsg{Family: family(addr), Ifindex: int32(ifindex)}).Encode(r.fixed(sizeofNdMsg))
	r.attr(unix.NDA_DST, addr.AsSlice())
	return r.bytes()
}

// useRequest is RTM_NEWNEIGH with NTF_USE, `ip neigh replace ADDR dev DEV
// use` but with no state: the kernel creates the entry if need be and
// starts resolving it (neigh_event_send), as a packet sent to it would.
// Not iproute2's default state, NUD_PERMANENT: neigh_add reads that bit
// before it looks at NTF_USE, and an entry it creates is then exempt from
// the neighbour table's garbage collection (gc_thresh3 never counts it),
// so peers named by clients would pile up for good. Needs CAP_NET_ADMIN.
func useRequest(seq uint32, ifindex int, addr netip.Addr) []byte {
	r := newRequest(unix.RTM_NEWNEIGH, unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_REPLACE, seq)
	(&ndMsg{Family: family(addr), Ifindex: int32(ifindex), Flags: unix.NTF_USE}).Encode(r.fixed(sizeofNdMsg))
	r.attr(unix.NDA_DST, addr.AsSlice())
	return r.bytes()
}

// reply is one message received: its header, and the part after it.
type reply struct {
	nlMsghdr
	body []byte
}

// splitReplies cuts a datagram into its messages.
func splitReplies(b []byte) ([]reply, error) {
	var out []reply
	for len(b) >= sizeofNlMsghdr {
		var h nlMsghdr
		h.Decode(b)
		n := int(h.Len)
		if n < sizeofNlMsghdr || n > len(b) {
			return nil, fmt.Errorf("netlink message of %d bytes in %d: %w", n, len(b), unix.EBADMSG)
		}
		out = append(out, reply{nlMsghdr: h, body: b[sizeofNlMsghdr:n]})
		b = b[min(align4(n), len(b)):]
	}
	return out, nil
}

// errno is an NLMSG_ERROR's error: 0 for an acknowledgement.
func (r reply) errno() (unix.Errno, error) {
	if len(r.body) < 4 {
		return 0, fmt.Errorf("netlink error message of %d bytes: %w", len(r.body), errShort)
	}
	return unix.Errno(-int32(order.Uint32(r.body))), nil
}

// attrs calls f for each attribute after a fixed header of skip bytes.
func (r reply) attrs(skip int, f func(typ uint16, data []byte)) error {
	b := r.body[min(skip, len(r.body)):]
	for len(b) >= sizeofRtAttr {
		n := int(order.Uint16(b[0:]))
		if n < sizeofRtAttr || n > len(b) {
			return fmt.Errorf("netlink attribute of %d bytes in %d: %w", n, len(b), unix.EBADMSG)
		}
		f(order.Uint16(b[2:])&^unix.NLA_F_NESTED, b[sizeofRtAttr:n])
		b = b[min(align4(n), len(b)):]
	}
	return nil
}

// route is what an RTM_NEWROUTE answer says about the way to a destination.
type route struct {
	typ     uint8      // rtm_type: RTN_UNICAST, RTN_LOCAL, ...
	oif     int        // RTA_OIF
	gateway netip.Addr // RTA_GATEWAY or RTA_VIA; invalid when the destination is on link
}

func parseRoute(r reply) (route, error) {
	var m rtMsg
	if err := m.Decode(r.body); err != nil {
		return route{}, err
	}
	rt := route{typ: m.Type}
	err := r.attrs(sizeofRtMsg, func(typ uint16, data []byte) {
		switch typ {
		case unix.RTA_OIF:
			if len(data) == 4 {
				rt.oif = int(int32(order.Uint32(data)))
			}
		case unix.RTA_GATEWAY:
			if a, ok := netip.AddrFromSlice(data); ok {
				rt.gateway = a
			}
		case unix.RTA_VIA: // struct rtvia: a family, then the address
			if len(data) > 2 {
				if a, ok := netip.AddrFromSlice(data[2:]); ok {
					rt.gateway = a
				}
			}
		}
	})
	return rt, err
}

// parseNeigh is an RTM_NEWNEIGH answer's ndm_state.
func parseNeigh(r reply) (state uint16, err error) {
	var m ndMsg
	if err := m.Decode(r.body); err != nil {
		return 0, err
	}
	return m.State, nil
}
