package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad"
	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
	"github.com/ucmd/ucmd/internal/status"
	"github.com/ucmd/ucmd/internal/sysclass"
)

// waitFor bounds every wait: a failure timeout, never a synchronisation.
const waitFor = 10 * time.Second

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func start(t testing.TB, f *daemontest.Fake, cfg daemon.Config) *daemon.Daemon {
	t.Helper()
	if cfg.Fabric == "" {
		cfg.Fabric = daemon.FabricSim
	}
	if cfg.RuntimeDir == "" {
		cfg.RuntimeDir = t.TempDir()
	}
	cfg.Logger = quiet()
	d, err := daemon.Start(t.Context(), f.Config(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// client opens node (infiniband/ucm0) of the fake kernel as a conformance
// client, closed when the test ends.
func client(t testing.TB, f *daemontest.Fake, node string) *conformance.Client {
	t.Helper()
	dut, err := f.DUT(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := conformance.NewClient(dut, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func fetch(t testing.TB, runDir string) status.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	snap, err := status.Fetch(ctx, runDir)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// The daemon serves two simulated devices on the fake kernel: nodes with
// their mode, the class tree, commands through a node, the status socket,
// and a shutdown that takes all of it away.
func TestServeOnFakeKernel(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	d := start(t, f, daemon.Config{SimDevices: 2, RuntimeDir: run, Version: "test"})

	want := []string{filepath.Join(f.DevDir, "infiniband/ucm0"), filepath.Join(f.DevDir, "infiniband/ucm1")}
	if got := d.Nodes(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("nodes %v, want %v", got, want)
	}
	for _, n := range want {
		if st, err := os.Stat(n); err != nil || st.Mode().Perm() != 0o666 {
			t.Errorf("%s: %v, %v; want mode 0666", n, st.Mode(), err)
		}
	}
	for i, dev := range []string{"sim0", "sim1"} {
		b, err := os.ReadFile(filepath.Join(sysclass.ClassDir(run), "ucm"+string(rune('0'+i)), "ibdev"))
		if err != nil || string(b) != dev+"\n" {
			t.Errorf("class tree ucm%d/ibdev: %q, %v; want %s", i, b, err, dev)
		}
	}

	c := client(t, f, "infiniband/ucm0")
	id, err := c.CreateID(7)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(id, 0x1234, 0); err != nil {
		t.Fatal(err)
	}

	snap := fetch(t, run)
	if snap.Version != "test" || snap.Fabric != daemon.FabricSim || len(snap.Devices) != 2 {
		t.Fatalf("status: %+v", snap)
	}
	d0 := snap.Devices[0]
	if d0.Name != "sim0" || d0.Node != want[0] || len(d0.Ports) != 1 || d0.Ports[0].LinkLayer != "Ethernet" || d0.Ports[0].GID0 == "" {
		t.Errorf("status of sim0: %+v", d0)
	}
	if len(d0.Files) != 1 || d0.Files[0].PID != daemontest.Tgid || d0.Files[0].Comm != daemontest.ProcessName || len(d0.Files[0].IDs) != 1 {
		t.Fatalf("status of sim0's files: %+v", d0.Files)
	}
	if got := d0.Files[0].IDs[0]; got.ID != id || got.ServiceID != 0x1234 || got.State != "LISTEN" {
		t.Errorf("status of the listening id: %+v", got)
	}
	if len(snap.Devices[1].Files) != 0 {
		t.Errorf("sim1 has files: %+v", snap.Devices[1].Files)
	}
	if _, err := c.DestroyID(id); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sysclass.ClassDir(run)); !os.IsNotExist(err) {
		t.Errorf("class tree after Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if _, err := status.Fetch(ctx, run); err == nil {
		t.Error("status answers after Close")
	}
	if err := f.Channel("infiniband/ucm1").Serve(); !errors.Is(err, cuse.ErrServerClosed) {
		t.Errorf("ucm1's channel after Close: %v", err)
	}
}

// --fixed-numbers registers 231:224+N for ucm0 to ucm31, and the nodes
// past them on one dynamic major, ucmN at minor N-32, as the kernel's ucm
// did.
func TestFixedNumbers(t *testing.T) {
	f := daemontest.New(t)
	start(t, f, daemon.Config{SimDevices: daemon.MaxFixed + 3, SimIB: true, FixedNumbers: true, NodeMode: 0o660})
	for i := range daemon.MaxFixed + 3 {
		name := fmt.Sprintf("infiniband/ucm%d", i)
		want := [2]uint32{daemon.UCMMajor, uint32(daemon.UCMBaseMinor + i)}
		if i >= daemon.MaxFixed {
			want = [2]uint32{254, uint32(i - daemon.MaxFixed)} // the fake's first dynamic major
		}
		if major, minor, _ := f.Number(name); [2]uint32{major, minor} != want {
			t.Errorf("%s registered as %d:%d, want %d:%d", name, major, minor, want[0], want[1])
		}
		if st, err := os.Stat(filepath.Join(f.DevDir, name)); err != nil || st.Mode().Perm() != 0o660 {
			t.Errorf("%s: %v, %v; want --mode 0660", name, st.Mode(), err)
		}
	}
	k := f.Channel("infiniband/ucm1").Kernel
	if k.Init.DevMajor != daemon.UCMMajor || k.Init.DevMinor != daemon.UCMBaseMinor+1 {
		t.Errorf("ucm1's CUSE_INIT reply asked for %d:%d", k.Init.DevMajor, k.Init.DevMinor)
	}
}

// Without --fixed-numbers the first node asks for a dynamic major and the
// others for minors of it, so that any number of nodes take one of the
// kernel's few dynamic majors; a minor of it the kernel refuses gets a
// major of its own; once no node holds a minor of it, the next node asks
// for a dynamic major again.
func TestSharedMajor(t *testing.T) {
	f := daemontest.New(t)
	f.Refuse = func(cfg cuse.Config) error {
		if cfg.Major == 254 && cfg.Minor == 2 {
			return unix.EBUSY // another driver's minor
		}
		return nil
	}
	run := t.TempDir()
	d, _, _ := hotplugDaemon(t, f, run, daemon.Config{SimDevices: 4})
	asked := []uint32{0, 254, 0, 254} // the major of each CUSE_INIT reply that registered
	for i, want := range [][2]uint32{{254, 0}, {254, 1}, {253, 2}, {254, 3}} {
		name := fmt.Sprintf("infiniband/ucm%d", i)
		if major, minor, _ := f.Number(name); [2]uint32{major, minor} != want {
			t.Errorf("%s registered as %d:%d, want %d:%d", name, major, minor, want[0], want[1])
		}
		if k := f.Channel(name).Kernel; k.Init.DevMajor != asked[i] || k.Init.DevMinor != uint32(i) {
			t.Errorf("%s's CUSE_INIT reply asked for %d:%d, want %d:%d", name, k.Init.DevMajor, k.Init.DevMinor, asked[i], i)
		}
	}
	wantNodes(t, f, d, run, "ucm0=sim0", "ucm1=sim1", "ucm2=sim2", "ucm3=sim3")

	// The shared major's nodes go, then a device comes: a fresh dynamic
	// major (the fake, as the kernel, gives the highest free one).
	fab := d.SimFabric()
	for _, name := range []string{"sim0", "sim1", "sim3"} {
		must(t, fab.RemoveDevice(simDevice(t, fab, name), syscall.EIO))
	}
	d.Rescan()
	wantNodes(t, f, d, run, "ucm2=sim2")
	if _, err := fab.AddRoCE("sim9", 1); err != nil {
		t.Fatal(err)
	}
	d.Rescan()
	d.Rescan()
	wantNodes(t, f, d, run, "ucm0=sim9", "ucm2=sim2")
	if k := f.Channel("infiniband/ucm0").Kernel; k.Init.DevMajor != 0 {
		t.Errorf("the first node after the shared major was released asked for major %d, want a dynamic one", k.Init.DevMajor)
	}
	if major, minor, _ := f.Number("infiniband/ucm0"); major != 254 || minor != 0 {
		t.Errorf("ucm0 registered as %d:%d, want 254:0", major, minor)
	}
}

// A preflight failure stops Start before anything is registered.
func TestStartPreflightFails(t *testing.T) {
	f := daemontest.New(t)
	f.Preflight = func() error { return errors.New("missing privileges: CAP_SYS_ADMIN") }
	run := t.TempDir()
	_, err := daemon.Start(t.Context(), f.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: 1, RuntimeDir: run, Logger: quiet()}))
	if err == nil || err.Error() != "missing privileges: CAP_SYS_ADMIN" {
		t.Fatalf("Start: %v", err)
	}
	if f.Channel("infiniband/ucm0") != nil {
		t.Error("a device was registered despite the preflight failure")
	}
	if ents, _ := os.ReadDir(run); len(ents) != 0 {
		t.Errorf("runtime dir after a failed Start: %v", ents)
	}
}

// A refused registration names the node and what to do; the devices
// registered before it are closed again.
func TestStartRegistrationRefused(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{unix.EBUSY, "register /dev/infiniband/ucm1: device or resource busy (the node or device number is taken: another ucmd running?)"},
		{unix.EACCES, "register /dev/infiniband/ucm1: permission denied (opening /dev/cuse needs root or CAP_SYS_ADMIN)"},
		{errors.New("bad"), "register /dev/infiniband/ucm1: bad"},
	} {
		f := daemontest.New(t)
		f.Refuse = func(c cuse.Config) error {
			if c.DevName == "infiniband/ucm1" {
				return tc.err
			}
			return nil
		}
		run := t.TempDir()
		_, err := daemon.Start(t.Context(), f.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: 2, RuntimeDir: run, Logger: quiet()}))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Start: %v, want %q", err, tc.want)
		}
		if err := f.Channel("infiniband/ucm0").Serve(); !errors.Is(err, cuse.ErrServerClosed) {
			t.Errorf("ucm0 after the failed Start: %v, want it closed", err)
		}
		if _, err := os.Stat(filepath.Join(run, status.SocketName)); !os.IsNotExist(err) {
			t.Errorf("status socket after a failed Start: %v", err)
		}
	}
}

