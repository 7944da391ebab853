package daemon_test

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
	"github.com/ucmd/ucmd/internal/metrics/metricstest"
	"github.com/ucmd/ucmd/internal/status"
	"github.com/ucmd/ucmd/internal/syncbuf"
	"github.com/ucmd/ucmd/internal/sysclass"
	"github.com/ucmd/ucmd/ucm"
)

// hotplugDaemon starts a sim daemon of n devices whose rescans the test
// makes (d.Rescan), logging into the returned buffer.
func hotplugDaemon(t *testing.T, f *daemontest.Fake, run string, base daemon.Config) (*daemon.Daemon, *syncbuf.Buffer, *int) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	changes := new(int)
	cfg := base
	cfg.Fabric, cfg.RuntimeDir = daemon.FabricSim, run
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg.Changed = func(*daemon.Daemon) { *changes++ }
	d, err := daemon.Start(t.Context(), f.Config(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, logs, changes
}

// classDevices lists the ucmN entries of the class tree `ucmd exec` shows,
// each as "ucmN=ibdev".
func classDevices(t *testing.T, run string) []string {
	t.Helper()
	ents, err := os.ReadDir(sysclass.ClassDir(run))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(sysclass.ClassDir(run), e.Name(), "ibdev"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Name()+"="+strings.TrimSpace(string(b)))
	}
	return out
}

func simDevice(t *testing.T, fab *sim.Fabric, name string) *sim.Device {
	t.Helper()
	for _, dev := range fab.Devices() {
		if dev.Name() == name {
			return dev
		}
	}
	t.Fatalf("no sim device %s", name)
	return nil
}

func wantNodes(t *testing.T, f *daemontest.Fake, d *daemon.Daemon, run string, want ...string) {
	t.Helper()
	var nodes []string
	for _, n := range d.Nodes() {
		nodes = append(nodes, strings.TrimPrefix(n, f.DevDir+"/infiniband/"))
	}
	var devs []string
	for _, sd := range d.Snapshot().Devices {
		devs = append(devs, strings.TrimPrefix(sd.Node, f.DevDir+"/infiniband/")+"="+sd.Name)
	}
	if !slices.Equal(devs, want) || !slices.Equal(classDevices(t, run), want) || len(nodes) != len(want) {
		t.Fatalf("nodes %v, status %v, class tree %v; want %v", nodes, devs, classDevices(t, run), want)
	}
	for _, w := range want {
		node := filepath.Join(f.DevDir, "infiniband", strings.Split(w, "=")[0])
		if _, err := os.Stat(node); err != nil {
			t.Errorf("node of %s: %v", w, err)
		}
	}
}

