package daemon

import (
	"context"
	"fmt"
	"golang.org/x/sys/unix"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/hw/umad"
	"github.com/ucmd/ucmd/internal/status"
	"github.com/ucmd/ucmd/internal/syncbuf"
)

func TestSimDevices(t *testing.T) {
	d := &Daemon{cfg: Config{Fabric: FabricSim, SimDevices: 3}}
	devs, err := d.devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 3 || devs[0].Name() != "sim0" || devs[2].Name() != "sim2" {
		t.Fatalf("sim devices: %v", devs)
	}
	a, err := devs[1].Ports()[0].Attr()
	if err != nil || a.LinkLayer.String() != "Ethernet" || len(a.GIDs) == 0 {
		t.Fatalf("sim port: %+v %v", a, err)
	}
	d = &Daemon{cfg: Config{Fabric: FabricSim, SimDevices: 1, SimIB: true}}
	devs, err = d.devices()
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := devs[0].Ports()[0].Attr(); a.LinkLayer.String() != "InfiniBand" || a.LID == 0 {
		t.Fatalf("--sim-ib port: %+v", a)
	}
}

// Configuration mistakes say what to do.
func TestDeviceErrors(t *testing.T) {
	empty := t.TempDir()
	if err := os.MkdirAll(filepath.Join(empty, "class/infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(empty, "class/infiniband_mad"), 0o755); err != nil {
		t.Fatal(err)
	}
	noUMAD := t.TempDir() // a device, but ib_umad not loaded
	if err := os.MkdirAll(filepath.Join(noUMAD, "class/infiniband/mlx5_0/ports/1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noUMAD, "class/infiniband/mlx5_0/node_guid"), []byte("0002:c903:0010:1234\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Fabric: "ib"}, `unknown fabric "ib"`},
		{Config{Fabric: FabricSim, SimDevices: 0}, "--sim-devices"},
		{Config{Fabric: FabricUMAD, UMAD: umad.Options{SysfsRoot: empty}}, "no RDMA device on this host"},
		{Config{Fabric: FabricUMAD, UMAD: umad.Options{SysfsRoot: noUMAD}}, "(mlx5_0 have none): load ib_umad (modprobe ib_umad)"},
		{Config{Fabric: FabricUMAD, Devices: []string{"mlx5_9"}, UMAD: umad.Options{SysfsRoot: empty}}, `"mlx5_9" not found`},
	} {
		d := &Daemon{cfg: tc.cfg}
		_, err := d.devices()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to mention %q", tc.cfg, err, tc.want)
		}
	}
}

func TestFormatGUID(t *testing.T) {
	if got := formatGUID(0x0002c90300101234); got != "0002:c903:0010:1234" {
		t.Errorf("formatGUID = %s", got)
	}
}

func TestMADCountersKeepSendFailuresApart(t *testing.T) {
	got := madCounters(cmcore.Stats{Sent: 9, SendErrors: 2, Received: 7, Dropped: 1, Retransmitted: 3, TimedOut: 4})
	want := status.MADCounter{Sent: 9, Received: 7, Retransmitted: 3, TimedOut: 4, Dropped: 1, SendFailed: 2}
	if got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
}

// Yama's ptrace_scope 3 stops every pointer copy: preflight says so.
func TestPreflightYama(t *testing.T) {
	dir := t.TempDir()
	for scope, refused := range map[string]bool{"0\n": false, "1\n": false, "2\n": false, "3\n": true} {
		p := filepath.Join(dir, "ptrace_scope")
		if err := os.WriteFile(p, []byte(scope), 0o644); err != nil {
			t.Fatal(err)
		}
		err := checkYama(p)
		if refused != (err != nil) {
			t.Errorf("ptrace_scope %q: %v", scope, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "ptrace_scope is 3") || !strings.Contains(err.Error(), "EFAULT")) {
			t.Errorf("ptrace_scope 3: error does not say what it breaks: %v", err)
		}
	}
	if err := checkYama(filepath.Join(dir, "none")); err != nil {
		t.Errorf("no Yama: %v", err)
	}
}