// Start gives up waiting for a node when its context ends.
func TestStartNodeNeverAppears(t *testing.T) {
	f := daemontest.New(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := f.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: 1, RuntimeDir: t.TempDir(), Logger: quiet()})
	reg := cfg.Env.Register
	cfg.Env.Register = func(ctx context.Context, c cuse.Config, dev cuse.Device) (daemon.Channel, error) {
		ch, err := reg(ctx, c, dev)
		if err == nil {
			err = os.Remove(filepath.Join(f.DevDir, c.DevName)) // udev never creates it
		}
		cancel()
		return ch, err
	}
	if _, err := daemon.Start(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start: %v, want context.Canceled", err)
	}
	if err := f.Channel("infiniband/ucm0").Serve(); !errors.Is(err, cuse.ErrServerClosed) {
		t.Errorf("ucm0 after the failed Start: %v, want it closed", err)
	}
}

// A runtime directory that cannot be written fails Start, naming the
// flag, before any device is registered.
func TestStartBadRuntimeDir(t *testing.T) {
	f := daemontest.New(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := daemon.Start(t.Context(), f.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: 1, RuntimeDir: file, Logger: quiet()}))
	if err == nil || !strings.Contains(err.Error(), "--runtime-dir "+file) {
		t.Fatalf("Start with a file as the runtime dir: %v", err)
	}
	if c := f.Channel("infiniband/ucm0"); c != nil {
		t.Error("ucm0 registered before the runtime dir was checked")
	}
}

