package trace

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/netip"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/ucmd/ucmd/hw"
)

// Link types of the capture's interfaces.
const (
	LinkTypeEthernet   = layers.LinkTypeEthernet // RoCE ports: RoCEv2 frames
	LinkTypeInfiniBand = layers.LinkType(247)    // LINKTYPE_INFINIBAND: IB ports, from the LRH
	LinkTypeERF        = layers.LinkType(197)    // LINKTYPE_ERF: IB ports, an ERF InfiniBand record around the LRH frame
)

// erfTypeInfiniBand is the ERF record type of an InfiniBand packet that
// starts with its LRH (TYPE_INFINIBAND).
const erfTypeInfiniBand = 21

// erfRecord wraps an IB frame in the 16-byte ERF record header: the
// timestamp (32.32 fixed point seconds, little-endian), the type, flags
// (variable length), the record and wire lengths (big-endian).
func erfRecord(t time.Time, frame []byte) []byte {
	b := make([]byte, 16, 16+len(frame))
	ns := uint64(t.UnixNano())
	sec, frac := ns/1e9, ns%1e9
	binary.LittleEndian.PutUint64(b[0:], sec<<32|(frac<<32)/1e9)
	b[8] = erfTypeInfiniBand
	b[9] = 0x04 // varying record length
	binary.BigEndian.PutUint16(b[10:], uint16(16+len(frame)))
	binary.BigEndian.PutUint16(b[14:], uint16(len(frame)))
	return append(b, frame...)
}

// Header sizes and values of the frames the capture reconstructs.
const (
	lrhSize  = 8
	grhSize  = 40
	bthSize  = 12
	dethSize = 8
	icrcSize = 4
	vcrcSize = 2

	opUDSendOnly = 0x64       // BTH OpCode: UD SEND Only
	qp1QKey      = 0x80010000 // DETH Q_Key of every QP1 MAD
	roceUDPPort  = 4791
)

// Frame is an Event's MAD as it went over the wire, reconstructed from
// what umad reports (the MAD, the peer's address, the port's LID, GID and
// P_Key table); Capture writes these.
//
// On RoCE ports: Ethernet / IPv6 (or IPv4 for IPv4-mapped GIDs) / UDP to
// port 4791 / BTH (UD SEND Only, destination QP 1, the P_Key) / DETH
// (Q_Key 0x80010000, source QP 1) / MAD / ICRC. umad does not report MAC
// addresses: a link-local GID's EUI-64 gives its MAC back, other GIDs get
// a locally administered 02:00 + the address's last four bytes. The UDP
// source port is the kernel's from the flow label (0xC000 for 0), the UDP
// checksum 0 (as rxe and RoCEv2 HCAs send it), the BTH PSN 0 (umad does
// not report it). The ICRC is computed as the kernel's rxe computes it
// (CRC-32 over 8 bytes of ones for the LRH, the IP, UDP and BTH headers
// with their variant fields set to ones, DETH and the MAD), so it matches
// what rxe puts on the wire.
//
// On InfiniBand ports: LRH (VL 0, the SL, LNH IBA local or global, the
// LIDs, PktLen) / GRH when the MAD has one / BTH / DETH / MAD / ICRC
// (variant fields VL, traffic class, flow label, hop limit and BTH resv8a
// set to ones) / VCRC (CRC-16, polynomial 0x100B, over LRH to ICRC).
func Frame(ev *Event) ([]byte, error) {
	if len(ev.MAD) != hw.MADSize {
		return nil, fmt.Errorf("trace: frame of a %d-byte MAD", len(ev.MAD))
	}
	src, dst := ev.Local, ev.Remote
	if !ev.Outbound() {
		src, dst = dst, src
	}
	pkey := ev.PKey
	if pkey == 0 {
		pkey = 0xffff
	}
	switch ev.Link {
	case LinkRoCE:
		return roceFrame(ev, src, dst, pkey)
	case LinkIB:
		return ibFrame(ev, src, dst, pkey)
	}
	return nil, fmt.Errorf("trace: frame for link layer %q", ev.Link)
}

