// Package umad drives real RDMA devices through the kernel's umad
// interface (/dev/infiniband/umadN), the interface libibumad wraps: ports
// and their tables come from sysfs, MADs go through read() and write() on
// the umad device with P_Key index support enabled. Pure Go, no cgo.
//
// Receives run through the Go runtime's poller on one registered agent.
// Sends use separate files, each with a send-only agent, because write()
// holds the file's mutex while the kernel resolves a RoCE peer's MAC (up
// to about a second) and read() on the same file would wait behind it.
package umad

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad/uapi"
)

// DefaultLocalCAAckDelay stands in for ibv_query_device's
// local_ca_ack_delay, which sysfs does not expose: 16 (4.096 µs × 2^16 ≈
// 268 ms) is mlx5's value and the largest of mlx4 (15), mlx5 and rxe (15),
// so timeouts derived from it err on the long side.
const DefaultLocalCAAckDelay = 16

// Defaults for Options.
const (
	DefaultSysfsRoot = "/sys"
	DefaultDevDir    = "/dev/infiniband"
	DefaultQueueLen  = 4096
	DefaultSendFiles = 4
)

// Options configure discovery and endpoints. Zero fields take defaults.
type Options struct {
	SysfsRoot string // where sysfs is mounted
	DevDir    string // where the umadN device nodes are
	// LocalCAAckDelay overrides DefaultLocalCAAckDelay per device name.
	LocalCAAckDelay map[string]uint8
	// QueueLen bounds each endpoint's receive queue, used until Deliver;
	// MADs beyond it are dropped and counted.
	QueueLen int
	// SendFiles bounds the send files per endpoint: up to this many sends
	// (to peers whose MAC is being resolved) proceed in parallel.
	SendFiles int
	// AttrMaxAge is how long Port.Attr serves a snapshot before it
	// refreshes it in the background. A RoCE GID table is up to 1024 sysfs
	// files (rxe: 50 ms to read under qemu TCG), far too slow to read per
	// connection; its changes (IP addresses coming and going, an SM's new
	// P_Key table) show within about this delay. A snapshot twice as old
	// (the port idle meanwhile) is read again before it is served. Zero
	// means DefaultAttrMaxAge; negative means read sysfs on every call.
	AttrMaxAge time.Duration
}

// DefaultAttrMaxAge is the default of Options.AttrMaxAge.
const DefaultAttrMaxAge = 5 * time.Second

func (o Options) withDefaults() Options {
	if o.SysfsRoot == "" {
		o.SysfsRoot = DefaultSysfsRoot
	}
	if o.DevDir == "" {
		o.DevDir = DefaultDevDir
	}
	if o.QueueLen <= 0 {
		o.QueueLen = DefaultQueueLen
	}
	if o.SendFiles <= 0 {
		o.SendFiles = DefaultSendFiles
	}
	if o.AttrMaxAge == 0 {
		o.AttrMaxAge = DefaultAttrMaxAge
	}
	return o
}

// Device is an RDMA device found in sysfs; it implements hw.Device.
type Device struct {
	name     string
	guid     uint64
	ackDelay uint8
	ports    []*Port
}

var _ hw.Device = (*Device)(nil)

func (d *Device) Name() string           { return d.name }
func (d *Device) NodeGUID() uint64       { return d.guid }
func (d *Device) LocalCAAckDelay() uint8 { return d.ackDelay }

// HasUMAD reports whether ib_umad has a device for any of d's ports. It has
// none for ports without a MAD interface (iWARP: no IB CM either, and
// ib_ucm made no node for them), nor for any port before ib_umad is loaded.
func (d *Device) HasUMAD() bool {
	return slices.ContainsFunc(d.ports, func(p *Port) bool { return p.umad != "" })
}

func (d *Device) Ports() []hw.Port {
	ps := make([]hw.Port, len(d.ports))
	for i, p := range d.ports {
		ps[i] = p
	}
	return ps
}