// A second daemon on the same runtime dir (a bare `sudo ucmd` next to the
// service) is refused before it registers anything, and leaves the first
// one's class tree and status socket as they were; once the first stops,
// the dir is free again.
func TestSecondDaemonLeavesTheFirstAlone(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	first := start(t, f, daemon.Config{SimDevices: 1, RuntimeDir: run})
	abiVersion := filepath.Join(sysclass.ClassDir(run), "abi_version")
	for range 2 {
		_, err := daemon.Start(t.Context(), f.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: 1, RuntimeDir: run, Logger: quiet()}))
		if err == nil || !strings.Contains(err.Error(), "--runtime-dir "+run+": another ucmd serves it (pid "+strconv.Itoa(os.Getpid())+" (") {
			t.Fatalf("second daemon on the same runtime dir: %v; want it to name this process as the holder", err)
		}
		if _, err := os.Stat(abiVersion); err != nil {
			t.Fatalf("the first daemon's class tree after the second failed: %v", err)
		}
		if snap := fetch(t, run); len(snap.Devices) != 1 {
			t.Fatalf("status after the second failed: %+v", snap)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	start(t, f, daemon.Config{SimDevices: 1, RuntimeDir: run})
	if _, err := os.Stat(abiVersion); err != nil {
		t.Errorf("class tree of the daemon after the first: %v", err)
	}
}

