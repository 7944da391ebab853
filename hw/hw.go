// Package hw is ucmd's view of an RDMA device: its ports (addresses, GID and
// P_Key tables, link layer) and a management-datagram endpoint per port.
//
// Two backends implement it: hw/umad drives real HCAs (InfiniBand and RoCE)
// through the kernel's umad interface, hw/sim is an in-memory fabric with
// fault-injection knobs. cmcore speaks only to these interfaces.
package hw

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// MADSize is the size of every management datagram ucmd sends or receives.
const MADSize = 256

// MAD is one management datagram, header included, in wire (big-endian) order.
type MAD [MADSize]byte

// LinkLayer tells InfiniBand ports from Ethernet (RoCE) ports.
type LinkLayer uint8

const (
	LinkInfiniBand LinkLayer = iota + 1
	LinkEthernet
)

func (l LinkLayer) String() string {
	switch l {
	case LinkInfiniBand:
		return "InfiniBand"
	case LinkEthernet:
		return "Ethernet"
	}
	return fmt.Sprintf("LinkLayer(%d)", uint8(l))
}

// PortState holds the values of enum ib_port_state (sysfs "4: ACTIVE").
type PortState uint8

const (
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	switch s {
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	case PortActiveDefer:
		return "ACTIVE_DEFER"
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// GID is a 128-bit port address in network byte order.
type GID [16]byte

// Addr returns the GID as an IPv6 address (RoCE GIDs are IP addresses).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g) }

func (g GID) String() string { return g.Addr().String() }

// IsZero reports whether the GID is all zeroes (an empty table slot).
func (g GID) IsZero() bool { return g == GID{} }

// GIDType is the type of a GID table entry. RoCE needs it to pick the
// encapsulation (v1: Ethernet, v2: UDP/IP).
type GIDType uint8

const (
	GIDTypeIB GIDType = iota + 1
	GIDTypeRoCEv1
	GIDTypeRoCEv2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB/RoCE v1"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint8(t))
}

// GIDEntry is one populated slot of a port's GID table.
type GIDEntry struct {
	Index int
	GID   GID
	Type  GIDType
}

// PortAttr is a snapshot of a port's attributes. RoCE GID tables change as
// IP addresses come and go, so callers take a fresh snapshot when it matters.
type PortAttr struct {
	LinkLayer    LinkLayer
	State        PortState
	LID          uint16 // 0 on RoCE
	LMC          uint8
	SMLID        uint16
	SubnetPrefix uint64
	GIDs         []GIDEntry // populated entries only, by index
	PKeys        []uint16   // P_Key table, by index (index 0 is the default)
}

// GIDIndex returns the table index of gid, preferring typ when the same GID
// appears with several types. A zero typ prefers RoCE v2, as rdma_cm does
// (cma_get_default_gid_type): devices such as mlx5 list each address as
// RoCE v1 first, and v1 does not cross a router.
func (a *PortAttr) GIDIndex(gid GID, typ GIDType) (int, bool) {
	if typ == 0 {
		typ = GIDTypeRoCEv2
	}
	found := -1
	for _, e := range a.GIDs {
		if e.GID != gid {
			continue
		}
		if e.Type == typ {
			return e.Index, true
		}
		if found < 0 {
			found = e.Index
		}
	}
	return found, found >= 0
}

// PKeyIndex returns the index of pkey as ib_find_cached_pkey chooses it,
// which the kernel's CM uses for a path's P_Key: of the entries equal in
// their low 15 bits, the first full member (bit 15 set), else the last
// limited one, whichever membership pkey itself asks for.
func (a *PortAttr) PKeyIndex(pkey uint16) (int, bool) {
	partial := -1
	for i, p := range a.PKeys {
		if p&0x7fff != pkey&0x7fff {
			continue
		}
		if p&0x8000 != 0 {
			return i, true
		}
		partial = i
	}
	return partial, partial >= 0
}

// Device is one RDMA device (HCA or rxe instance).
type Device interface {
	Name() string
	// NodeGUID is the CA GUID that REQ and REP carry.
	NodeGUID() uint64
	// LocalCAAckDelay is the device's local_ca_ack_delay (ibv_query_device).
	LocalCAAckDelay() uint8
	Ports() []Port
}

// Port is one port of a device. Ports are numbered from 1.
type Port interface {
	Device() Device
	Num() int
	Attr() (PortAttr, error)
	// OpenMAD registers a MAD agent on this port. The endpoint receives only
	// the registered class, version and methods.
	OpenMAD(reg Registration) (Endpoint, error)
}

// SharedAttr is a Port whose attribute snapshots are immutable, replaced
// whole when they change: AttrShared returns the current one without
// copying its GID and P_Key tables. hw/umad and hw/sim implement it.
type SharedAttr interface {
	AttrShared() (PortAttr, error)
}

// FreshAttr is a Port whose snapshots may lag the hardware (hw/umad's are
// refreshed every few seconds): AttrFresh returns one read no longer than
// maxAge ago, reading it now if need be, shared as AttrShared's. The CM
// asks for it when a GID it was given is not in the snapshot, as a GID
// added a moment ago would not be.
type FreshAttr interface {
	AttrFresh(maxAge time.Duration) (PortAttr, error)
	// EntriesHold reports whether GID table slot g.Index still holds g
	// (address and type) and P_Key table slot pkeyIndex still holds pkey,
	// reading only those entries; an error when they cannot be read. The
	// CM checks a snapshot's entries so before a connection takes them: an
	// SM may have rewritten the P_Key table, an address may have left the
	// netdev, since the snapshot.
	EntriesHold(g GIDEntry, pkeyIndex int, pkey uint16) (bool, error)
}

// AttrOf returns p's attributes for reading only: the tables are shared
// with p when it is a SharedAttr, so the caller must not modify them. The
// CM looks attributes up several times per connection; copying the tables
// each time was 6 of a handshake's 39 allocations.
func AttrOf(p Port) (PortAttr, error) {
	if s, ok := p.(SharedAttr); ok {
		return s.AttrShared()
	}
	return p.Attr()
}

// Registration names the management class, class version and methods an
// endpoint receives.
type Registration struct {
	MgmtClass    uint8
	ClassVersion uint8
	Methods      []uint8
}

// GRH is the global route of a MAD: required on RoCE, optional on IB.
type GRH struct {
	// GID is the destination GID on send and the source GID on receive.
	GID GID
	// SGIDIndex is the local GID table index: the source on send, the
	// GID the packet was addressed to on receive.
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32 // 20 bits
}

// Address is where a MAD goes (Send) or where it came from (Recv).
// To answer a received MAD, send to its source Address unchanged.
type Address struct {
	LID      uint16 // destination on send, source on receive
	SL       uint8
	PathBits uint8
	QPN      uint32 // remote QP: 1 for CM
	// QKey is ignored for QP1, whose MADs always carry 0x80010000; umad
	// reports 0 on receive (and hw/sim does the same).
	QKey      uint32
	PKeyIndex uint16
	GRH       *GRH // nil when no GRH
}

// Received is one MAD delivered to an endpoint.
type Received struct {
	MAD MAD
	Src Address
}

// Endpoint sends and receives MADs on one port for one registration.
// All methods are safe for concurrent use.
type Endpoint interface {
	// Send transmits mad to dst. It may block (on RoCE the kernel resolves
	// the peer's MAC synchronously, up to about a second) but never holds up
	// Recv or other ports. Sends are fire-and-forget: there is no completion
	// and no retry below this interface.
	Send(ctx context.Context, dst Address, mad *MAD) error
	// Recv blocks until a MAD arrives, ctx is done, or the endpoint closes
	// (ErrClosed).
	Recv(ctx context.Context) (Received, error)
	Close() error
}

// Deliverer is an Endpoint that can hand received MADs straight to a
// function on the goroutine that reads them, instead of queueing them for
// Recv: one goroutine hand-off less per MAD, which shows in a connection's
// cost (docs/perf.md). After Deliver(f), f gets every MAD read from then
// on, one at a time and in the order read; r is valid only during the call.
// Recv still returns what was queued before (so the first MADs may be
// handled out of order, as the fabric may deliver them anyway), then
// blocks until the endpoint closes or fails. f must not call Close. While
// f runs the endpoint reads nothing, so MADs wait in the kernel's queue,
// not in a bounded one of ours.
type Deliverer interface {
	Endpoint
	Deliver(f func(r *Received))
}

// ErrClosed is returned by an Endpoint used after Close.
var ErrClosed = errors.New("hw: endpoint closed")

// ErrCMClassInUse means another agent (the kernel's ib_cm) owns the CM
// management class on the port. Backends wrap it with what to do about it.
var ErrCMClassInUse = errors.New("CM management class already registered on this port (is the kernel's ib_cm loaded?)")