// A --device that does not exist is reported as such before the
// environment (/dev/cuse, privileges) is looked at.
func TestStartChecksDeviceFlagFirst(t *testing.T) {
	empty := t.TempDir()
	for _, d := range []string{"class/infiniband", "class/infiniband_mad"} {
		if err := os.MkdirAll(filepath.Join(empty, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Start(t.Context(), Config{Fabric: FabricUMAD, Devices: []string{"nope"}, UMAD: umad.Options{SysfsRoot: empty}, RuntimeDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `--device: RDMA device "nope" not found`) {
		t.Fatalf("Start with --device nope: %v", err)
	}
}

// --wait-devices waits, then says what it waited for.
func TestWaitDevicesTimesOut(t *testing.T) {
	empty := t.TempDir()
	for _, d := range []string{"class/infiniband", "class/infiniband_mad"} {
		if err := os.MkdirAll(filepath.Join(empty, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := &Daemon{log: slog.New(slog.DiscardHandler), cfg: Config{Fabric: FabricUMAD, WaitDevices: 300 * time.Millisecond, UMAD: umad.Options{SysfsRoot: empty}}}
	start := time.Now()
	_, err := d.waitDevices(t.Context())
	if el := time.Since(start); err == nil || !strings.Contains(err.Error(), "after waiting 300ms: no RDMA device") || el < 300*time.Millisecond {
		t.Fatalf("after %v: %v", el, err)
	}
	d.cfg.Fabric = "bogus" // not a device that is missing: no waiting
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a wait would end at once with the context's error
	if _, err := d.waitDevices(ctx); err == nil || !strings.Contains(err.Error(), `unknown fabric "bogus"`) {
		t.Fatalf("bogus fabric: %v, want the fabric's error (not a wait's)", err)
	}
}

// While --wait-devices waits for a --device, the log says what is
// missing and what is there, at once and whenever that changes: a
// misspelled name shows before the wait ends.
func TestWaitDevicesSaysWhatIsMissing(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{"class/infiniband", "class/infiniband_mad"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var log syncbuf.Buffer
	d := &Daemon{log: slog.New(slog.NewTextHandler(&log, nil)), cfg: Config{
		Fabric: FabricUMAD, Devices: []string{"mlx5_O"}, WaitDevices: time.Minute,
		UMAD: umad.Options{SysfsRoot: root},
	}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := d.waitDevices(ctx); done <- err }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), `\"mlx5_O\" not found (devices with umad ports: none`) {
		if time.Now().After(deadline) {
			t.Fatalf("no line saying what is missing at the start of the wait:\n%s", log.String())
		}
		time.Sleep(time.Millisecond)
	}
	// mlx5_0 appears, with its umad port: the name asked for is still missing.
	addDevice(t, root, "mlx5_0", "fe80:0000:0000:0000:0002:c903:0000:0001")
	withUMAD0(t, root, "mlx5_0")
	for !strings.Contains(log.String(), `still waiting for RDMA devices with umad ports" missing="--device: RDMA device \"mlx5_O\" not found (devices with umad ports: mlx5_0`) {
		if time.Now().After(deadline) {
			t.Fatalf("no line saying mlx5_0 is there and mlx5_O is not:\n%s", log.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// addDevice puts fakeSysfs's device dev into the tree at root.
func addDevice(t *testing.T, root, dev, gid0 string) {
	t.Helper()
	from := fakeSysfs(t, dev, gid0)
	if err := os.Rename(filepath.Join(from, "class/infiniband", dev), filepath.Join(root, "class/infiniband", dev)); err != nil {
		t.Fatal(err)
	}
}

// withUMAD0 gives dev's port 1 the umad device umad0 in the tree at root.
func withUMAD0(t *testing.T, root, dev string) {
	t.Helper()
	for name, v := range map[string]string{
		"class/infiniband_mad/abi_version": "5",
		"class/infiniband_mad/umad0/ibdev": dev,
		"class/infiniband_mad/umad0/port":  "1",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A device without umad ports (iWARP: no IB CM, and ib_ucm made no node
// for it) is not served and stops nothing: the others are, and naming it
// says why it cannot be.
func TestDevicesWithoutUMADSkipped(t *testing.T) {
	root := fakeSysfs(t, "rxe0", "fe80:0000:0000:0000:0002:c903:0000:0001")
	addDevice(t, root, "siw0", "fe80:0000:0000:0000:0002:c903:0000:0002")
	withUMAD0(t, root, "rxe0")
	d := &Daemon{cfg: Config{Fabric: FabricUMAD, UMAD: umad.Options{SysfsRoot: root}}}
	devs, err := d.devices()
	if err != nil || len(devs) != 1 || devs[0].Name() != "rxe0" {
		var names []string
		for _, dev := range devs {
			names = append(names, dev.Name())
		}
		t.Fatalf("devices %v, %v; want rxe0 alone", names, err)
	}
	d.cfg.Devices = []string{"siw0"}
	if _, err := d.devices(); err == nil || !strings.Contains(err.Error(), `"siw0" has no umad ports`) || !strings.Contains(err.Error(), "devices with umad ports: rxe0") {
		t.Errorf("--device siw0: %v", err)
	}
}

// --status-group takes a number as the gid itself, listed in /etc/group
// or not (a directory service's group, which a binary without cgo cannot
// look up); a name must be found.
func TestStatusOptions(t *testing.T) {
	for _, g := range []string{"4242", "0"} {
		opts, err := statusOptions(g)
		if err != nil || len(opts) != 1 {
			t.Errorf("statusOptions(%q) = %d options, %v", g, len(opts), err)
		}
	}
	for _, g := range []string{"no-such-group-ucmd", "-1", "99999999999"} {
		if _, err := statusOptions(g); err == nil || !strings.Contains(err.Error(), "--status-group") {
			t.Errorf("statusOptions(%q): %v", g, err)
		}
	}
	if opts, err := statusOptions(""); err != nil || opts != nil {
		t.Errorf("statusOptions(\"\") = %v, %v", opts, err)
	}
}

// A --runtime-dir that cannot be made is refused by its flag's name
// before anything is served.
func TestCheckRuntimeDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkRuntimeDir(filepath.Join(file, "run")); err == nil || !strings.Contains(err.Error(), "--runtime-dir "+file+"/run") {
		t.Errorf("runtime dir under a file: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := checkRuntimeDir(dir); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("after the check: %v entries, %v; want an empty directory", len(ents), err)
	}
}

type countingObserver struct{ n int }

func (c *countingObserver) ObserveMAD(*cmcore.MADEvent) { c.n++ }

// A device's CM observations reach the observers until the device is let
// go, and none after: a late one (a send the CM's Close did not wait for)
// would make a forgotten device's metrics series again.
func TestObserverGate(t *testing.T) {
	c := &countingObserver{}
	g := &observerGate{obs: c}
	g.ObserveMAD(&cmcore.MADEvent{})
	if c.n != 1 || !g.WantsTime() {
		t.Fatalf("an open gate passed %d events, wants time %v", c.n, g.WantsTime())
	}
	g.close()
	g.ObserveMAD(&cmcore.MADEvent{})
	if c.n != 1 || g.WantsTime() {
		t.Errorf("a closed gate passed %d events, wants time %v", c.n, g.WantsTime())
	}
}

// Closing the gate waits for an observation that passed it before: the
// device's series are forgotten right after, and it would make them again.
func TestObserverGateWaitsForObservation(t *testing.T) {
	in, release := make(chan struct{}), make(chan struct{})
	c := &countingObserver{}
	g := &observerGate{obs: blockingObserver{in: in, release: release, next: c}}
	go g.ObserveMAD(&cmcore.MADEvent{})
	<-in // the observation passed the gate and is under way
	closed := make(chan struct{})
	go func() {
		g.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("close returned while an observation was under way")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if c.n != 1 {
		t.Errorf("observations made: %d, want 1", c.n)
	}
}

// An observer may call the CM, whose sends observe again on the same
// goroutine: with the gate closing meanwhile, the inner observation is
// dropped and the outer one ends, where a read lock taken twice would
// deadlock.
func TestObserverGateReentered(t *testing.T) {
	in, release := make(chan struct{}), make(chan struct{})
	c := &countingObserver{}
	g := &observerGate{}
	g.obs = blockingObserver{in: in, release: release, next: observerFunc(func(ev *cmcore.MADEvent) {
		c.ObserveMAD(ev)
		g.ObserveMAD(ev) // a send from inside the observation
	})}
	go g.ObserveMAD(&cmcore.MADEvent{})
	<-in
	closed := make(chan struct{})
	go func() {
		g.close()
		close(closed)
	}()
	for !g.off.Load() {
		time.Sleep(time.Millisecond)
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close never returned: the reentered observation deadlocked")
	}
	if c.n != 1 {
		t.Errorf("observations made: %d, want 1", c.n)
	}
}

type observerFunc func(*cmcore.MADEvent)

func (f observerFunc) ObserveMAD(ev *cmcore.MADEvent) { f(ev) }

// blockingObserver signals in and waits for release before passing an
// event on.
type blockingObserver struct {
	in, release chan struct{}
	next        cmcore.Observer
}

func (b blockingObserver) ObserveMAD(ev *cmcore.MADEvent) {
	close(b.in)
	<-b.release
	b.next.ObserveMAD(ev)
}

// A runtime dir still locked by a daemon that has exited but for threads
// stuck in a copy (state D) says so, and what lets them go.
func TestLockHolderStuckThreads(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	proc := t.TempDir()
	write := func(rel, v string) {
		t.Helper()
		p := filepath.Join(proc, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("locks", fmt.Sprintf("1: POSIX  ADVISORY  WRITE 99 00:00:1 0 EOF\n2: FLOCK  ADVISORY  WRITE 4321 %02x:%02x:%d 0 EOF\n",
		unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino))
	write("4321/comm", "ucmd\n")
	write("4321/stat", "4321 (ucmd) Z 1 4321 4321 0 -1\n")
	write("4321/task/4321/stat", "4321 (ucmd) Z 1\n")
	write("4321/task/4330/stat", "4330 (ucmd) D 1\n")
	got := lockHolder(proc, f)
	for _, want := range []string{"pid 4321 (ucmd) has exited", "threads 4330 in uninterruptible sleep", "docs/cuse.md §3", "FUSE server"} {
		if !strings.Contains(got, want) {
			t.Errorf("lockHolder: %q, want %q in it", got, want)
		}
	}
	write("4321/stat", "4321 (ucmd) S 1 4321 4321 0 -1\n") // alive: a thread in D for a moment is normal
	if got := lockHolder(proc, f); got != "pid 4321 (ucmd); ucmd status shows it" {
		t.Errorf("lockHolder of a live daemon: %q", got)
	}
	write("locks", "") // the holder in a pid namespace we cannot see, say
	if got := lockHolder(proc, f); got != "ucmd status shows it" {
		t.Errorf("lockHolder with no lock listed: %q", got)
	}
}