// With rescans, a device that cannot be served at start is left to them
// and listed as not served, while the others are served; once it can be,
// it is. Without rescans, or when no device can be served, Start fails.
func TestStartServesTheOthers(t *testing.T) {
	f := daemontest.New(t)
	var refuse atomic.Bool
	refuse.Store(true)
	f.Refuse = func(c cuse.Config) error {
		if c.DevName == "infiniband/ucm0" && refuse.Load() {
			return unix.EBUSY
		}
		return nil
	}
	run := t.TempDir()
	d := start(t, f, daemon.Config{SimDevices: 2, RuntimeDir: run, Rescan: 50 * time.Millisecond})
	if got := d.Nodes(); len(got) != 1 || filepath.Base(got[0]) != "ucm1" {
		t.Fatalf("nodes %v, want ucm1 alone", got)
	}
	if un := fetch(t, run).Unserved; len(un) != 1 || un[0].Name != "sim0" || !strings.Contains(un[0].Reason, "register /dev/infiniband/ucm0") {
		t.Fatalf("not served: %+v, want sim0 with its registration's error", un)
	}
	refuse.Store(false)
	// The rescan serves sim0, then rewrites the class tree: wait for both.
	deadline := time.Now().Add(waitFor)
	for len(d.Nodes()) != 2 || strings.Join(classDevices(t, run), " ") != "ucm0=sim0 ucm1=sim1" {
		if time.Now().After(deadline) {
			t.Fatalf("sim0 not served at ucm0 after the refusal ended: nodes %v, class tree %v, not served %+v",
				d.Nodes(), classDevices(t, run), d.Snapshot().Unserved)
		}
		time.Sleep(10 * time.Millisecond)
	}

	for _, cfg := range []daemon.Config{
		{SimDevices: 2}, // no rescans
		{SimDevices: 1, Rescan: 50 * time.Millisecond}, // nothing served
	} {
		f := daemontest.New(t)
		f.Refuse = func(c cuse.Config) error {
			if c.DevName == "infiniband/ucm0" {
				return unix.EBUSY
			}
			return nil
		}
		cfg.Fabric, cfg.RuntimeDir, cfg.Logger = daemon.FabricSim, t.TempDir(), quiet()
		if d, err := daemon.Start(t.Context(), f.Config(cfg)); err == nil || !strings.Contains(err.Error(), "register /dev/infiniband/ucm0") {
			if d != nil {
				d.Close()
			}
			t.Errorf("Start %+v with ucm0 refused: %v, want its error", cfg, err)
		}
	}
}

