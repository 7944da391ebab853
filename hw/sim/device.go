package sim

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/ucmd/ucmd/hw"
)

// DeviceConfig describes a simulated device. Zero fields get defaults.
type DeviceConfig struct {
	Name            string // default "sim<N>"
	NodeGUID        uint64 // default derived from the device number
	LocalCAAckDelay uint8  // default 15, what rxe reports
	Ports           []PortConfig
}

// PortConfig describes one port. Zero fields get defaults: state ACTIVE,
// P_Key table {0xffff}; IB ports get the next free LID, SM LID 1, subnet
// prefix fe80::/64 and GID 0 = prefix|port GUID; Ethernet (RoCE) ports get
// LID 0 and a link-local RoCE v2 GID 0 derived from the port GUID, like rxe.
type PortConfig struct {
	LinkLayer    hw.LinkLayer // default InfiniBand
	State        hw.PortState
	LID          uint16
	LMC          uint8
	SMLID        uint16
	SubnetPrefix uint64
	GIDs         []hw.GIDEntry
	PKeys        []uint16
	// KernelCM pretends the kernel's ib_cm owns the CM class on this port:
	// OpenMAD for class 0x07 method SEND fails with hw.ErrCMClassInUse.
	KernelCM bool
}

// DefaultLocalCAAckDelay is what rxe reports as local_ca_ack_delay.
const DefaultLocalCAAckDelay = 15

const linkLocalPrefix = 0xfe80_0000_0000_0000

// MaxUnicastLID is the last unicast LID (IBTA: 0x0001–0xbfff; multicast
// from 0xc000): a fabric has at most this many IB ports at LMC 0.
const MaxUnicastLID = 0xbfff

// Device is a simulated RDMA device; it implements hw.Device.
type Device struct {
	fabric   *Fabric
	name     string
	guid     uint64
	ackDelay uint8
	ports    []*Port
	// gone is closed when RemoveDevice takes the device off the fabric;
	// goneErr (set before) is what its endpoints fail with from then on.
	gone    chan struct{}
	goneErr error
}

// removed reports whether RemoveDevice took d off the fabric; unlike
// goneErr, it can be asked without the fabric's lock.
func (d *Device) removed() bool {
	select {
	case <-d.gone:
		return true
	default:
		return false
	}
}

var _ hw.Device = (*Device)(nil)

func (d *Device) Name() string           { return d.name }
func (d *Device) NodeGUID() uint64       { return d.guid }
func (d *Device) LocalCAAckDelay() uint8 { return d.ackDelay }

func (d *Device) Ports() []hw.Port {
	ps := make([]hw.Port, len(d.ports))
	for i, p := range d.ports {
		ps[i] = p
	}
	return ps
}

// Port returns port num (from 1), or nil.
func (d *Device) Port(num int) *Port {
	if num < 1 || num > len(d.ports) {
		return nil
	}
	return d.ports[num-1]
}

// Port is a simulated port; it implements hw.Port. Its mutable state is
// guarded by the fabric's lock.
type Port struct {
	dev  *Device
	num  int
	id   PortID
	attr hw.PortAttr
	// kernelCM reserves the CM class (see PortConfig.KernelCM).
	kernelCM bool
	eps      []*endpoint
	counters Counters
	neigh    map[hw.GID]*neighbour // RoCE: resolved or resolving peers
}

var _ hw.Port = (*Port)(nil)

func (p *Port) Device() hw.Device { return p.dev }
func (p *Port) Num() int          { return p.num }
func (p *Port) String() string    { return fmt.Sprintf("%s/%d", p.id.Device, p.id.Port) }

// ID names the port in traces.
func (p *Port) ID() PortID { return p.id }

// Attr returns a snapshot of the port's attributes.
func (p *Port) Attr() (hw.PortAttr, error) {
	a, _ := p.AttrShared()
	a.GIDs = slices.Clone(a.GIDs)
	a.PKeys = slices.Clone(a.PKeys)
	return a, nil
}

// AttrShared implements hw.SharedAttr: SetGIDs replaces the table whole.
func (p *Port) AttrShared() (hw.PortAttr, error) {
	f := p.dev.fabric
	f.mu.Lock()
	defer f.mu.Unlock()
	return p.attr, nil
}

