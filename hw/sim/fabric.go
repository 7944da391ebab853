// Package sim is an in-memory fabric of simulated RDMA devices that
// implements the hw interfaces, with fault injection for testing the CM:
// loss, duplication, delay and jitter, reordering, partitions, blocking
// sends (RoCE address resolution) and a filter hook for targeted drops.
//
// Every random decision comes from one seeded generator, and delays run on
// an injectable clock, so a test that drives the fabric from one goroutine
// on a clock.Fake replays exactly from its seed.
//
// The fabric mimics what umad shows a userspace CM: MADs are routed by DLID
// on InfiniBand and by DGID on RoCE (where a GRH is mandatory), the received
// source address can be echoed back to reach the sender, and the upper 32
// bits of the TID of every non-response MAD are rewritten with the sending
// agent's id (Config.PreserveTID turns that off).
package sim

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
)

// Config configures a fabric.
type Config struct {
	// Seed seeds the generator behind every random knob.
	Seed uint64
	// Clock times delays and holds; nil means clock.Real.
	Clock clock.Clock
	// QueueLen bounds each endpoint's receive queue; arrivals beyond it are
	// dropped and counted as Overflow. Zero means DefaultQueueLen.
	QueueLen int
	// PreserveTID delivers TIDs untouched instead of rewriting their upper
	// half the way umad does.
	PreserveTID bool
	// Knobs are the initial fault-injection settings.
	Knobs Knobs
	// Deliver makes the endpoints hw.Deliverers, as hw/umad's are: after
	// Deliver(f), each MAD goes to f on a goroutine of the endpoint's, in
	// one buffer that is overwritten once f returns, so that a caller
	// that keeps the MAD past the call shows in its tests. Recv returns
	// what was queued before. Not with a fake clock whose tests expect
	// every delivery done when Advance returns.
	Deliver bool
}

// DefaultQueueLen is the default receive queue length per endpoint.
const DefaultQueueLen = 1024

// Fabric connects simulated devices. All its state is guarded by mu, which
// is also held while a MAD is routed and queued, so delivery is ordered.
type Fabric struct {
	mu         sync.Mutex
	clk        clock.Clock
	rng        *rand.Rand
	queueLen   int
	rewriteTID bool
	deliver    bool
	knobs      Knobs
	// sendBlock and resolveDelay mirror knobs.SendBlock and
	// knobs.Resolve so that Send reads them without the lock.
	sendBlock    atomic.Int64
	resolveDelay atomic.Int64
	filter       Filter
	// scratch is the MAD handed to the filter: the packet stays on the
	// sender's stack instead of escaping through the filter call.
	scratch *hw.MAD
	trace   func(Event)

	devices   []*Device
	byLID     map[uint16]*Port
	byGID     map[hw.GID]*Port
	parts     map[link]bool
	held      map[link]*heldMAD
	nextLID   uint16
	nextAgent uint32
	added     int // devices ever added: default names and GUIDs stay unique after a removal
	gen       uint64
}

// link is a directed pair of ports.
type link struct{ src, dst *Port }

// packet is a MAD in flight, already in the form its receiver will see.
type packet struct {
	src, dst *Port
	rcv      hw.Received // Src.GRH stays nil: see grh
	// grh is the received GRH by value; each delivery gets its own copy
	// so receivers never share one.
	grh    hw.GRH
	hasGRH bool
}

type heldMAD struct {
	pkt    packet
	copies int
	timer  clock.Timer
}

// New returns an empty fabric.
func New(c Config) *Fabric {
	f := &Fabric{
		clk:        c.Clock,
		rng:        rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15)),
		queueLen:   c.QueueLen,
		rewriteTID: !c.PreserveTID,
		deliver:    c.Deliver,
		knobs:      c.Knobs,
		byLID:      make(map[uint16]*Port),
		byGID:      make(map[hw.GID]*Port),
		parts:      make(map[link]bool),
		held:       make(map[link]*heldMAD),
		nextLID:    1,
	}
	f.sendBlock.Store(int64(c.Knobs.SendBlock))
	f.resolveDelay.Store(int64(c.Knobs.Resolve))
	if f.clk == nil {
		f.clk = clock.Real{}
	}
	if f.queueLen <= 0 {
		f.queueLen = DefaultQueueLen
	}
	return f
}