// Without rescans, a channel the kernel aborts is reported on Failed,
// once: the daemon is to exit and be restarted.
func TestChannelFailure(t *testing.T) {
	f := daemontest.New(t)
	d := start(t, f, daemon.Config{SimDevices: 2})
	abort := errors.New("connection aborted")
	f.Channel("infiniband/ucm1").Fail(abort)
	select {
	case err := <-d.Failed():
		if !errors.Is(err, abort) || !strings.Contains(err.Error(), "/dev/infiniband/ucm1: CUSE channel failed") {
			t.Errorf("Failed: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("no failure reported")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// Bad fabric flags fail Start before the machine is looked at.
func TestStartFabricErrors(t *testing.T) {
	f := daemontest.New(t)
	f.Preflight = func() error { t.Error("preflight ran"); return nil }
	for _, cfg := range []daemon.Config{
		{Fabric: "ib"},
		{Fabric: daemon.FabricSim, SimDevices: 0},
	} {
		cfg.RuntimeDir = t.TempDir()
		cfg.Logger = quiet()
		if _, err := daemon.Start(t.Context(), f.Config(cfg)); err == nil {
			t.Errorf("Start(%+v) succeeded", cfg)
		}
	}
}

// FirstPort names a device it does not find.
func TestFirstPortUnknown(t *testing.T) {
	if _, err := daemon.FirstPort("ucmd-no-such-device"); err == nil {
		t.Fatal("FirstPort of a missing device succeeded")
	}
}

// Each umad endpoint's receive queue is small unless asked otherwise:
// umad's own default (4,096 slots) cost about 0.6 MB of RSS per port.
func TestStartUMADQueueLen(t *testing.T) {
	f := daemontest.New(t)
	if got := start(t, f, daemon.Config{SimDevices: 1}).UMADOptions().QueueLen; got != daemon.UMADQueueLen {
		t.Errorf("umad queue length by default: %d, want %d", got, daemon.UMADQueueLen)
	}
	if daemon.UMADQueueLen >= umad.DefaultQueueLen {
		t.Errorf("the daemon's umad queue (%d) is not below umad's default (%d)", daemon.UMADQueueLen, umad.DefaultQueueLen)
	}
	f = daemontest.New(t)
	cfg := daemon.Config{SimDevices: 1}
	cfg.UMAD.QueueLen = 500
	if got := start(t, f, cfg).UMADOptions().QueueLen; got != 500 {
		t.Errorf("umad queue length asked for 500: %d", got)
	}
}

// barrierChannel's Close waits, up to waitFor, until every channel's
// Close has begun, and counts those that saw them all begin.
type barrierChannel struct {
	daemon.Channel
	n           int32
	started     *atomic.Int32
	all         chan struct{}
	overlapping *atomic.Int32
}

func (c *barrierChannel) Close() error {
	if c.started.Add(1) == c.n {
		close(c.all)
	}
	select {
	case <-c.all:
		c.overlapping.Add(1)
	case <-time.After(waitFor):
	}
	return c.Channel.Close()
}

// Close closes the devices' servers together: one whose clients' copies
// hang waits its grace for them (5 s), and one after another the waits
// would add up.
func TestCloseClosesServersTogether(t *testing.T) {
	const n = 3
	f := daemontest.New(t)
	cfg := f.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: n, RuntimeDir: t.TempDir(), Logger: quiet()})
	var started, overlapping atomic.Int32
	all := make(chan struct{})
	register := cfg.Env.Register
	cfg.Env.Register = func(ctx context.Context, cc cuse.Config, dev cuse.Device) (daemon.Channel, error) {
		ch, err := register(ctx, cc, dev)
		if err != nil {
			return nil, err
		}
		return &barrierChannel{Channel: ch, n: n, started: &started, all: all, overlapping: &overlapping}, nil
	}
	d, err := daemon.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if got := overlapping.Load(); got != n {
		t.Errorf("%d of %d servers' closes overlapped the others', want all", got, n)
	}
}

// Start's error says the kernel CM is in the way (ucmd serve exits 69,
// which the unit does not restart) only when it is for every device: a
// device that failed otherwise may serve after a restart.
func TestStartErrorKernelCMOnlyWhenAllAre(t *testing.T) {
	f := daemontest.New(t)
	taken := fmt.Errorf("register: %w", hw.ErrCMClassInUse)
	for _, c := range []struct {
		name   string
		refuse func(cuse.Config) error
		kernel bool
	}{
		{"one taken, one busy", func(c cuse.Config) error {
			if c.DevName == "infiniband/ucm0" {
				return taken
			}
			return syscall.EBUSY
		}, false},
		{"both taken", func(cuse.Config) error { return taken }, true},
	} {
		f.Refuse = c.refuse
		_, err := daemon.Start(t.Context(), f.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: 2, Rescan: time.Hour, RuntimeDir: t.TempDir(), Logger: quiet()}))
		if err == nil || daemon.KernelCMInTheWay(err) != c.kernel {
			t.Errorf("%s: Start: %v, kernel CM in the way %v, want %v", c.name, err, daemon.KernelCMInTheWay(err), c.kernel)
		}
	}
}
