package cmcore

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ucmd/ucmd/hw"
	"golang.org/x/sys/unix"
)

// PathRecord is an SA path record as ucm clients exchange it
// (struct ib_user_path_rec, host-order fields). The ucm layer converts the
// 64-byte user layout to and from this.
type PathRecord struct {
	DGID, SGID             hw.GID
	DLID, SLID             uint16
	RawTraffic             bool
	FlowLabel              uint32 // 20 bits
	Reversible             bool
	MTU                    uint8 // IB MTU enum 1..5
	PKey                   uint16
	HopLimit               uint8
	TrafficClass           uint8
	NumbPath               uint8
	SL                     uint8
	MTUSelector            uint8
	RateSelector           uint8
	Rate                   uint8 // IB rate enum, 6 bits
	PacketLifeTimeSelector uint8
	PacketLifeTime         uint8
	Preference             uint8
	// GIDType selects among identical GIDs of different RoCE types; zero
	// prefers RoCE v2 (hw.PortAttr.GIDIndex).
	GIDType hw.GIDType
}

// GRHAttr is the global route of an address vector (struct ib_global_route).
type GRHAttr struct {
	DGID         hw.GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AddressVector is where a connection's QP (and the CM's MADs) go: the
// kernel's cm_av, i.e. an rdma_ah_attr plus port, P_Key index and the QP
// local ACK timeout.
type AddressVector struct {
	PortNum     uint8
	PKeyIndex   uint16
	Timeout     uint8 // 5-bit IBTA time: the QP's local ACK timeout
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	GRH         GRHAttr
}

// madAddress is where the CM sends MADs for a connection with this AV.
func (av *AddressVector) madAddress() hw.Address {
	a := hw.Address{
		LID:       av.DLID,
		SL:        av.SL,
		PathBits:  av.SrcPathBits,
		QPN:       remoteCMQPN,
		QKey:      cmQKey,
		PKeyIndex: av.PKeyIndex,
	}
	if av.IsGlobal {
		a.GRH = &hw.GRH{
			GID:          av.GRH.DGID,
			SGIDIndex:    av.GRH.SGIDIndex,
			HopLimit:     av.GRH.HopLimit,
			TrafficClass: av.GRH.TrafficClass,
			FlowLabel:    av.GRH.FlowLabel,
		}
	}
	return a
}

// avFromPath is cm_init_av_by_path + ib_init_ah_attr_from_path: the port is
// the one whose GID table holds the path's SGID, the P_Key index comes from
// the port's table. A GRH is used when hop_limit > 0 or on RoCE. Errors:
// EINVAL when no port has the SGID (as cm_init_av_by_path), ENOENT when
// the P_Key is not in the port's table (the pkey lookup's error, which
// ib_send_cm_req passes through), EINVAL too when the SGID sits past GID
// index 255: umad's header (ib_user_mad_hdr.gid_index) and the QP
// attributes ucm hands out (ib_uverbs_qp_dest.sgid_index) carry 8 bits,
// and a wrapped index would send from another GID. (The kernel's CM kept
// a pointer to the GID entry and never needed the number.)
//
// The ports' snapshots may be seconds old (hw.FreshAttr), where the
// kernel's caches follow every change at once. When the path does not fit
// them, it is tried again on snapshots no older than freshAttrAge, so that
// a GID or P_Key added a moment ago is found; that retry reads sysfs at
// most once per freshAttrAge and port, however many paths miss. When it
// fits, the two entries it takes are read again (hw.FreshAttr's
// EntriesHold): one that moved or went since (an SM rewrote the P_Key
// table, an address left its netdev) would send the MADs and the QP from
// another GID or partition, or fail every send until the final timeout.
// Then the tables are read whole at once: only a real change costs that,
// never a peer's choice of GID or P_Key.
func (cm *CM) avFromPath(p *PathRecord) (AddressVector, *port, error) {
	av, pt, err := cm.avFromPathWith(p, hw.AttrOf, true)
	if err != nil && !errors.Is(err, errEntryMoved) && slices.ContainsFunc(cm.ports, func(pt *port) bool { _, ok := pt.hw.(hw.FreshAttr); return ok }) {
		av, pt, err = cm.avFromPathWith(p, freshAttr, true)
	}
	if errors.Is(err, errEntryMoved) {
		return cm.avFromPathWith(p, attrNow, false)
	}
	return av, pt, err
}