// AddDevice adds a device with the given ports.
func (f *Fabric) AddDevice(c DeviceConfig) (*Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.added
	d := &Device{fabric: f, name: c.Name, guid: c.NodeGUID, ackDelay: c.LocalCAAckDelay, gone: make(chan struct{})}
	if d.name == "" {
		d.name = fmt.Sprintf("sim%d", n)
	}
	for _, o := range f.devices {
		if o.name == d.name {
			return nil, fmt.Errorf("sim: device name %q already used", d.name)
		}
	}
	if d.guid == 0 {
		d.guid = 0x0002_c903_0000_0000 + uint64(n+1)<<8
	}
	if d.ackDelay == 0 {
		d.ackDelay = DefaultLocalCAAckDelay
	}
	if len(c.Ports) == 0 {
		return nil, fmt.Errorf("sim: device %s has no ports", d.name)
	}
	for i, pc := range c.Ports {
		p, err := f.newPort(d, i+1, pc)
		if err != nil {
			f.unindex(d)
			return nil, err
		}
		d.ports = append(d.ports, p)
	}
	f.devices = append(f.devices, d)
	f.added++
	f.gen++
	return d, nil
}

// RemoveDevice takes d off the fabric, as `rdma link delete` or a driver
// unbind takes a real device away: its ports leave the address tables (MADs
// to them are unroutable), every endpoint open on them fails its receives
// and sends with err from now on (a removed device's umad files fail with
// EIO), and its ports refuse new endpoints. Its name may then be added
// again, as a new device.
func (f *Fabric) RemoveDevice(d *Device, err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.devices, d)
	if i < 0 {
		return fmt.Errorf("sim: remove %s: not on the fabric", d.name)
	}
	f.devices = slices.Delete(f.devices, i, i+1)
	f.unindex(d)
	f.gen++
	d.goneErr = fmt.Errorf("sim: %s removed: %w", d.name, err)
	close(d.gone)
	return nil
}

// unindex removes a half-built device's ports from the address maps.
func (f *Fabric) unindex(d *Device) {
	for l, p := range f.byLID {
		if p.dev == d {
			delete(f.byLID, l)
		}
	}
	for g, p := range f.byGID {
		if p.dev == d {
			delete(f.byGID, g)
		}
	}
}

// AddIB adds a device with n InfiniBand ports with the next free LIDs.
func (f *Fabric) AddIB(name string, n int) (*Device, error) {
	return f.AddDevice(DeviceConfig{Name: name, Ports: make([]PortConfig, n)})
}

// AddRoCE adds a device with n RoCE ports with link-local RoCE v2 GIDs.
func (f *Fabric) AddRoCE(name string, n int) (*Device, error) {
	ps := make([]PortConfig, n)
	for i := range ps {
		ps[i].LinkLayer = hw.LinkEthernet
	}
	return f.AddDevice(DeviceConfig{Name: name, Ports: ps})
}

// Devices returns the fabric's devices in the order they were added.
func (f *Fabric) Devices() []*Device {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Device(nil), f.devices...)
}

// Generation changes whenever a device is added or removed, as a real
// device listing does (umad.Listing).
func (f *Fabric) Generation() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen
}

// Knobs returns the current fault-injection settings.
func (f *Fabric) Knobs() Knobs {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.knobs
}

// SetKnobs changes the fault-injection settings; MADs already in flight
// keep the delay they were given.
func (f *Fabric) SetKnobs(k Knobs) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.knobs = k
	f.sendBlock.Store(int64(k.SendBlock))
	f.resolveDelay.Store(int64(k.Resolve))
}

// SetFilter installs fn (nil removes it).
func (f *Fabric) SetFilter(fn Filter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.filter = fn
}

// SetTrace installs a hook that sees every step of every MAD (nil removes
// it). It runs with the fabric locked and must not call back into it.
func (f *Fabric) SetTrace(fn func(Event)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trace = fn
}

// Partition drops all traffic between a and b, both ways, from now on.
func (f *Fabric) Partition(a, b *Port) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.parts[link{a, b}] = true
	f.parts[link{b, a}] = true
}

// Heal undoes Partition(a, b).
func (f *Fabric) Heal(a, b *Port) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.parts, link{a, b})
	delete(f.parts, link{b, a})
}

// HealAll removes every partition.
func (f *Fabric) HealAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.parts)
}

// SetQueueLen sets the receive queue of the endpoints opened from now on
// (n <= 0: DefaultQueueLen); those open keep theirs.
func (f *Fabric) SetQueueLen(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		n = DefaultQueueLen
	}
	f.queueLen = n
}

// Flush releases every held (to-be-reordered) MAD now.
func (f *Fabric) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	// In link order, not the map's: a seed replays the same run.
	links := slices.SortedFunc(maps.Keys(f.held), func(a, b link) int {
		return cmp.Or(a.src.id.compare(b.src.id), a.dst.id.compare(b.dst.id))
	})
	for _, l := range links {
		h := f.held[l]
		delete(f.held, l)
		h.timer.Stop()
		f.emit(&h.pkt, h.copies)
	}
}