// A device removed while served loses its node: its blocked client is
// woken, its files are released (their ids no longer count against the
// user's limits), the class tree and status drop it. When the device comes
// back it is served again on the lowest free node once two rescans have
// seen it, and connections work on it.
func TestHotplugRemoveAndReturn(t *testing.T) {
	const userIDs = 3 // a connection on a node needs 3: listener, active, passive
	f := daemontest.New(t)
	run := t.TempDir()
	d, logs, changes := hotplugDaemon(t, f, run, daemon.Config{SimDevices: 2, Limits: ucm.Limits{UserIDs: userIDs}})
	fab := d.SimFabric()
	wantNodes(t, f, d, run, "ucm0=sim0", "ucm1=sim1")

	c := client(t, f, "infiniband/ucm1")
	for i := range userIDs {
		if _, err := c.CreateID(uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	// A GET_EVENT that blocks: sent from this goroutine, so that it is on
	// its way before the device goes.
	get := &abi.EventGet{Response: c.Mem.Alloc(abi.EventRespSize), Data: c.Mem.Alloc(1), Info: c.Mem.Alloc(1)}
	blocked := c.F.(interface {
		WriteAsync([]byte) *cusetest.Pending
	}).WriteAsync(conformance.Encode(abi.CmdEvent, abi.EventRespSize, get))
	if _, done := blocked.WaitFor(10 * time.Millisecond); done {
		t.Fatal("GET_EVENT with no event queued returned")
	}

	d.Rescan() // nothing changed
	if *changes != 0 {
		t.Fatalf("a rescan with nothing changed reported %d changes", *changes)
	}
	must(t, fab.RemoveDevice(simDevice(t, fab, "sim1"), syscall.EIO))
	d.Rescan()
	wantNodes(t, f, d, run, "ucm0=sim0")
	if *changes != 1 {
		t.Errorf("changes reported: %d, want 1", *changes)
	}
	// Answered by the daemon's shutdown of the file, or by the kernel's
	// abort of the channel if the daemon had not read it yet: ECONNABORTED
	// either way.
	if r, done := blocked.WaitFor(waitFor); !done {
		t.Fatal("GET_EVENT blocked on the removed device's node was not woken")
	} else if r.Errno != unix.ECONNABORTED {
		t.Errorf("GET_EVENT blocked on the removed device's node: errno %v, want ECONNABORTED", r.Errno)
	}
	if _, err := c.CreateID(5); conformance.Errno(err) != unix.ENOTCONN {
		t.Errorf("a command on the removed device's file: %v, want ENOTCONN", err)
	}
	if !strings.Contains(logs.String(), "stopped serving an RDMA device") || !strings.Contains(logs.String(), "dev=sim1") {
		t.Errorf("the removal is not logged:\n%s", logs.String())
	}
	wantRetired(t, d, map[string]uint64{status.RetiredGone: 1})
	// The user's ids went with the file: the same user may make as many
	// on the other node.
	dut0, err := f.DUT("infiniband/ucm0", nil)
	must(t, err)
	c0, err := conformance.NewClient(dut0, false)
	must(t, err)
	defer c0.Close()
	for i := range userIDs {
		if _, err := c0.CreateID(uint64(i)); err != nil {
			t.Fatalf("id %d after the removed node's file was released: %v", i, err)
		}
	}
	if _, err := c0.CreateID(9); conformance.Errno(err) != unix.ENOMEM {
		t.Fatalf("id %d of a user limited to %d: %v, want ENOMEM", userIDs+1, userIDs, err)
	}
	must(t, c0.Close())

	if _, err := fab.AddRoCE("sim1", 1); err != nil {
		t.Fatal(err)
	}
	d.Rescan() // seen once: not yet
	wantNodes(t, f, d, run, "ucm0=sim0")
	d.Rescan()
	wantNodes(t, f, d, run, "ucm0=sim0", "ucm1=sim1")
	p := newPairOn(t, f, run, 1)
	_, ev := p.req(t)
	must(t, p.srv.SendInfo(abi.CmdSendREJ, ev.ID, 28, nil, nil))
	if _, err := p.cli.Expect(abi.CMREJReceived, waitFor); err != nil {
		t.Fatal(err)
	}

	// The lowest free number: with ucm0 gone, a new device takes it.
	must(t, fab.RemoveDevice(simDevice(t, fab, "sim0"), syscall.EIO))
	if _, err := fab.AddRoCE("sim7", 1); err != nil {
		t.Fatal(err)
	}
	d.Rescan()
	wantNodes(t, f, d, run, "ucm1=sim1")
	d.Rescan()
	wantNodes(t, f, d, run, "ucm0=sim7", "ucm1=sim1")
	if *changes != 4 {
		t.Errorf("changes reported: %d, want 4", *changes)
	}
	wantRetired(t, d, map[string]uint64{status.RetiredGone: 2})
}

// wantRetired checks the status's count of devices retired, by reason, and
// its text.
func wantRetired(t *testing.T, d *daemon.Daemon, want map[string]uint64) {
	t.Helper()
	s := d.Snapshot()
	if !maps.Equal(s.Retired, want) {
		t.Errorf("devices retired: %v, want %v", s.Retired, want)
	}
	var b strings.Builder
	must(t, status.WriteText(&b, s))
	if !strings.Contains(b.String(), "RETIRED-DEVICES") {
		t.Errorf("status text without the devices retired:\n%s", b.String())
	}
}

// A device whose every port stopped receiving while it is still listed
// (removed and registered again between two looks, as ib_umad's EIO says)
// is retired and then served afresh.
func TestHotplugStoppedPortsReserved(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	d, _, _ := hotplugDaemon(t, f, run, daemon.Config{SimDevices: 2})
	simDevice(t, d.SimFabric(), "sim0").Port(1).FailReceive(errors.New("read /dev/infiniband/umad0: input/output error"))
	for deadline := time.Now().Add(waitFor); d.Snapshot().Devices[0].Ports[0].State != "STOPPED"; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the port did not stop")
		}
	}
	d.Rescan()
	wantNodes(t, f, d, run, "ucm1=sim1")
	d.Rescan()
	wantNodes(t, f, d, run, "ucm0=sim0", "ucm1=sim1")
	if st := d.Snapshot().Devices[0].Ports[0]; st.State != "ACTIVE" || st.ReceiveError != "" {
		t.Errorf("port of the device served again: %+v", st)
	}
	wantRetired(t, d, map[string]uint64{status.RetiredPortsStopped: 1})
	newPair(t, f, run).reject(t)
}