// errEntryMoved: a snapshot's GID or P_Key entry no longer holds what it
// says.
var errEntryMoved = errors.New("cmcore: a port's table changed since its snapshot")

// freshAttrAge is how old a snapshot avFromPath's retry takes.
const freshAttrAge = time.Second

// freshAttr is a port's snapshot no older than freshAttrAge, if the port
// can say.
func freshAttr(p hw.Port) (hw.PortAttr, error) {
	if f, ok := p.(hw.FreshAttr); ok {
		return f.AttrFresh(freshAttrAge)
	}
	return hw.AttrOf(p)
}

// attrNow is a port's tables read now, if its snapshots can lag.
func attrNow(p hw.Port) (hw.PortAttr, error) {
	if f, ok := p.(hw.FreshAttr); ok {
		return f.AttrFresh(0)
	}
	return hw.AttrOf(p)
}

// avFromPathWith is avFromPath on the snapshots attrOf gives; with check,
// it returns errEntryMoved when the entries it found there no longer hold.
func (cm *CM) avFromPathWith(p *PathRecord, attrOf func(hw.Port) (hw.PortAttr, error), check bool) (AddressVector, *port, error) {
	var far error
	for _, pt := range cm.ports {
		attr, err := attrOf(pt.hw)
		if err != nil {
			continue
		}
		gidIdx, ok := attr.GIDIndex(p.SGID, p.GIDType)
		if !ok {
			continue
		}
		if gidIdx > 0xFF {
			far = fmt.Errorf("cmcore: path SGID %v is GID index %d of port %d, past the 8 bits umad carries: %w", p.SGID, gidIdx, pt.num, unix.EINVAL)
			continue
		}
		pkIdx, ok := attr.PKeyIndex(p.PKey)
		if !ok {
			return AddressVector{}, nil, fmt.Errorf("cmcore: P_Key %#04x not in port %d's table: %w", p.PKey, pt.num, unix.ENOENT)
		}
		if f, ok := pt.hw.(hw.FreshAttr); ok && check {
			e := attr.GIDs[slices.IndexFunc(attr.GIDs, func(e hw.GIDEntry) bool { return e.Index == gidIdx })]
			// The table's entry, not the path's P_Key: they may differ
			// in the membership bit (PKeyIndex).
			held, err := f.EntriesHold(e, pkIdx, attr.PKeys[pkIdx])
			if err == nil && !held {
				return AddressVector{}, nil, errEntryMoved
			}
			// Entries that cannot be read say nothing: the snapshot,
			// as before the check.
		}
		av := AddressVector{
			PortNum:    uint8(pt.num),
			PKeyIndex:  uint16(pkIdx),
			Timeout:    min(p.PacketLifeTime+1, 31),
			SL:         p.SL,
			StaticRate: p.Rate,
		}
		roce := attr.LinkLayer == hw.LinkEthernet
		if !roce {
			av.DLID = p.DLID
			if attr.LMC > 0 {
				av.SrcPathBits = uint8(p.SLID & (1<<attr.LMC - 1))
			}
		}
		if p.HopLimit > 0 || roce {
			av.IsGlobal = true
			av.GRH = GRHAttr{
				DGID:         p.DGID,
				FlowLabel:    p.FlowLabel & 0xFFFFF,
				SGIDIndex:    uint8(gidIdx),
				HopLimit:     p.HopLimit,
				TrafficClass: p.TrafficClass,
			}
		}
		return av, pt, nil
	}
	if far != nil {
		return AddressVector{}, nil, far
	}
	return AddressVector{}, nil, fmt.Errorf("cmcore: path SGID %v is not on any port of %s: %w", p.SGID, cm.dev.Name(), unix.EINVAL)
}