// Port is one port of a Device; it implements hw.Port.
type Port struct {
	dev  *Device
	num  int
	umad string // "umad0", or "" when ib_umad has no device for the port
	sys  sysfs
	opts Options

	mu       sync.Mutex
	attr     hw.PortAttr // the last snapshot read
	attrTime time.Time   // when it was read; zero: never
	// whole is the last snapshot whose tables were read whole, kept apart
	// from attr, which a later partial refresh replaces; wholeTime is
	// when it was read, wholeRead which read it is.
	whole     hw.PortAttr
	wholeTime time.Time
	wholeRead uint64
	fullRead  *fullRead     // AttrFresh's read under way, or nil
	refreshed chan struct{} // non-nil while a background refresh runs; closed when it ends
	refreshes int           // background refreshes started
	checked   [4]entryCheck // EntriesHold's latest confirmations
	reads     uint64        // sysfs reads started, background or not
	attrRead  uint64        // which of them attr is: a read stores only over an older one
}

// fullRead is AttrFresh's read of the tables whole; callers that come
// while it runs wait for it and take its result.
type fullRead struct {
	start time.Time // when it began: it shows the tables as of then
	done  chan struct{}
	err   error // the read's, set before done closes
}

// afterAttrRead, when set by a test, runs between a sysfs read of the
// port's attributes and storing them.
var afterAttrRead func(background bool)

// fullRefreshEvery: every so many background refreshes, one reads the
// whole GID and P_Key tables again; the others read what can have changed
// (sysfs.gids). With the default AttrMaxAge, once a minute.
const fullRefreshEvery = 12

var _ hw.Port = (*Port)(nil)

func (p *Port) Device() hw.Device { return p.dev }
func (p *Port) Num() int          { return p.num }
func (p *Port) String() string    { return fmt.Sprintf("%s port %d", p.dev.name, p.num) }

// UMADPath is the device node of the port's umad device, or "".
func (p *Port) UMADPath() string {
	if p.umad == "" {
		return ""
	}
	return filepath.Join(p.opts.DevDir, p.umad)
}

// Attr returns the port's attributes. The first call reads sysfs; later
// calls return that snapshot, and once it is older than
// Options.AttrMaxAge they start a refresh in the background, so that
// callers on a busy port never wait for a GID table read after the first.
// A snapshot at least twice that old, on a port no one asked about
// meanwhile, is read again before it is served: it may be from any time
// before (an SM's P_Key table or an address changed while the port was
// idle), where the kernel's CM reads caches its events keep current. The
// slices are the caller's own.
func (p *Port) Attr() (hw.PortAttr, error) {
	a, err := p.AttrShared()
	return cloneAttr(a), err
}

// AttrShared implements hw.SharedAttr: Attr without copying the tables; a
// refresh replaces the snapshot whole.
func (p *Port) AttrShared() (hw.PortAttr, error) {
	maxAge := p.opts.withDefaults().AttrMaxAge
	p.mu.Lock()
	if p.attrTime.IsZero() || maxAge < 0 {
		p.mu.Unlock()
		return p.refresh()
	}
	age := time.Since(p.attrTime)
	if age >= maxAge {
		done := p.refreshing()
		if age >= 2*maxAge {
			p.mu.Unlock()
			<-done
			p.mu.Lock()
		}
	}
	a := p.attr
	p.mu.Unlock()
	return a, nil
}

// AttrFresh implements hw.FreshAttr: the snapshot if its tables were read
// whole in a read begun less than maxAge ago, else a whole read now. One
// under way is joined if it began late enough, else waited for and not
// taken: a caller that saw an entry change (maxAge 0) needs a read begun
// after it looked. Whole: its callers ask because the snapshot lacked
// something, and a background refresh reads a RoCE GID table only a
// little past its highest entry (sysfs.gids), where a GID added behind
// slots still held by deleted ones can sit further.
func (p *Port) AttrFresh(maxAge time.Duration) (hw.PortAttr, error) {
	since := time.Now().Add(-maxAge) // a read begun then or later will do
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if !p.wholeTime.IsZero() && !p.wholeTime.Before(since) {
			return p.whole, nil
		}
		r := p.fullRead
		if r != nil {
			p.mu.Unlock()
			<-r.done
			p.mu.Lock()
			if r.start.Before(since) {
				continue // too old for this caller; look again
			}
		} else {
			r = &fullRead{start: time.Now(), done: make(chan struct{})}
			p.fullRead = r
			p.mu.Unlock()
			_, r.err = p.refreshFrom(r.start)
			p.mu.Lock()
			p.fullRead = nil
			close(r.done)
		}
		if r.err != nil {
			return hw.PortAttr{}, r.err
		}
		return p.whole, nil
	}
}

