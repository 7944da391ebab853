package neigh

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The rtnetlink messages Resolver exchanges, from include/uapi/linux/
// netlink.h, rtnetlink.h and neighbour.h. Netlink speaks the host's byte
// order; attributes are padded to 4 bytes.

const (
	sizeofNlMsghdr = 16 // struct nlmsghdr
	sizeofRtMsg    = 12 // struct rtmsg
	sizeofNdMsg    = 12 // struct ndmsg
	sizeofRtAttr   = 4  // struct rtattr (and struct nlattr)
	sizeofNlMsgerr = 20 // struct nlmsgerr: int error, then the request's nlmsghdr
)

var order = binary.NativeEndian

func align4(n int) int { return (n + 3) &^ 3 }

// message builds one request: nlmsghdr, a fixed header (rtmsg or ndmsg),
// then attributes.
type message struct{ b []byte }

func newMessage(typ, flags uint16, seq uint32, fixed int) message {
	b := make([]byte, sizeofNlMsghdr+fixed, 64)
	order.PutUint16(b[4:], typ)
	order.PutUint16(b[6:], flags)
	order.PutUint32(b[8:], seq)
	return message{b}
}

func (m *message) fixed() []byte { return m.b[sizeofNlMsghdr:] }

func (m *message) attr(typ uint16, data []byte) {
	n := sizeofRtAttr + len(data)
	off := len(m.b)
	m.b = append(m.b, make([]byte, align4(n))...)
	order.PutUint16(m.b[off:], uint16(n))
	order.PutUint16(m.b[off+2:], typ)
	copy(m.b[off+sizeofRtAttr:], data)
}

func (m *message) u32(typ uint16, v uint32) {
	var b [4]byte
	order.PutUint32(b[:], v)
	m.attr(typ, b[:])
}

func (m *message) bytes() []byte {
	order.PutUint32(m.b[0:], uint32(len(m.b)))
	return m.b
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
	m := newMessage(unix.RTM_GETROUTE, unix.NLM_F_REQUEST, seq, sizeofRtMsg)
	rt := m.fixed()
	rt[0] = family(dst)
	rt[1] = uint8(dst.BitLen()) // rtm_dst_len
	m.attr(unix.RTA_DST, dst.AsSlice())
	if src.IsValid() {
		rt[2] = uint8(src.BitLen()) // rtm_src_len
		m.attr(unix.RTA_SRC, src.AsSlice())
	}
	m.u32(unix.RTA_OIF, uint32(oif))
	return m.bytes()
}

// neighRequest is RTM_GETNEIGH for one entry (Linux 5.0 and later answer
// it without a dump).
func neighRequest(seq uint32, ifindex int, addr netip.Addr) []byte {
	m := newMessage(unix.RTM_GETNEIGH, unix.NLM_F_REQUEST, seq, sizeofNdMsg)
	putNdMsg(m.fixed(), family(addr), ifindex, 0, 0)
	m.attr(unix.NDA_DST, addr.AsSlice())
	return m.bytes()
}

// useRequest is RTM_NEWNEIGH with NTF_USE, `ip neigh replace ADDR dev DEV
// use`: the kernel creates the entry if need be and starts resolving it
// (neigh_event_send), as a packet sent to it would; the state given is
// not applied. Needs CAP_NET_ADMIN.
func useRequest(seq uint32, ifindex int, addr netip.Addr) []byte {
	m := newMessage(unix.RTM_NEWNEIGH, unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_REPLACE, seq, sizeofNdMsg)
	putNdMsg(m.fixed(), family(addr), ifindex, unix.NUD_PERMANENT, unix.NTF_USE)
	m.attr(unix.NDA_DST, addr.AsSlice())
	return m.bytes()
}

func putNdMsg(b []byte, fam uint8, ifindex int, state uint16, flags uint8) {
	b[0] = fam
	order.PutUint32(b[4:], uint32(int32(ifindex)))
	order.PutUint16(b[8:], state)
	b[10] = flags
}

// reply is one message received: its type and sequence number, and the
// part after nlmsghdr.
type reply struct {
	typ  uint16
	seq  uint32
	body []byte
}

// splitReplies cuts a datagram into its messages.
func splitReplies(b []byte) ([]reply, error) {
	var out []reply
	for len(b) >= sizeofNlMsghdr {
		n := int(order.Uint32(b[0:]))
		if n < sizeofNlMsghdr || n > len(b) {
			return nil, fmt.Errorf("netlink message of %d bytes in %d: %w", n, len(b), unix.EBADMSG)
		}
		out = append(out, reply{typ: order.Uint16(b[4:]), seq: order.Uint32(b[8:]), body: b[sizeofNlMsghdr:n]})
		b = b[min(align4(n), len(b)):]
	}
	return out, nil
}

// errno is an NLMSG_ERROR's error: 0 for an acknowledgement.
func (r reply) errno() (unix.Errno, error) {
	if len(r.body) < 4 {
		return 0, fmt.Errorf("netlink error message of %d bytes: %w", len(r.body), unix.EBADMSG)
	}
	return unix.Errno(-int32(order.Uint32(r.body))), nil
}

// attrs calls f for each attribute after a fixed header of skip bytes.
func (r reply) attrs(skip int, f func(typ uint16, data []byte)) error {
	if len(r.body) < skip {
		return fmt.Errorf("netlink message type %d of %d bytes, want at least %d: %w", r.typ, len(r.body), skip, unix.EBADMSG)
	}
	b := r.body[skip:]
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
	var rt route
	if len(r.body) < sizeofRtMsg {
		return rt, fmt.Errorf("route answer of %d bytes: %w", len(r.body), unix.EBADMSG)
	}
	rt.typ = r.body[7]
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
	if len(r.body) < sizeofNdMsg {
		return 0, fmt.Errorf("neighbour answer of %d bytes: %w", len(r.body), unix.EBADMSG)
	}
	return order.Uint16(r.body[8:]), nil
}
