package daemon

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad"
	"github.com/ucmd/ucmd/internal/status"
)

// RDMA devices come and go while ucmd runs: a driver reload or a firmware
// reset unregisters a device and registers it again, `rdma link add` and
// `rdma link delete` make and remove soft devices, an HCA can be
// hot-plugged. The kernel's ib_ucm followed its devices (an ib_client's
// add and remove callbacks): a new device got the lowest free ucmN, a
// removed one lost its node. ucmd does the same by looking at the devices
// every Config.Rescan, and at once when a port stops receiving or a CUSE
// channel fails (docs/hotplug.md):
//
//   - a served device is retired when it is no longer listed, when every
//     one of its ports has stopped receiving (its umad files fail with EIO
//     once it is gone, which also catches a removal and re-add between two
//     looks), when it is listed with another identity (node GUID or umad
//     files), or when the kernel ended its CUSE channel (an abort: the
//     device, still listed as it was, is then served again at once, on a
//     new channel); retiring closes its CUSE channel, so its node goes, its
//     open files are released and their ids destroyed, and clients still
//     holding the node get ENOTCONN from the kernel;
//   - a device not served is served once two looks in a row have seen it
//     the same (a device's ports and umad files appear one after another as
//     its drivers register it), on the lowest free ucmN;
//   - a device that cannot be served (the kernel's ib_cm took its CM class
//     first, a registration failed) is tried again after a delay that
//     doubles up to maxRetryDelay, and logged as a warning when the reason
//     changes.
//
// A look lists the two device classes in sysfs, and reads the devices'
// attributes only when that listing changed or a device waits to be served
// (look); a uevent socket would answer sooner, but ib_cm, when loaded,
// registers on a new device inside the kernel's own registration, before
// any uevent, so no listener could win that race either.

// maxRetryDelay bounds how long a device that cannot be served waits
// between attempts.
const maxRetryDelay = time.Minute

// retryBase is the first delay before a device that cannot be served is
// tried again: one rescan interval. Without the rescan goroutine (Rescan
// 0) only a test rescans, and it should not find the device due at once.
func (d *Daemon) retryBase() time.Duration {
	if d.cfg.Rescan <= 0 {
		return maxRetryDelay
	}
	return d.cfg.Rescan
}

// pendingDevice is a device seen but not served.
type pendingDevice struct {
	key     string    // identity when last seen
	retryAt time.Time // not before this
	delay   time.Duration
	lastErr string    // the reason last logged as a warning
	since   time.Time // the first failed attempt
}

// identity tells one registration of a device from the next: the node
// GUID and, on umad, each port's umad file (ib_umad numbers them afresh
// when a device comes back).
func identity(dev hw.Device) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %#x", dev.Name(), dev.NodeGUID())
	for _, p := range dev.Ports() {
		fmt.Fprintf(&b, " %d", p.Num())
		if u, ok := p.(interface{ UMADPath() string }); ok {
			b.WriteString(":" + u.UMADPath())
		}
	}
	return b.String()
}

// fullLookEvery bounds how many looks in a row reuse the devices of a full
// look: a minute at the default --rescan. A driver can change what a full
// look reads (a node GUID, say) without registering its device again, which
// the listing would not show.
const fullLookEvery = 30

// lastLook is what the last full look saw, for the looks after it.
type lastLook struct {
	listing string      // what the device classes listed before it read them
	found   []hw.Device // what it found
	reused  int         // looks since that reused it
	full    int64       // full looks made (tests)
}

// look lists the devices there are now. A full look (discover) reads a
// few sysfs attributes of every device and umad port: with 82 Soft-RoCE
// devices, 330 files a look. The listing of the device classes costs two
// directory reads, and when it is what it was before the last full look,
// no device or umad port has been added, removed or registered again since
// (umad.Listing), so what that look found still stands. A look is full
// all the same when asked (force: a port stopped receiving), when a device
// not served is due for another try (settling, or after its retry delay),
// and every fullLookEvery looks.
func (d *Daemon) look(force bool, now time.Time) ([]hw.Device, error) {
	listing, err := d.listing()
	if err == nil && !force && listing == d.last.listing && d.last.reused < fullLookEvery-1 && !d.pendingDue(now) {
		d.last.reused++
		return d.last.found, nil
	}
	if err != nil {
		// The full look says what is wrong, if anything still is.
		listing = ""
	}
	found, err := d.discover()
	if err != nil {
		d.last = lastLook{full: d.last.full}
		return nil, err
	}
	d.last.listing, d.last.found, d.last.reused = listing, found, 0
	d.last.full++
	return found, nil
}

// listing is the token of what the daemon's fabric lists (umad.Listing),
// which changes whenever a device is added, removed or registered again.
func (d *Daemon) listing() (string, error) {
	if d.cfg.Fabric == FabricSim {
		return strconv.FormatUint(d.fabric.Generation(), 10), nil
	}
	return umad.Listing(d.cfg.UMAD)
}

// pendingDue tells whether a device not served is to be tried now.
func (d *Daemon) pendingDue(now time.Time) bool {
	for _, p := range d.pending {
		if !now.Before(p.retryAt) {
			return true
		}
	}
	return false
}

func (d *Daemon) startWatch(every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	d.watchStop, d.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(d.watchDone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d.rescan(ctx, false)
			case <-d.kick:
				d.rescan(ctx, true)
			}
		}
	}()
}

// kickRescan is every CM's OnReceiveError: a port that stopped is most
// likely a device removed, whose clients should not wait a whole rescan
// interval to learn it.
func (d *Daemon) kickRescan(int, error) {
	select {
	case d.kick <- struct{}{}:
	default: // one pending is enough
	}
}