// A device that cannot be served (the kernel's CM owns its CM class) is
// not served, is logged once as a warning, and is tried again later; the
// other devices keep serving.
func TestHotplugRefusedDevice(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	d, logs, changes := hotplugDaemon(t, f, run, daemon.Config{SimDevices: 1})
	if _, err := d.SimFabric().AddDevice(sim.DeviceConfig{Name: "taken", Ports: []sim.PortConfig{{LinkLayer: 0, KernelCM: true}}}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		d.Rescan()
	}
	wantNodes(t, f, d, run, "ucm0=sim0")
	if n := strings.Count(logs.String(), "cannot serve an RDMA device"); n != 1 {
		t.Errorf("%d warnings for the refused device, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "dev=taken") {
		t.Errorf("the warning does not name the device:\n%s", logs.String())
	}
	if *changes != 0 {
		t.Errorf("changes reported: %d, want 0", *changes)
	}
	newPair(t, f, run).reject(t)

	// Status shows it, with the reason, and the text has a row for it.
	snap := fetch(t, run)
	if len(snap.Unserved) != 1 || snap.Unserved[0].Name != "taken" || !strings.Contains(snap.Unserved[0].Reason, "already in use") ||
		snap.Unserved[0].Since.IsZero() || snap.Unserved[0].NextTry.Before(snap.Unserved[0].Since) {
		t.Fatalf("status unserved: %+v", snap.Unserved)
	}
	var text bytes.Buffer
	must(t, status.WriteText(&text, snap))
	if !regexp.MustCompile(`(?m)^NOT-SERVED .*\n^taken .*already in use`).MatchString(text.String()) {
		t.Errorf("text lacks the unserved device:\n%s", text.String())
	}
	// Gone from the machine, gone from the status.
	must(t, d.SimFabric().RemoveDevice(simDevice(t, d.SimFabric(), "taken"), syscall.EIO))
	d.Rescan()
	if un := d.Snapshot().Unserved; len(un) != 0 {
		t.Errorf("unserved after the device went: %+v", un)
	}
}

// A rescan reads the devices only when their listing changed, a device
// not served is due for a try, a port stopped, or every FullLookEvery
// looks; otherwise what the last full look found stands (82 rxe devices
// cost 330 sysfs opens a look).
func TestHotplugLooksWhenListingChanges(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	d, _, _ := hotplugDaemon(t, f, run, daemon.Config{SimDevices: 1})
	fab := d.SimFabric()
	full := func(want int64, what string) {
		t.Helper()
		if got := d.FullLooks(); got != want {
			t.Fatalf("%s: %d full looks, want %d", what, got, want)
		}
	}
	d.Rescan()
	full(1, "the first rescan")
	for range daemon.FullLookEvery - 1 {
		d.Rescan()
	}
	full(1, "nothing changed")
	d.Rescan()
	full(2, "FullLookEvery looks")
	d.RescanForced()
	full(3, "a forced look")

	// Added: a full look sees it, the next (settling) one serves it.
	if _, err := fab.AddRoCE("sim1", 1); err != nil {
		t.Fatal(err)
	}
	d.Rescan()
	d.Rescan()
	full(5, "a device added and served")
	wantNodes(t, f, d, run, "ucm0=sim0", "ucm1=sim1")
	d.Rescan()
	full(5, "served")

	// Refused: tried on the look that settles it, then not read again
	// until its retry delay has passed.
	if _, err := fab.AddDevice(sim.DeviceConfig{Name: "taken", Ports: []sim.PortConfig{{KernelCM: true}}}); err != nil {
		t.Fatal(err)
	}
	d.Rescan()
	d.Rescan()
	full(7, "a device added and refused")
	if un := d.Snapshot().Unserved; len(un) != 1 || un[0].Name != "taken" {
		t.Fatalf("unserved: %+v", un)
	}
	d.Rescan()
	full(7, "a refused device waiting for its retry")

	// Stopped ports are seen without a full look.
	simDevice(t, fab, "sim1").Port(1).FailReceive(errors.New("read /dev/infiniband/umad1: input/output error"))
	for deadline := time.Now().Add(waitFor); d.Snapshot().Devices[1].Ports[0].State != "STOPPED"; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the port did not stop")
		}
	}
	d.Rescan()
	full(7, "a port stopped")
	wantNodes(t, f, d, run, "ucm0=sim0")
	d.Rescan() // still listed: settled, served again
	full(8, "a device served again")
	wantNodes(t, f, d, run, "ucm0=sim0", "ucm1=sim1")

	// Removed.
	must(t, fab.RemoveDevice(simDevice(t, fab, "sim0"), syscall.EIO))
	d.Rescan()
	full(9, "a device removed")
	wantNodes(t, f, d, run, "ucm1=sim1")
}