// parseGIDs parses an event's source and destination GIDs.
func parseGIDs(src, dst Endpoint) (sa, da netip.Addr, err error) {
	if sa, err = parseGID(src.GID, "source"); err != nil {
		return
	}
	da, err = parseGID(dst.GID, "destination")
	return
}

func parseGID(s, which string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, fmt.Errorf("trace: RoCE MAD without a %s GID", which)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("trace: %s GID: %w", which, err)
	}
	return a, nil
}

// appendBTHDETH appends BTH (UD SEND Only to QP 1) and DETH (QP1's Q_Key,
// source QP 1).
func appendBTHDETH(b []byte, pkey uint16) []byte {
	var h [bthSize + dethSize]byte
	h[0] = opUDSendOnly
	// h[1]: SE 0, MigReq 0, PadCnt 0 (256 bytes need none), TVer 0.
	binary.BigEndian.PutUint16(h[2:], pkey)
	binary.BigEndian.PutUint32(h[4:], 1) // resv8a 0, destination QP 1
	// h[8:12]: AckReq 0, PSN 0.
	binary.BigEndian.PutUint32(h[12:], qp1QKey)
	binary.BigEndian.PutUint32(h[16:], 1) // reserved 0, source QP 1
	return append(b, h[:]...)
}

// udpSourcePort is the kernel's rdma_flow_label_to_udp_sport.
func udpSourcePort(fl uint32) uint16 {
	low, high := fl&0x3fff, fl&0xfc000
	low ^= high >> 14
	return uint16(low | 0xc000)
}

// macFor is the MAC a GID's interface has when the GID says (EUI-64 of a
// link-local address), else a locally administered stand-in.
func macFor(a netip.Addr) [6]byte {
	b := a.As16()
	if a.Is6() && !a.Is4In6() && b[0] == 0xfe && b[1] == 0x80 && b[11] == 0xff && b[12] == 0xfe {
		return [6]byte{b[8] ^ 2, b[9], b[10], b[13], b[14], b[15]}
	}
	return [6]byte{0x02, 0x00, b[12], b[13], b[14], b[15]}
}

func roceFrame(ev *Event, src, dst Endpoint, pkey uint16) ([]byte, error) {
	sa, da, err := parseGIDs(src, dst)
	if err != nil {
		return nil, err
	}
	var tclass, hop uint8
	var flow uint32
	if g := ev.GRH; g != nil {
		tclass, flow, hop = g.TrafficClass, g.FlowLabel&0xfffff, g.HopLimit
	}
	v4 := sa.Unmap().Is4() && da.Unmap().Is4()
	const l4 = 8 + bthSize + dethSize + hw.MADSize + icrcSize
	b := make([]byte, 0, 14+40+l4)
	dmac, smac := macFor(da), macFor(sa)
	b = append(b, dmac[:]...)
	b = append(b, smac[:]...)
	ip := len(b) + 2
	if v4 {
		b = binary.BigEndian.AppendUint16(b, 0x0800)
		var h [20]byte
		h[0] = 0x45
		h[1] = tclass
		binary.BigEndian.PutUint16(h[2:], 20+l4)
		binary.BigEndian.PutUint16(h[6:], 0x4000) // DF, as rxe sends
		h[8] = hop
		h[9] = 17
		s4, d4 := sa.Unmap().As4(), da.Unmap().As4()
		copy(h[12:], s4[:])
		copy(h[16:], d4[:])
		binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h[:]))
		b = append(b, h[:]...)
	} else {
		b = binary.BigEndian.AppendUint16(b, 0x86dd)
		var h [40]byte
		binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(tclass)<<20|flow)
		binary.BigEndian.PutUint16(h[4:], l4)
		h[6] = 17
		h[7] = hop
		s6, d6 := sa.As16(), da.As16()
		copy(h[8:], s6[:])
		copy(h[24:], d6[:])
		b = append(b, h[:]...)
	}
	var u [8]byte
	binary.BigEndian.PutUint16(u[0:], udpSourcePort(flow))
	binary.BigEndian.PutUint16(u[2:], roceUDPPort)
	binary.BigEndian.PutUint16(u[4:], l4)
	// u[6:8]: checksum 0.
	b = append(b, u[:]...)
	b = appendBTHDETH(b, pkey)
	b = append(b, ev.MAD...)
	icrc := roceICRC(b[ip:], v4)
	return binary.LittleEndian.AppendUint32(b, icrc), nil
}