func (d *Daemon) stopWatch() {
	if d.watchStop != nil {
		d.watchStop()
		<-d.watchDone
	}
}

// rescan brings the devices served in line with the devices there are,
// with a full look if force. Only one rescan runs at a time (the watch
// goroutine's, or a test's).
func (d *Daemon) rescan(ctx context.Context, force bool) {
	now := time.Now()
	found, err := d.look(force, now)
	if err != nil {
		// A device being removed can vanish between the listing and the
		// reads of its files: look again next time.
		d.log.Debug("rescan: listing the RDMA devices failed", "err", err)
		return
	}
	byName := make(map[string]hw.Device, len(found))
	for _, dev := range found {
		byName[dev.Name()] = dev
	}
	changed := false
	var settled []hw.Device // retired, but to be served again at once
	for _, s := range d.servedNow() {
		var reason string
		dev, listed := byName[s.dev.Name()]
		switch {
		case s.broken.Load():
			reason = status.RetiredChannelFailed
			if listed && identity(dev) == identity(s.dev) {
				// The device itself is as it was: its clients should
				// not wait for it to settle again.
				settled = append(settled, dev)
			}
		case !listed:
			reason = status.RetiredGone
		case s.cm.Stopped():
			reason = status.RetiredPortsStopped
		case identity(dev) != identity(s.dev):
			reason = status.RetiredRegisteredAgain
		default:
			continue
		}
		d.retire(s, reason)
		changed = true
	}
	if d.pending == nil {
		d.pending = make(map[string]*pendingDevice)
	}
	for name := range d.pending {
		if _, ok := byName[name]; !ok {
			delete(d.pending, name)
		}
	}
	for _, dev := range settled {
		d.pending[dev.Name()] = &pendingDevice{key: identity(dev)}
	}
	for _, dev := range found {
		if d.serving(dev.Name()) {
			continue
		}
		key := identity(dev)
		p := d.pending[dev.Name()]
		if p == nil || p.key != key {
			d.pending[dev.Name()] = &pendingDevice{key: key}
			continue // settle: serve it if the next look sees it the same
		}
		if now.Before(p.retryAt) {
			continue
		}
		i := d.freeIndex()
		if err := d.serve(ctx, i, dev); err != nil {
			p.delay = min(max(2*p.delay, d.retryBase()), maxRetryDelay)
			p.retryAt = now.Add(p.delay)
			if p.since.IsZero() {
				p.since = now
			}
			if msg := err.Error(); msg != p.lastErr {
				p.lastErr = msg
				d.log.Warn("cannot serve an RDMA device that appeared; trying again later", "dev", dev.Name(), "err", err, "retry_in", p.delay)
			} else {
				d.log.Debug("still cannot serve an RDMA device", "dev", dev.Name(), "err", err, "retry_in", p.delay)
			}
			continue
		}
		delete(d.pending, dev.Name())
		changed = true
	}
	d.publishUnserved()
	if !changed {
		return
	}
	if err := d.writeClassTree(); err != nil {
		d.log.Error("rescan: the infiniband_cm class tree is stale", "err", err)
	}
	d.log.Info("devices changed", "nodes", d.Nodes())
	if d.cfg.Changed != nil {
		d.cfg.Changed(d)
	}
}

// publishUnserved puts the devices that failed to start in the status.
func (d *Daemon) publishUnserved() {
	var un []status.Unserved
	for name, p := range d.pending {
		if p.lastErr != "" {
			un = append(un, status.Unserved{Name: name, Reason: p.lastErr, Since: p.since, NextTry: p.retryAt})
		}
	}
	slices.SortFunc(un, func(a, b status.Unserved) int { return strings.Compare(a.Name, b.Name) })
	d.mu.Lock()
	d.unserved = un
	d.mu.Unlock()
}

// retireWhy is the log's words for each reason a device is retired.
var retireWhy = map[string]string{
	status.RetiredGone:            "the device is gone",
	status.RetiredPortsStopped:    "every port stopped receiving",
	status.RetiredRegisteredAgain: "the device was registered again",
	status.RetiredChannelFailed:   "its CUSE channel failed",
}

// retire stops serving s and removes its node; reason is one of
// status.RetireReasons.
func (d *Daemon) retire(s *served, reason string) {
	d.mu.Lock()
	for i, o := range d.served {
		if o == s {
			d.served = append(d.served[:i:i], d.served[i+1:]...)
			break
		}
	}
	if d.retired == nil {
		d.retired = make(map[string]uint64)
	}
	d.retired[reason]++
	d.mu.Unlock()
	attrs := []any{"dev", s.dev.Name(), "node", s.node, "why", retireWhy[reason], "open_files", len(s.ucm.Files())}
	if err := s.stop(); err != nil {
		attrs = append(attrs, "err", err)
	}
	d.nums.gone(s.major)
	d.trace.Forget(s.dev.Name())
	if d.metrics != nil {
		d.metrics.Forget(s.dev.Name())
	}
	d.log.Warn("stopped serving an RDMA device", attrs...)
}

func (d *Daemon) serving(name string) bool {
	for _, s := range d.servedNow() {
		if s.dev.Name() == name {
			return true
		}
	}
	return false
}

// freeIndex is the lowest N with no ucmN, as the kernel's ida gave.
func (d *Daemon) freeIndex() int {
	i := 0
	for _, s := range d.servedNow() { // by index
		if s.index != i {
			break
		}
		i++
	}
	return i
}