// A daemon that rescans serves a device whose CUSE channel the kernel
// aborted again on a new one, and keeps running: the other nodes' clients
// keep their files and ids, and Failed reports nothing.
func TestHotplugChannelFailure(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	// No rescan but the one the failure kicks: the device, unchanged, is
	// served again in it, without settling.
	d, changed := watchingDaemon(t, f, run, 2, time.Hour)
	c0 := client(t, f, "infiniband/ucm0")
	if _, err := c0.CreateID(1); err != nil {
		t.Fatal(err)
	}
	c1 := client(t, f, "infiniband/ucm1")
	if _, err := c1.CreateID(2); err != nil {
		t.Fatal(err)
	}
	old := f.Channel("infiniband/ucm1")
	old.Fail(errors.New("connection aborted"))
	nextChange(t, changed, 2, "ucm1's channel failed")
	wantNodes(t, f, d, run, "ucm0=sim0", "ucm1=sim1")
	if f.Channel("infiniband/ucm1") == old {
		t.Fatal("ucm1 is served on the channel that failed")
	}
	wantRetired(t, d, map[string]uint64{status.RetiredChannelFailed: 1})
	select {
	case err := <-d.Failed():
		t.Fatalf("Failed: %v", err)
	default:
	}
	// ucm0's file and id are as they were; the new ucm1 serves.
	if _, err := c0.CreateID(3); err != nil {
		t.Fatal(err)
	}
	if files := d.Snapshot().Devices[0].Files; len(files) != 1 || len(files[0].IDs) != 2 {
		t.Errorf("ucm0's files after ucm1's channel failed: %+v", files)
	}
	if _, err := client(t, f, "infiniband/ucm1").CreateID(4); err != nil {
		t.Fatal(err)
	}
}

// watchingDaemon starts a sim daemon of n devices that rescans by itself
// every interval; each change's nodes arrive on the channel.
func watchingDaemon(t *testing.T, f *daemontest.Fake, run string, n int, every time.Duration) (*daemon.Daemon, <-chan []string) {
	t.Helper()
	changed := make(chan []string, 4)
	cfg := f.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: n, RuntimeDir: run, Logger: quiet(),
		Rescan: every, Changed: func(d *daemon.Daemon) {
			select {
			case changed <- d.Nodes():
			default: // the test reads one change
			}
		}})
	d, err := daemon.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, changed
}

// nextChange waits for a change of the nodes served, of want nodes.
func nextChange(t *testing.T, changed <-chan []string, want int, what string) {
	t.Helper()
	select {
	case nodes := <-changed:
		if len(nodes) != want {
			t.Errorf("nodes after %s: %v, want %d", what, nodes, want)
		}
	case <-time.After(waitFor):
		t.Fatalf("no change of the nodes after %s", what)
	}
}