// EntriesHold implements hw.FreshAttr. A RoCE port's P_Key table is
// fixed (the default P_Key): only its GID slot is read, with its type.
// Entries found to hold less than entryCheckAge ago are taken as they
// are: two sysfs reads per connection and side cost a third more of the
// daemon's CPU per connection in the test VM (make perf-ab), and a busy
// port's connections mostly take the same entries.
func (p *Port) EntriesHold(g hw.GIDEntry, pkeyIndex int, pkey uint16) (bool, error) {
	want := entryCheck{g: g, pkeyIndex: pkeyIndex, pkey: pkey}
	p.mu.Lock()
	ll := p.attr.LinkLayer
	for _, c := range p.checked {
		if c.g == want.g && c.pkeyIndex == pkeyIndex && c.pkey == pkey && time.Since(c.at) < entryCheckAge {
			p.mu.Unlock()
			return true, nil
		}
	}
	p.mu.Unlock()
	want.at = time.Now() // before the read: what it shows is no older
	held, err := p.sys.entriesHold(p.dev.name, p.num, ll, g, pkeyIndex, pkey)
	if held {
		p.mu.Lock()
		oldest := 0
		for i, c := range p.checked {
			if c.at.Before(p.checked[oldest].at) {
				oldest = i
			}
		}
		p.checked[oldest] = want
		p.mu.Unlock()
	}
	return held, err
}

// entryCheckAge is how long EntriesHold trusts entries it found to hold.
const entryCheckAge = 100 * time.Millisecond

// entryCheck is entries EntriesHold found to hold, at.
type entryCheck struct {
	g         hw.GIDEntry
	pkeyIndex int
	pkey      uint16
	at        time.Time
}

// refreshing returns the channel of the background refresh under way,
// starting one if none is: a refresh is joined, never doubled. p.mu is
// held.
func (p *Port) refreshing() chan struct{} {
	if p.refreshed != nil {
		return p.refreshed
	}
	return p.refreshLocked()
}