func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// roceICRC is rxe_icrc_hdr + rxe_icrc_generate: pkt runs from the IP
// header to the end of the payload. The value is stored little-endian,
// as rxe stores it.
func roceICRC(pkt []byte, v4 bool) uint32 {
	m := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, pkt...)
	p := m[8:]
	ipLen := 40
	if v4 {
		ipLen = 20
		p[1] = 0xff               // TOS
		p[8] = 0xff               // TTL
		p[10], p[11] = 0xff, 0xff // header checksum
	} else {
		p[0] |= 0x0f // version 6, the traffic class's high nibble masked
		p[1], p[2], p[3] = 0xff, 0xff, 0xff
		p[7] = 0xff // hop limit
	}
	p[ipLen+6], p[ipLen+7] = 0xff, 0xff // UDP checksum
	p[ipLen+8+4] = 0xff                 // BTH resv8a
	return crc32.ChecksumIEEE(m)
}

func ibFrame(ev *Event, src, dst Endpoint, pkey uint16) ([]byte, error) {
	global := ev.GRH != nil && src.GID != "" && dst.GID != ""
	n := lrhSize + bthSize + dethSize + hw.MADSize + icrcSize
	if global {
		n += grhSize
	}
	b := make([]byte, 0, n+vcrcSize)
	var lrh [lrhSize]byte
	lrh[0] = 0 // VL 0, LVer 0
	lnh := byte(2)
	if global {
		lnh = 3
	}
	lrh[1] = ev.SL<<4 | lnh
	binary.BigEndian.PutUint16(lrh[2:], dst.LID)
	binary.BigEndian.PutUint16(lrh[4:], uint16(n/4)&0x7ff)
	binary.BigEndian.PutUint16(lrh[6:], src.LID)
	b = append(b, lrh[:]...)
	if global {
		sa, da, err := parseGIDs(src, dst)
		if err != nil {
			return nil, err
		}
		var h [grhSize]byte
		binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(ev.GRH.TrafficClass)<<20|ev.GRH.FlowLabel&0xfffff)
		binary.BigEndian.PutUint16(h[4:], bthSize+dethSize+hw.MADSize+icrcSize)
		h[6] = 0x1b // next header: IBA transport
		h[7] = ev.GRH.HopLimit
		s6, d6 := sa.As16(), da.As16()
		copy(h[8:], s6[:])
		copy(h[24:], d6[:])
		b = append(b, h[:]...)
	}
	b = appendBTHDETH(b, pkey)
	b = append(b, ev.MAD...)
	b = binary.LittleEndian.AppendUint32(b, ibICRC(b, global))
	return binary.LittleEndian.AppendUint16(b, vcrc(b)), nil
}

// ibICRC: CRC-32 from the LRH to the end of the payload with the variant
// fields (LRH VL; GRH traffic class, flow label, hop limit; BTH resv8a)
// set to ones.
func ibICRC(pkt []byte, global bool) uint32 {
	m := append([]byte(nil), pkt...)
	m[0] |= 0xf0
	bth := lrhSize
	if global {
		g := m[lrhSize:]
		g[0] |= 0x0f // IPVer 6, TClass masked with the next bytes
		g[1], g[2], g[3] = 0xff, 0xff, 0xff
		g[7] = 0xff
		bth += grhSize
	}
	m[bth+4] = 0xff
	return crc32.ChecksumIEEE(m)
}