func (f *Fabric) event(k EventKind, p *packet) {
	e := Event{
		Kind:   k,
		Time:   f.clk.Now(),
		Src:    p.src.id,
		TID:    binary.BigEndian.Uint64(p.rcv.MAD[8:16]),
		AttrID: binary.BigEndian.Uint16(p.rcv.MAD[16:18]),
	}
	if p.dst != nil {
		e.Dst = p.dst.id
	}
	f.trace(e)
}

func einval(format string, args ...any) error {
	return fmt.Errorf("sim: "+format+": %w", append(args, syscall.EINVAL)...)
}

// send routes one MAD from ep and runs it through the knobs. Called with
// f.mu held. Errors are what umad's write() would refuse; MADs that
// vanish in the fabric are counted, not reported.
func (f *Fabric) send(ep *endpoint, dst *hw.Address, mad *hw.MAD) error {
	src := ep.port
	if mad == nil {
		return einval("%s: send: nil MAD", src)
	}
	sa := &src.attr
	if int(dst.PKeyIndex) >= len(sa.PKeys) {
		return einval("%s: send: P_Key index %d out of range (table has %d)", src, dst.PKeyIndex, len(sa.PKeys))
	}
	var sgid hw.GIDEntry
	if dst.GRH != nil {
		found := false
		for _, e := range sa.GIDs {
			if e.Index == int(dst.GRH.SGIDIndex) {
				sgid, found = e, true
				break
			}
		}
		if !found {
			return einval("%s: send: no GID at SGID index %d", src, dst.GRH.SGIDIndex)
		}
	} else if sa.LinkLayer == hw.LinkEthernet {
		return einval("%s: send: RoCE needs a GRH", src)
	}

	p := packet{src: src}
	p.rcv.MAD = *mad
	if f.rewriteTID && mad[3]&0x80 == 0 {
		binary.BigEndian.PutUint32(p.rcv.MAD[8:12], ep.hiTID)
	}
	src.counters.Sent++
	if !f.resolve(&p, dst, &sgid) {
		src.counters.Unroutable++
		if f.trace != nil {
			f.event(EventUnroutable, &p)
		}
		return nil
	}
	if f.trace != nil {
		f.event(EventSend, &p)
	}
	if len(f.parts) > 0 && f.parts[link{src, p.dst}] {
		src.counters.Partitioned++
		if f.trace != nil {
			f.event(EventPartitioned, &p)
		}
		return nil
	}
	verdict := Pass
	if f.filter != nil {
		if f.scratch == nil {
			f.scratch = new(hw.MAD)
		}
		*f.scratch = p.rcv.MAD
		verdict = f.filter(src, p.dst, f.scratch)
		p.rcv.MAD = *f.scratch
	}
	k := &f.knobs
	copies := 1
	switch verdict {
	case Drop:
		src.counters.Filtered++
		if f.trace != nil {
			f.event(EventFiltered, &p)
		}
		return nil
	case Pass:
		if k.Loss > 0 && f.rng.Float64() < k.Loss {
			src.counters.Lost++
			if f.trace != nil {
				f.event(EventLost, &p)
			}
			return nil
		}
		if k.Duplicate > 0 && f.rng.Float64() < k.Duplicate {
			copies = 2
			src.counters.Duplicated++
			if f.trace != nil {
				f.event(EventDuplicated, &p)
			}
		}
	}

	l := link{src, p.dst}
	if h := f.heldOn(l); h != nil {
		// The held MAD is overtaken by this one, then follows it.
		delete(f.held, l)
		h.timer.Stop()
		f.emit(&p, copies)
		f.emit(&h.pkt, h.copies)
		return nil
	}
	if verdict == Pass && k.Reorder > 0 && f.rng.Float64() < k.Reorder {
		src.counters.Reordered++
		if f.trace != nil {
			f.event(EventHeld, &p)
		}
		h := &heldMAD{pkt: p, copies: copies}
		hold := k.HoldMax
		if hold <= 0 {
			hold = DefaultHoldMax
		}
		f.held[l] = h
		h.timer = f.clk.AfterFunc(hold, func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.held[l] == h {
				delete(f.held, l)
				f.emit(&h.pkt, h.copies)
			}
		})
		return nil
	}
	f.emit(&p, copies)
	return nil
}