// refreshLocked starts a background refresh of the snapshot and returns
// the channel closed when it ends. p.mu is held.
func (p *Port) refreshLocked() chan struct{} {
	done := make(chan struct{})
	p.refreshed = done
	prev := cloneAttr(p.attr)
	p.reads++
	read := p.reads
	p.refreshes++
	full := p.refreshes%fullRefreshEvery == 0
	if full {
		prev = hw.PortAttr{} // now and then, everything
	}
	start := time.Now()
	go func() {
		defer close(done)
		var from *hw.PortAttr
		if prev.LinkLayer != 0 {
			from = &prev
		}
		a, err := p.sys.portAttr(p.dev.name, p.num, from)
		if afterAttrRead != nil {
			afterAttrRead(true)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.refreshed = nil
		if err == nil {
			p.store(a, read, full, start)
		} else {
			// Keep serving the last snapshot; retry after maxAge.
			p.attrTime = time.Now()
		}
	}()
	return done
}

// Refresh reads the port's attributes from sysfs now and caches them.
func (p *Port) Refresh() (hw.PortAttr, error) {
	a, err := p.refresh()
	return cloneAttr(a), err
}

// refresh is Refresh, sharing the new snapshot's tables.
func (p *Port) refresh() (hw.PortAttr, error) { return p.refreshFrom(time.Now()) }

// refreshFrom is refresh begun at start.
func (p *Port) refreshFrom(start time.Time) (hw.PortAttr, error) {
	p.mu.Lock()
	p.reads++
	read := p.reads
	p.mu.Unlock()
	a, err := p.sys.portAttr(p.dev.name, p.num, nil)
	if afterAttrRead != nil {
		afterAttrRead(false)
	}
	if err != nil {
		return hw.PortAttr{}, err
	}
	p.mu.Lock()
	p.store(a, read, true, start)
	p.mu.Unlock()
	return a, nil
}

// store keeps a, the attributes of sysfs read number read, unless a read
// started later has already been stored: a background refresh that ends
// after a Refresh must not put its older tables back. A read of the tables
// whole is also kept apart for AttrFresh, by the same rule. Their times
// are when the read began (start): the tables may have changed behind it
// since. p.mu is held.
func (p *Port) store(a hw.PortAttr, read uint64, whole bool, start time.Time) {
	if read > p.attrRead {
		p.attr, p.attrRead, p.attrTime = a, read, start
	}
	if whole && read > p.wholeRead {
		p.whole, p.wholeRead, p.wholeTime = a, read, start
	}
}

func cloneAttr(a hw.PortAttr) hw.PortAttr {
	a.GIDs = slices.Clone(a.GIDs)
	a.PKeys = slices.Clone(a.PKeys)
	return a
}

// Discover lists the RDMA devices in sysfs in the order they registered
// (firstUMAD), then by name. No devices (or no RDMA support at all) is
// not an error.
func Discover(opts Options) ([]*Device, error) {
	opts = opts.withDefaults()
	sys := sysfs{root: opts.SysfsRoot}
	ents, err := os.ReadDir(sys.path("infiniband"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	if err := sys.checkABI(); err != nil {
		return nil, err
	}
	umads, err := sys.umadPorts()
	if err != nil {
		return nil, fmt.Errorf("list umad devices: %w", err)
	}
	var devs []*Device
	for _, e := range ents {
		d, err := discoverDevice(sys, opts, e.Name(), umads)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	slices.SortFunc(devs, func(a, b *Device) int {
		return cmp.Or(cmp.Compare(a.firstUMAD(), b.firstUMAD()), compareNames(a.name, b.name))
	})
	return devs, nil
}

// firstUMAD is the lowest number of the device's umad files: ib_umad, as
// ib_ucm did, numbers a device's ports when the device registers, taking
// the lowest numbers free, so at boot the order of these numbers is the
// order in which the devices registered (PCI order for one driver's),
// which decided ucmN. Devices without umad files sort last.
func (d *Device) firstUMAD() int {
	first := math.MaxInt
	for _, p := range d.ports {
		if n, err := strconv.Atoi(strings.TrimPrefix(p.umad, "umad")); err == nil {
			first = min(first, n)
		}
	}
	return first
}

// compareNames orders device names with their numbers as numbers:
// mlx5_2 before mlx5_10 (and as strings where that ties: rxe0, rxe00).
func compareNames(a, b string) int {
	x, y := a, b
	for x != "" && y != "" {
		ix, iy := numberEnd(x), numberEnd(y)
		if ix > 0 && iy > 0 { // both start with a number
			nx, ny := strings.TrimLeft(x[:ix], "0"), strings.TrimLeft(y[:iy], "0")
			if c := cmp.Or(cmp.Compare(len(nx), len(ny)), strings.Compare(nx, ny)); c != 0 {
				return c
			}
			x, y = x[ix:], y[iy:]
			continue
		}
		if x[0] != y[0] {
			return cmp.Compare(x[0], y[0])
		}
		x, y = x[1:], y[1:]
	}
	return cmp.Or(cmp.Compare(len(x), len(y)), strings.Compare(a, b))
}

// numberEnd is the length of the run of digits s starts with.
func numberEnd(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

func discoverDevice(sys sysfs, opts Options, name string, umads map[string]string) (*Device, error) {
	d := &Device{name: name, ackDelay: DefaultLocalCAAckDelay}
	if v, ok := opts.LocalCAAckDelay[name]; ok {
		d.ackDelay = v
	}
	g, err := readTrim(sys.path("infiniband", name, "node_guid"))
	if err != nil {
		return nil, fmt.Errorf("read %s node GUID: %w", name, err)
	}
	if d.guid, err = parseGUID(g); err != nil {
		return nil, fmt.Errorf("read %s node GUID: %w", name, err)
	}
	nums, err := tableIndexes(sys.path("infiniband", name, "ports"))
	if err != nil {
		return nil, fmt.Errorf("list %s ports: %w", name, err)
	}
	for _, n := range nums {
		if n == 0 {
			continue // switch port 0 has no CM
		}
		d.ports = append(d.ports, &Port{dev: d, num: n, umad: umads[name+"/"+strconv.Itoa(n)], sys: sys, opts: opts})
	}
	return d, nil
}

// checkABI refuses a umad ABI other than the one this package speaks.
func (s sysfs) checkABI() error {
	v, err := readTrim(s.path("infiniband_mad", "abi_version"))
	if os.IsNotExist(err) {
		return nil // ib_umad not loaded: OpenMAD will say so
	}
	if err != nil {
		return fmt.Errorf("read umad ABI version: %w", err)
	}
	if v != strconv.Itoa(uapi.IB_USER_MAD_ABI_VERSION) {
		return fmt.Errorf("umad ABI version %s, want %d", v, uapi.IB_USER_MAD_ABI_VERSION)
	}
	return nil
}