// vcrc is the IBA VCRC: CRC-16 with polynomial 0x100B, seed 0xFFFF,
// bit-reflected like the ICRC, inverted.
func vcrc(b []byte) uint16 {
	const poly = 0xd008 // 0x100B reflected
	crc := uint16(0xffff)
	for _, c := range b {
		crc ^= uint16(c)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ poly
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

var ngOptions = pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{
	Hardware: pcapgo.DefaultNgWriterOptions.SectionInfo.Hardware, OS: pcapgo.DefaultNgWriterOptions.SectionInfo.OS,
	Application: "ucmd trace",
}}

// Capture writes Events as a pcapng file: one interface per device port
// (named "rxe0:1"; Ethernet for RoCE ports; for IB ports LINKTYPE_ERF, or
// LINKTYPE_INFINIBAND when IBLinkType says so), one packet per MAD that was
// on the wire (sent, retransmitted, received, dropped; not refused sends,
// timeouts or loss markers).
//
// IB ports default to ERF because Wireshark (4.0 at least) maps
// LINKTYPE_INFINIBAND to no dissector ("WTAP_ENCAP = 0") while it decodes
// an ERF InfiniBand record, the format Mellanox's ibdump writes, from the
// LRH on.
type Capture struct {
	// IBLinkType is LinkTypeERF (the default when zero) or
	// LinkTypeInfiniBand: how IB ports' frames are written.
	IBLinkType layers.LinkType

	w      io.Writer
	ng     *pcapgo.NgWriter
	intf   map[string]int
	frames int
}

// NewCapture writes to w; nothing is written before the first packet or
// Close.
func NewCapture(w io.Writer) *Capture { return &Capture{w: w, intf: make(map[string]int)} }

// OnWire reports whether the event's MAD was on the wire.
func OnWire(ev *Event) bool {
	switch ev.Dir {
	case "sent", "retransmitted", "received", "dropped":
		return len(ev.MAD) == hw.MADSize
	}
	return false
}

// Write adds ev as a packet if it was on the wire.
func (c *Capture) Write(ev *Event) error {
	if !OnWire(ev) {
		return nil
	}
	frame, err := Frame(ev)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s:%d", ev.Dev, ev.Port)
	lt := LinkTypeEthernet
	if ev.Link == LinkIB {
		lt = c.IBLinkType
		if lt != LinkTypeInfiniBand {
			lt = LinkTypeERF
			frame = erfRecord(ev.Time, frame)
		}
	}
	id, ok := c.intf[name]
	if !ok {
		intf := pcapgo.NgInterface{Name: name, Description: "ucmd " + ev.Link + " port " + name, LinkType: lt, TimestampResolution: 9}
		if c.ng == nil {
			c.ng, err = pcapgo.NewNgWriterInterface(c.w, intf, ngOptions)
			if err != nil {
				return fmt.Errorf("trace: pcapng header: %w", err)
			}
			id = 0
		} else if id, err = c.ng.AddInterface(intf); err != nil {
			return fmt.Errorf("trace: pcapng interface %s: %w", name, err)
		}
		c.intf[name] = id
	}
	ci := gopacket.CaptureInfo{Timestamp: ev.Time, CaptureLength: len(frame), Length: len(frame), InterfaceIndex: id}
	if err := c.ng.WritePacket(ci, frame); err != nil {
		return fmt.Errorf("trace: pcapng packet: %w", err)
	}
	c.frames++
	return nil
}

// Frames is how many packets were written.
func (c *Capture) Frames() int { return c.frames }

// Flush writes out what is buffered.
func (c *Capture) Flush() error {
	if c.ng == nil {
		return nil
	}
	return c.ng.Flush()
}

// Close flushes; a capture without packets still gets its section header
// and one (Ethernet) interface, so it is a valid empty file.
func (c *Capture) Close() error {
	if c.ng == nil {
		ng, err := pcapgo.NewNgWriterInterface(c.w, pcapgo.NgInterface{Name: "none", LinkType: LinkTypeEthernet, TimestampResolution: 9}, ngOptions)
		if err != nil {
			return fmt.Errorf("trace: pcapng header: %w", err)
		}
		c.ng = ng
	}
	return c.ng.Flush()
}