// With Config.Rescan the daemon looks by itself, and Close stops it.
func TestHotplugRescanLoop(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	d, changed := watchingDaemon(t, f, run, 1, time.Millisecond)
	if _, err := d.SimFabric().AddRoCE("sim1", 1); err != nil {
		t.Fatal(err)
	}
	nextChange(t, changed, 2, "a device was added")
	wantNodes(t, f, d, run, "ucm0=sim0", "ucm1=sim1")
	d.Close()
	if _, err := d.SimFabric().AddRoCE("sim2", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if len(d.Nodes()) != 2 {
		t.Errorf("a device added after Close was served: %v", d.Nodes())
	}
}

// A port that stops receiving starts a rescan at once: a removed device
// is retired without waiting for the next interval.
func TestHotplugRemovalRescansAtOnce(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	d, changed := watchingDaemon(t, f, run, 2, time.Hour)
	must(t, d.SimFabric().RemoveDevice(simDevice(t, d.SimFabric(), "sim1"), syscall.EIO))
	nextChange(t, changed, 1, "a device was removed")
	wantNodes(t, f, d, run, "ucm0=sim0")
}

// Every device gets Config.IdleReaders waiting readers, also one that
// appears after cmd/ucmd added Ps for the first ones: readers sized from
// GOMAXPROCS then would take a P each of those added for others.
func TestHotplugIdleReaders(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(base)
	f := daemontest.New(t)
	run := t.TempDir()
	d, _, _ := hotplugDaemon(t, f, run, daemon.Config{SimDevices: 1, IdleReaders: 3})
	blocked := func(devName string) int {
		t.Helper()
		c := f.Channel(devName)
		if c == nil {
			t.Fatalf("no channel %s", devName)
		}
		return c.MaxBlockedReaders()
	}
	if got := blocked("infiniband/ucm0"); got != 4 {
		t.Fatalf("ucm0: %d readers may block, want 4", got)
	}
	runtime.GOMAXPROCS(base + 20) // as ucmd serve raises it for ucm0's readers
	if _, err := d.SimFabric().AddRoCE("sim5", 1); err != nil {
		t.Fatal(err)
	}
	d.Rescan()
	d.Rescan()
	wantNodes(t, f, d, run, "ucm0=sim0", "ucm1=sim5")
	if got := blocked("infiniband/ucm1"); got != 4 {
		t.Errorf("ucm1, served with GOMAXPROCS %d: %d readers may block, want 4", runtime.GOMAXPROCS(0), got)
	}
}

// A device whose node could not be registered keeps no metrics series:
// each try would otherwise leave its setup histograms behind, for good
// once the device is gone.
func TestHotplugRefusedNodeLeavesNoSeries(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	d, logs, _ := hotplugDaemon(t, f, run, daemon.Config{SimDevices: 1, MetricsListen: "127.0.0.1:0"})
	f.Refuse = func(c cuse.Config) error {
		if c.DevName == "infiniband/ucm1" {
			return syscall.EBUSY
		}
		return nil
	}
	if _, err := d.SimFabric().AddDevice(sim.DeviceConfig{Name: "refused", Ports: []sim.PortConfig{{}}}); err != nil {
		t.Fatal(err)
	}
	d.Rescan() // sees it
	d.Rescan() // the same: serves it, or tries to
	if un := d.Snapshot().Unserved; len(un) != 1 || un[0].Name != "refused" {
		t.Fatalf("unserved %+v, want the refused device; log:\n%s", un, logs)
	}
	fams := scrape(t, d.MetricsAddr())
	if ms := metricstest.Find(fams, "ucmd_connection_setup_duration_seconds", "device=refused"); len(ms) != 0 {
		t.Errorf("%d setup series of a device never served", len(ms))
	}
	if ms := metricstest.Find(fams, "ucmd_connection_setup_duration_seconds", "device=sim0"); len(ms) == 0 {
		t.Error("no setup series of the device served")
	}
}