// heldOn returns the MAD held on l, skipping the map lookup when nothing
// is held anywhere (the common case).
func (f *Fabric) heldOn(l link) *heldMAD {
	if len(f.held) == 0 {
		return nil
	}
	return f.held[l]
}

// resolve finds p's destination port and fills in the source address the
// receiver will see. It reports false when the MAD cannot arrive.
func (f *Fabric) resolve(p *packet, dst *hw.Address, sgid *hw.GIDEntry) bool {
	src := p.src
	sa := &src.attr
	if sa.State != hw.PortActive || dst.QPN != 1 {
		return false
	}
	var to *Port
	if sa.LinkLayer == hw.LinkEthernet {
		to = f.byGID[dst.GRH.GID]
	} else {
		to = f.byLID[dst.LID]
	}
	if to == nil {
		return false
	}
	p.dst = to
	ta := &to.attr
	if ta.LinkLayer != sa.LinkLayer || ta.State != hw.PortActive {
		return false
	}
	pkey := sa.PKeys[dst.PKeyIndex]
	pi, ok := ta.PKeyIndex(pkey)
	if !ok || (pkey&0x8000 == 0 && ta.PKeys[pi]&0x8000 == 0) {
		return false // P_Key mismatch, or two limited members
	}
	src2 := &p.rcv.Src
	src2.QPN = 1 // QKey stays 0: umad does not report it either
	src2.PKeyIndex = uint16(pi)
	if sa.LinkLayer == hw.LinkInfiniBand {
		mask := uint8(1)<<sa.LMC - 1
		src2.LID = sa.LID | uint16(dst.PathBits&mask)
		src2.SL = dst.SL & 0xf
		src2.PathBits = uint8(dst.LID-ta.LID) & (uint8(1)<<ta.LMC - 1)
	}
	if dst.GRH != nil {
		// The receiver matches the DGID against its table; on RoCE the
		// encapsulation (GID type) must match as well.
		idx := -1
		for _, e := range ta.GIDs {
			if e.GID == dst.GRH.GID && (sa.LinkLayer == hw.LinkInfiniBand || e.Type == sgid.Type) {
				idx = e.Index
				break
			}
		}
		if idx < 0 {
			return false
		}
		// The received hop limit is what umad reports, not the sender's:
		// 0xFF on InfiniBand (ib_init_ah_attr_from_wc), on RoCE the
		// route's to the sender, Linux's default of 64 here.
		hop := uint8(0xff)
		if sa.LinkLayer == hw.LinkEthernet {
			hop = roceRouteHopLimit
		}
		p.hasGRH = true
		p.grh = hw.GRH{
			GID:          sgid.GID,
			SGIDIndex:    uint8(idx),
			HopLimit:     hop,
			TrafficClass: dst.GRH.TrafficClass,
			FlowLabel:    dst.GRH.FlowLabel & 0xfffff,
		}
	}
	return true
}

// roceRouteHopLimit is the hop limit a RoCE receiver's route to the
// sender gives (net.ipv4.ip_default_ttl, IPv6's hop_limit: 64).
const roceRouteHopLimit = 64

// emit sends copies of p on their way, each after its own delay.
func (f *Fabric) emit(p *packet, copies int) {
	k := &f.knobs
	for range copies {
		d := k.Delay
		if k.Jitter > 0 {
			d += time.Duration(f.rng.Int64N(int64(k.Jitter)))
		}
		if d <= 0 {
			f.arrive(p)
			continue
		}
		q := *p
		f.clk.AfterFunc(d, func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.arrive(&q)
		})
	}
}

// arrive queues p to the endpoint registered for it. Called with f.mu held.
func (f *Fabric) arrive(p *packet) {
	to := p.dst
	mad := &p.rcv.MAD
	var ep *endpoint
	for _, e := range to.eps {
		if e.accepts(mad) {
			ep = e
			break
		}
	}
	// A removed device's endpoints get nothing more, MADs in flight to
	// it included (a delay, a hold for reordering).
	if ep == nil || to.attr.State != hw.PortActive || to.dev.goneErr != nil {
		to.counters.NoAgent++
		if f.trace != nil {
			f.event(EventNoAgent, p)
		}
		return
	}
	r := p.rcv
	if p.hasGRH {
		g := p.grh
		r.Src.GRH = &g
	}
	q := ep.q
	if ep.inline != nil {
		q = ep.inline
	}
	select {
	case q <- r:
		to.counters.Received++
		if f.trace != nil {
			f.event(EventDelivered, p)
		}
	default:
		to.counters.Overflow++
		if f.trace != nil {
			f.event(EventOverflow, p)
		}
	}
}