// Counters returns a snapshot of the port's counters.
func (p *Port) Counters() Counters {
	f := p.dev.fabric
	f.mu.Lock()
	defer f.mu.Unlock()
	return p.counters
}

// SetState changes the port state. Only ACTIVE ports send and receive.
func (p *Port) SetState(s hw.PortState) {
	f := p.dev.fabric
	f.mu.Lock()
	defer f.mu.Unlock()
	p.attr.State = s
}

// SetGIDs replaces the GID table (RoCE tables change with IP addresses).
func (p *Port) SetGIDs(gids []hw.GIDEntry) {
	f := p.dev.fabric
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range p.attr.GIDs {
		if f.byGID[e.GID] == p {
			delete(f.byGID, e.GID)
		}
	}
	p.attr.GIDs = slices.Clone(gids)
	for _, e := range gids {
		f.byGID[e.GID] = p
	}
}

// portGUID derives a port GUID from the node GUID the way many HCAs do.
func portGUID(node uint64, num int) uint64 { return node + uint64(num) - 1 }

func gidFrom(prefix, guid uint64) hw.GID {
	var g hw.GID
	binary.BigEndian.PutUint64(g[:8], prefix)
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}

func (f *Fabric) newPort(d *Device, num int, c PortConfig) (*Port, error) {
	p := &Port{dev: d, num: num, id: PortID{d.name, num}, kernelCM: c.KernelCM}
	a := hw.PortAttr{
		LinkLayer:    c.LinkLayer,
		State:        c.State,
		LID:          c.LID,
		LMC:          c.LMC,
		SMLID:        c.SMLID,
		SubnetPrefix: c.SubnetPrefix,
		GIDs:         slices.Clone(c.GIDs),
		PKeys:        slices.Clone(c.PKeys),
	}
	if a.LinkLayer == 0 {
		a.LinkLayer = hw.LinkInfiniBand
	}
	if a.State == 0 {
		a.State = hw.PortActive
	}
	if len(a.PKeys) == 0 {
		a.PKeys = []uint16{0xffff}
	}
	if a.SubnetPrefix == 0 {
		a.SubnetPrefix = linkLocalPrefix
	}
	guid := portGUID(d.guid, num)
	switch a.LinkLayer {
	case hw.LinkInfiniBand:
		if a.LMC > 7 {
			return nil, fmt.Errorf("sim: port %s: LMC %d > 7", p, a.LMC)
		}
		if a.LID == 0 {
			a.LID = f.nextLID
		}
		if a.SMLID == 0 {
			a.SMLID = 1
		}
		if a.GIDs == nil {
			a.GIDs = []hw.GIDEntry{{Index: 0, GID: gidFrom(a.SubnetPrefix, guid), Type: hw.GIDTypeIB}}
		}
		n := uint16(1) << a.LMC
		if a.LID&(n-1) != 0 || a.LID == 0 || uint32(a.LID)+uint32(n) > MaxUnicastLID+1 {
			return nil, fmt.Errorf("sim: port %s: LID %#x with LMC %d is not a valid unicast LID range", p, a.LID, a.LMC)
		}
		for l := a.LID; l < a.LID+n; l++ {
			if q := f.byLID[l]; q != nil {
				return nil, fmt.Errorf("sim: port %s: LID %#x already used by %s", p, l, q)
			}
		}
		for l := a.LID; l < a.LID+n; l++ {
			f.byLID[l] = p
		}
		if a.LID+n > f.nextLID {
			f.nextLID = a.LID + n
		}
	case hw.LinkEthernet:
		if a.LID != 0 || a.LMC != 0 {
			return nil, fmt.Errorf("sim: port %s: RoCE ports have no LID", p)
		}
		if a.GIDs == nil {
			// fe80::/64 with the modified EUI-64 that rxe derives from the MAC.
			a.GIDs = []hw.GIDEntry{{Index: 0, GID: gidFrom(linkLocalPrefix, guid), Type: hw.GIDTypeRoCEv2}}
		}
	default:
		return nil, fmt.Errorf("sim: port %s: unknown link layer %v", p, a.LinkLayer)
	}
	for _, e := range a.GIDs {
		if q := f.byGID[e.GID]; q != nil {
			return nil, fmt.Errorf("sim: port %s: GID %v already used by %s", p, e.GID, q)
		}
	}
	for _, e := range a.GIDs {
		f.byGID[e.GID] = p
	}
	p.attr = a
	return p, nil
}
