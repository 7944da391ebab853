// Package daemon assembles ucmd: for every RDMA device served, a CM (cmcore)
// on the device's ports (hw/umad or hw/sim), a ucm device on top, and a CUSE
// server that makes it /dev/infiniband/ucmN; plus the infiniband_cm class
// tree for `ucmd exec` and the status socket.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/hw/umad"
	"github.com/ucmd/ucmd/internal/metrics"
	"github.com/ucmd/ucmd/internal/status"
	"github.com/ucmd/ucmd/internal/sysclass"
	"github.com/ucmd/ucmd/internal/trace"
	"github.com/ucmd/ucmd/ucm"
)

// Fabric names.
const (
	FabricUMAD = "umad"
	FabricSim  = "sim"
)

// Config is what `ucmd serve` asks for.
type Config struct {
	Fabric     string   // FabricUMAD (real HCAs) or FabricSim
	Devices    []string // umad: serve only these RDMA devices; empty means all
	SimDevices int      // sim: how many devices
	SimIB      bool     // sim: InfiniBand ports instead of RoCE
	// WaitDevices (umad) is how long Start waits for the devices to appear
	// (every one of Devices, else at least one): at boot, ucmd may start
	// before the HCA driver or ib_umad has registered them.
	WaitDevices time.Duration
	// Rescan is how often the daemon looks for RDMA devices added,
	// removed or replaced while it runs (hotplug.go): a new one gets the
	// lowest free ucmN, a removed one loses its node. 0 never looks.
	Rescan time.Duration
	// Changed, if set, is called after a rescan changed the nodes served,
	// on the rescan's goroutine (cmd/ucmd re-sizes GOMAXPROCS from it).
	Changed func(*Daemon)
	// IdleReaders is every device's cuse.Config.IdleReaders: the same for
	// a device served at start and one that appears later, whatever
	// GOMAXPROCS is by then. 0 is cuse's default.
	IdleReaders int
	// FixedNumbers registers ucm0 to ucm31 as 231:224+N like the kernel
	// did, so a static udev rule or mknod keeps working; the other nodes
	// share one major the kernel picks (devnum.go).
	FixedNumbers bool
	NodeMode     os.FileMode // of /dev/infiniband/ucmN; the kernel used 0666
	DevDir       string      // "/dev"
	RuntimeDir   string
	// StatusGroup (a group name or number) may read the status socket
	// besides root; "" keeps it root-only.
	StatusGroup string
	Limits      ucm.Limits
	// AutoMRA is every CM's cmcore.Options.AutoMRA: the service timeout
	// (5-bit IBTA time) of the MRA the CM sends by itself for a
	// retransmitted REQ whose connection still waits for its application,
	// as rdma_cm's delayed MRA; 0 (the default) sends none, as ib_cm.
	AutoMRA uint8
	// Observers see every CM MAD of every device (cmcore.Options.Observer,
	// fanned out by cmcore.Observers in this order): metrics, tests. Each
	// must not block (cmcore.Observer); MADEvent.Device tells the devices
	// apart.
	Observers []cmcore.Observer
	// MetricsListen (HOST:PORT) serves the Prometheus metrics at
	// /metrics (package metrics); "" serves none and attaches no
	// metrics observer.
	MetricsListen string
	Version       string
	Logger        *slog.Logger

	// UMAD overrides discovery options (tests).
	UMAD umad.Options
	// Env is the machine: the zero value is this one (/dev/cuse, the
	// process's privileges, process_vm_readv/writev, /proc).
	Env Env
}

// Env is what Start needs from the machine beyond the fabric. Each nil
// field is the real thing; tests replace them to run the whole daemon on
// the fake CUSE kernel (cuse/cusetest) and the simulated fabric, without
// /dev/cuse or privileges (package daemontest has such an Env).
type Env struct {
	// Preflight checks the machine before any device is registered; nil
	// is the real check: /dev/cuse exists, CAP_SYS_ADMIN and
	// CAP_SYS_PTRACE are held, Yama's ptrace_scope is below 3.
	Preflight func() error
	// Register registers the CUSE device cfg.DevName, served by dev, and
	// returns its channel, not yet serving; the node then appears as
	// DevDir/cfg.DevName. nil is cuse.Open on /dev/cuse.
	Register func(ctx context.Context, cfg cuse.Config, dev cuse.Device) (Channel, error)
	// Memory is the clients' memory; nil is callermem.ProcessVM.
	Memory callermem.Memory
	// ThreadGroup finds a client thread's process; nil is
	// ucm.ProcThreadGroup.
	ThreadGroup ucm.ThreadGroupFunc
	// ProcessName names a client process; nil is ucm.ProcProcessName.
	ProcessName ucm.ProcessNameFunc
	// NodeNumber reads the device number of a node Register made; nil is
	// stat(2). Major 0 is a number not known.
	NodeNumber func(path string) (major, minor uint32, err error)
}

// Channel is a registered CUSE device, as *cuse.Server is: Serve serves
// it until Close (then it returns cuse.ErrServerClosed) or until the
// channel fails.
type Channel interface {
	Serve() error
	Close() error
}

// register is cuse.Open with the result as a Channel.
func register(ctx context.Context, cfg cuse.Config, dev cuse.Device) (Channel, error) {
	srv, err := cuse.Open(ctx, cfg, dev)
	if err != nil {
		return nil, err
	}
	return srv, nil
}

func (e Env) withDefaults() Env {
	if e.Preflight == nil {
		e.Preflight = preflight
	}
	if e.Register == nil {
		e.Register = register
	}
	if e.Memory == nil {
		e.Memory = callermem.ProcessVM{}
	}
	if e.ThreadGroup == nil {
		e.ThreadGroup = ucm.ProcThreadGroup
	}
	if e.ProcessName == nil {
		e.ProcessName = ucm.ProcProcessName
	}
	if e.NodeNumber == nil {
		e.NodeNumber = nodeNumber
	}
	return e
}

// Daemon is a running ucmd.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	started time.Time
	fabric  *sim.Fabric
	nums    *devNumbers
	ids     *ucm.IDTable // one id space and budget for every device, served now or later
	budget  *ucm.Budget
	status  *status.Server
	metrics *metrics.Metrics // nil without MetricsListen
	metSrv  *metrics.Server
	trace   *trace.Hub // every CM's first observer; serves the trace socket
	dirLock *os.File   // the runtime dir, locked for the daemon's life; nil without one
	wg      sync.WaitGroup
	failed  chan error // first CUSE channel failure

	// mu guards served, unserved and retired, which Start and the rescan
	// goroutine change and the status, trace and metrics goroutines read.
	mu       sync.Mutex
	served   []*served         // by index
	unserved []status.Unserved // found, failed to start (hotplug.go)
	retired  map[string]uint64 // devices retired, by status.Retired* reason

	// The rescan goroutine's (hotplug.go); Close stops it first.
	watchStop context.CancelFunc
	watchDone chan struct{}
	pending   map[string]*pendingDevice
	last      lastLook
	// kick asks for a rescan now: a CM's port stopped receiving, which is
	// what a removed device does.
	kick chan struct{}
}

type served struct {
	index int
	node  string
	major uint32 // of its device number; 0 if not known
	dev   hw.Device
	cm    *cmcore.CM
	gate  *observerGate // its CM's observer
	ucm   *ucm.Device
	srv   Channel
	done  chan struct{} // closed when srv.Serve has returned
	// broken is set when the kernel ended srv's channel (an abort): the
	// rescan retires the device, then serves it again (hotplug.go).
	broken atomic.Bool
}

// umadQueueLen is each umad endpoint's receive queue. cmcore takes the
// MADs on the endpoint's reading goroutine (hw.Deliverer), so the queue
// holds only what arrives before it does, and retransmissions make up for
// a MAD dropped then. umad's default of 4,096 slots, 1.3 MB that the
// runtime zeroes when it reuses memory, was about 0.6 MB of resident
// memory per port: 82 rxe devices in the test VM made ucmd's RSS 112 MB
// with it and 61-66 MB with 64 slots.
const umadQueueLen = 64

// Start brings every device up. On error, whatever was started is stopped
// again and the error says what to do about it.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DevDir == "" {
		cfg.DevDir = "/dev"
	}
	if cfg.NodeMode == 0 {
		cfg.NodeMode = 0o666
	}
	if cfg.UMAD.QueueLen == 0 {
		cfg.UMAD.QueueLen = umadQueueLen
	}
	cfg.Env = cfg.Env.withDefaults()
	d := &Daemon{cfg: cfg, log: cfg.Logger, started: time.Now(), failed: make(chan error, 1), kick: make(chan struct{}, 1),
		nums: &devNumbers{fixed: cfg.FixedNumbers}}
	d.trace = trace.NewHub(d.traceOwners, d.log)
	// One id space and one budget for every device, as the kernel had one
	// ctx_id_table: a user's limits and the memory budget span them all.
	// Made first: the metrics endpoint answers while ucmd waits for devices.
	d.ids = ucm.NewIDTable()
	d.budget = ucm.NewBudget(cfg.Limits, d.log)
	// What the flags name is checked first (a bad --device is a bad flag,
	// whatever else is missing), then the environment.
	statusOpts, err := statusOptions(cfg.StatusGroup)
	if err != nil {
		return nil, err
	}
	if err := checkRuntimeDir(cfg.RuntimeDir); err != nil {
		return nil, err
	}
	if d.dirLock, err = lockRuntimeDir(cfg.RuntimeDir); err != nil {
		return nil, err
	}
	if cfg.MetricsListen != "" {
		// The endpoint's snapshot metrics are the status socket's.
		d.metrics = metrics.New(status.ProviderFunc(d.Snapshot))
		// Listening (which checks the address first) before anything
		// else: a port in use, or a sandbox without TCP, stops ucmd
		// before any node appears, and the endpoint answers while ucmd
		// waits for devices.
		ms, err := metrics.Listen(cfg.MetricsListen, d.metrics, d.log)
		if err != nil {
			d.unlockRuntimeDir()
			return nil, err
		}
		d.metSrv = ms
		d.log.Info("serving metrics", "addr", ms.Addr().String(), "path", metrics.Path)
	}
	early := func(err error) (*Daemon, error) {
		if d.metSrv != nil {
			d.metSrv.Close()
		}
		d.unlockRuntimeDir()
		return nil, err
	}
	devs, err := d.waitDevices(ctx)
	if err != nil {
		return early(err)
	}
	if err := cfg.Env.Preflight(); err != nil {
		return early(err)
	}
	warmPorts(devs)
	if err := d.serveAtStart(ctx, devs); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.writeClassTree(); err != nil {
		d.Close()
		return nil, err
	}
	st, err := status.Listen(cfg.RuntimeDir, status.ProviderFunc(d.Snapshot), d.log, statusOpts...)
	if err != nil {
		d.Close()
		return nil, err
	}
	d.status = st
	// The trace carries what the status socket does: same access rule.
	tl, err := status.ListenSocket(cfg.RuntimeDir, trace.SocketName, statusOpts...)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("trace socket: %w", err)
	}
	d.trace.Serve(tl)
	if cfg.Rescan > 0 {
		d.startWatch(cfg.Rescan)
	}
	return d, nil
}

// serveAtStart serves devs, device i as ucmi. With rescans, a device that
// cannot be served (another CM owns a port's CM class: ib_cm registers on
// a device that appears after it loaded, an SR-IOV function say) is left
// to them, listed as not served, as a device that appears later would be;
// only when none can be served does Start fail. A daemon that exited for
// one such device served none of the others, and systemd's restarts met
// the same device every time. Without rescans nothing would try it again,
// so every device must start.
func (d *Daemon) serveAtStart(ctx context.Context, devs []hw.Device) error {
	var first error
	now := time.Now()
	for i, dev := range devs {
		err := d.serve(ctx, i, dev)
		if err == nil {
			continue
		}
		if d.cfg.Rescan <= 0 || ctx.Err() != nil {
			return err
		}
		// The error returned when none is served: the first, unless a
		// later one is not the kernel CM's, which a restart may cure
		// (KernelCMInTheWay then would stop the unit's restarts).
		if first == nil || KernelCMInTheWay(first) && !KernelCMInTheWay(err) {
			first = err
		}
		if d.pending == nil {
			d.pending = make(map[string]*pendingDevice)
		}
		delay := d.retryBase()
		d.pending[dev.Name()] = &pendingDevice{key: identity(dev), delay: delay, retryAt: now.Add(delay), lastErr: err.Error(), since: now}
		d.log.Warn("cannot serve an RDMA device; serving the others, trying it again later", "dev", dev.Name(), "err", err, "retry_in", delay)
	}
	if len(d.servedNow()) == 0 && first != nil {
		return first
	}
	d.publishUnserved()
	return nil
}

// MetricsAddr is the address of the metrics endpoint (the port chosen for
// port 0), nil without one.
func (d *Daemon) MetricsAddr() net.Addr {
	if d.metSrv == nil {
		return nil
	}
	return d.metSrv.Addr()
}

// KernelCMInTheWay reports whether err (from Start) means another agent,
// the kernel's ib_cm as a rule, holds the CM class of the ports ucmd
// would have served.
func KernelCMInTheWay(err error) bool { return errors.Is(err, hw.ErrCMClassInUse) }

// CheckStatusGroup checks a --status-group value: "", a number, or a
// group the system knows.
func CheckStatusGroup(group string) error {
	_, err := statusOptions(group)
	return err
}

// statusOptions makes the status socket readable by the group named (a
// name or a number), or leaves it root-only for "". A number is the gid
// itself, whether /etc/group lists it or not: ucmd is built without cgo,
// so groups from a directory service (sssd, LDAP) are found by number only.
func statusOptions(group string) ([]status.Option, error) {
	if group == "" {
		return nil, nil
	}
	if gid, err := strconv.ParseUint(group, 10, 31); err == nil {
		return []status.Option{status.WithGroup(int(gid))}, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return nil, fmt.Errorf("--status-group %q: %w", group, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return nil, fmt.Errorf("--status-group %q: gid %q: %w", group, g.Gid, err)
	}
	return []status.Option{status.WithGroup(gid)}, nil
}

// checkRuntimeDir makes dir if need be and checks that files can be made
// in it, before any node is registered: the class tree and the sockets go
// there once every node exists.
func checkRuntimeDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--runtime-dir %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".ucmd-probe-*")
	if err != nil {
		return fmt.Errorf("--runtime-dir %s: cannot make files in it: %w", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// lockRuntimeDir takes dir's lock (flock(2) on the directory) for the
// daemon's life, or fails: the class tree and the sockets under dir are
// one daemon's, and a second `ucmd serve` on the same dir (a bare `sudo
// ucmd` next to the service) must stop before it touches them. Without
// the lock it failed later, at a taken node or umad class, and its
// cleanup removed the first daemon's class tree, which `ucmd exec`
// clients read. The lock goes with the process, so a crash leaves none,
// once every thread of it has ended: one stuck in a copy into a client's
// memory cannot be killed (docs/cuse.md §3), and the error says so.
func lockRuntimeDir(dir string) (*os.File, error) {
	if dir == "" {
		return nil, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("--runtime-dir %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("--runtime-dir %s: another ucmd serves it (%s)", dir, lockHolder("/proc", f))
		}
		return nil, fmt.Errorf("--runtime-dir %s: lock: %w", dir, err)
	}
	return f, nil
}

// lockHolder says who holds dir's lock, f being dir open, from proc's
// locks and the holder's entries: "pid 123 (ucmd); ucmd status shows it",
// or, when the holder has exited but for threads that cannot be killed
// (state D), what holds them and what to do; no pid when it cannot tell.
func lockHolder(proc string, f *os.File) string {
	const status = "ucmd status shows it"
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return status
	}
	locks, err := os.ReadFile(filepath.Join(proc, "locks"))
	if err != nil {
		return status
	}
	// "1: FLOCK  ADVISORY  WRITE 22110 fe:00:10527096 0 EOF"
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	pid := ""
	for line := range strings.Lines(string(locks)) {
		fs := strings.Fields(line)
		if len(fs) >= 6 && fs[1] == "FLOCK" && fs[5] == id {
			pid = fs[4]
			break
		}
	}
	comm, err := os.ReadFile(filepath.Join(proc, pid, "comm"))
	if pid == "" || pid == "0" || err != nil { // 0: in a pid namespace we cannot see
		return status
	}
	name := strings.Map(func(r rune) rune { // any process may name itself anything
		if !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, strings.TrimSpace(string(comm)))
	who := fmt.Sprintf("pid %s (%s)", pid, name)
	var stuck []string
	tasks, _ := os.ReadDir(filepath.Join(proc, pid, "task"))
	for _, t := range tasks {
		if b, err := os.ReadFile(filepath.Join(proc, pid, "task", t.Name(), "stat")); err == nil && taskState(b) == 'D' {
			stuck = append(stuck, t.Name())
		}
	}
	b, _ := os.ReadFile(filepath.Join(proc, pid, "stat"))
	if s := taskState(b); len(stuck) == 0 || (s != 'Z' && s != 'X') {
		return who + "; " + status
	}
	return who + fmt.Sprintf(" has exited but for threads %s in uninterruptible sleep, as a copy into a client's memory stays "+
		"when the client's buffer is a file mapping whose FUSE server does not answer (docs/cuse.md §3): "+
		"ending that FUSE server (fusermount -u its mount, or kill it) lets them go, else only a reboot does", strings.Join(stuck, ", "))
}

// taskState is the state letter of a /proc/<pid>/stat line, 0 if it
// cannot be read: the field after the command name, which may hold
// anything but ends at the last ')'.
func taskState(stat []byte) byte {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}

// unlockRuntimeDir lets another daemon have the runtime dir.
func (d *Daemon) unlockRuntimeDir() {
	if d.dirLock != nil {
		d.dirLock.Close()
		d.dirLock = nil
	}
}

// preflight turns the usual deployment mistakes into instructions.
func preflight() error { return checkMachine(cuse.DevicePath, hasCap, yamaPtraceScope) }

// checkMachine is preflight on the CUSE device cusePath, the capabilities
// has reports and Yama's setting at yama.
func checkMachine(cusePath string, has func(bit uint) bool, yama string) error {
	if _, err := os.Stat(cusePath); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist: load the CUSE module (modprobe cuse)", cusePath)
	}
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
		why  string
	}{
		{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN", "register devices through /dev/cuse"},
		{unix.CAP_SYS_PTRACE, "CAP_SYS_PTRACE", "read and write clients' memory (process_vm_readv/writev)"},
	} {
		if !has(c.bit) {
			missing = append(missing, c.name+" (to "+c.why+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing privileges: %s; run ucmd as root or grant these capabilities", strings.Join(missing, ", "))
	}
	return checkYama(yama)
}

// yamaPtraceScope is Yama's setting.
const yamaPtraceScope = "/proc/sys/kernel/yama/ptrace_scope"

// checkYama refuses ptrace_scope 3: no process may then attach to another,
// not even with CAP_SYS_PTRACE, so process_vm_readv/writev fail and every
// command that passes a pointer (all but a few) would fail with EFAULT.
// Scopes 1 and 2 let CAP_SYS_PTRACE through, which preflight checked.
func checkYama(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil // no Yama
	}
	if strings.TrimSpace(string(b)) == "3" {
		return fmt.Errorf("kernel.yama.ptrace_scope is 3 (%s): no process may read or write another's memory, "+
			"not even with CAP_SYS_PTRACE, so every ucm command that passes a pointer would fail with EFAULT in the client; "+
			"scope 3 cannot be lowered until reboot: boot with kernel.yama.ptrace_scope at 2 or less (sysctl.d)", path)
	}
	return nil
}

func hasCap(bit uint) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.Geteuid() == 0
	}
	return data[bit/32].Effective&(1<<(bit%32)) != 0
}

// waitDevices is devices, retried for up to WaitDevices while what was
// asked for has not appeared yet.
//
// Without Devices, a set found while waiting is taken once it has not grown
// for settleTime: HCAs registered one after the other at boot are all served.
func (d *Daemon) waitDevices(ctx context.Context) ([]hw.Device, error) {
	devs, err := d.devices()
	if d.cfg.WaitDevices <= 0 || (d.cfg.Fabric != FabricUMAD && d.cfg.Fabric != "") {
		return devs, err
	}
	if err != nil && !errors.Is(err, errNoDevice) {
		return devs, err
	}
	// What is missing is logged at once and again when it changes, so that
	// a misspelled --device shows in the journal while the boot waits for
	// it, next to the devices there are.
	var missing string
	if err != nil {
		missing = err.Error()
		d.log.Info("waiting for RDMA devices with umad ports", "devices", d.cfg.Devices, "for", d.cfg.WaitDevices, "missing", missing)
	}
	deadline := time.NewTimer(d.cfg.WaitDevices)
	defer deadline.Stop()
	tick := time.NewTicker(settleTime / 5)
	defer tick.Stop()
	stableSince := time.Now()
	for {
		if err == nil && (len(d.cfg.Devices) > 0 || time.Since(stableSince) >= settleTime) {
			return devs, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			if err == nil {
				return devs, nil
			}
			return nil, fmt.Errorf("after waiting %v: %w", d.cfg.WaitDevices, err)
		case <-tick.C:
		}
		n := len(devs)
		devs, err = d.devices()
		if err != nil && !errors.Is(err, errNoDevice) {
			return devs, err
		}
		if err != nil || len(devs) != n {
			stableSince = time.Now()
		}
		if err != nil && err.Error() != missing {
			missing = err.Error()
			d.log.Info("still waiting for RDMA devices with umad ports", "missing", missing)
		}
	}
}

// settleTime is how long a set of devices found by waitDevices must stay
// the same before it is served.
var settleTime = time.Second

// quiet wraps an error for errors.Is without adding to the message.
type quiet struct{ err error }

func (q quiet) Error() string { return "" }
func (q quiet) Unwrap() error { return q.err }

// errNoDevice is wrapped when a wanted umad device is not (yet) there.
var errNoDevice = errors.New("no such device")

// buildSim makes the simulated fabric with its SimDevices devices.
func (d *Daemon) buildSim() error {
	n := d.cfg.SimDevices
	if n < 1 {
		return fmt.Errorf("--sim-devices must be at least 1")
	}
	d.fabric = sim.New(sim.Config{Seed: uint64(time.Now().UnixNano())})
	for i := range n {
		name := fmt.Sprintf("sim%d", i)
		var err error
		if d.cfg.SimIB {
			_, err = d.fabric.AddIB(name, 1)
		} else {
			_, err = d.fabric.AddRoCE(name, 1)
		}
		if err != nil {
			return fmt.Errorf("simulated fabric: %w", err)
		}
	}
	return nil
}

// discover lists the devices there are now that the daemon is to serve
// (Devices, when given, selects), in device order.
func (d *Daemon) discover() ([]hw.Device, error) {
	switch d.cfg.Fabric {
	case FabricSim:
		var out []hw.Device
		for _, dev := range d.fabric.Devices() {
			out = append(out, dev)
		}
		return out, nil
	case FabricUMAD, "":
		found, err := umad.Discover(d.cfg.UMAD)
		if err != nil {
			return nil, fmt.Errorf("discover RDMA devices: %w", err)
		}
		var out []hw.Device
		for _, dev := range found {
			if dev.HasUMAD() && (len(d.cfg.Devices) == 0 || slices.Contains(d.cfg.Devices, dev.Name())) {
				out = append(out, dev)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown fabric %q (want %s or %s)", d.cfg.Fabric, FabricUMAD, FabricSim)
}

// devices is discover for Start: the simulated fabric is built, and every
// device asked for must be there.
func (d *Daemon) devices() ([]hw.Device, error) {
	if d.cfg.Fabric == FabricSim && d.fabric == nil {
		if err := d.buildSim(); err != nil {
			return nil, err
		}
	}
	out, err := d.discover()
	if err != nil || d.cfg.Fabric == FabricSim {
		return out, err
	}
	for _, want := range d.cfg.Devices {
		if slices.ContainsFunc(out, func(h hw.Device) bool { return h.Name() == want }) {
			continue
		}
		var have []string
		listed := false
		all, _ := umad.Discover(d.cfg.UMAD)
		for _, dev := range all {
			listed = listed || dev.Name() == want
			if dev.HasUMAD() {
				have = append(have, dev.Name())
			}
		}
		if len(have) == 0 {
			have = append(have, "none")
		}
		what := "not found"
		if listed {
			what = "has no umad ports (iWARP devices have no IB CM; else ib_umad is not loaded yet)"
		}
		return nil, fmt.Errorf("--device: RDMA device %q %s (devices with umad ports: %s; is ib_umad loaded? see /sys/class/infiniband_mad)%w", want, what, strings.Join(have, ", "), quiet{errNoDevice})
	}
	if len(out) == 0 {
		var names []string
		all, _ := umad.Discover(d.cfg.UMAD)
		for _, dev := range all {
			names = append(names, dev.Name())
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("no RDMA device on this host (/sys/class/infiniband lists none): load the HCA's driver "+
				"(mlx5_ib, say) or make a Soft-RoCE device (rdma link add rxe0 type rxe netdev eth0); "+
				"--fabric sim serves a simulated fabric instead%w", quiet{errNoDevice})
		}
		return nil, fmt.Errorf("no RDMA device with umad ports found (%s have none): load ib_umad (modprobe ib_umad); "+
			"iWARP devices have no IB CM%w", strings.Join(names, ", "), quiet{errNoDevice})
	}
	return out, nil
}

// warmPorts reads the attributes of every port of devs, a few ports at a
// time, for serve to find them cached. A RoCE port's GID table is a
// thousand sysfs files (about 50 ms under the test VM's emulation), and
// devices are served one after another, in order, for their node numbers;
// the reads need no order. Errors are serve's to report.
func warmPorts(devs []hw.Device) {
	var ports []hw.Port
	for _, dev := range devs {
		ports = append(ports, dev.Ports()...)
	}
	if len(ports) < 2 {
		return
	}
	next := make(chan hw.Port)
	var wg sync.WaitGroup
	for range min(len(ports), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for p := range next {
				hw.AttrOf(p) // no copy of the tables
			}
		})
	}
	for _, p := range ports {
		next <- p
	}
	close(next)
	wg.Wait()
}

// serve brings dev up as ucm<i>: its CM, its ucm device, its CUSE node.
// On error nothing of it is left.
func (d *Daemon) serve(ctx context.Context, i int, dev hw.Device) error {
	log := d.log.With("dev", dev.Name(), "node", fmt.Sprintf("ucm%d", i))
	gate := &observerGate{obs: d.observer()}
	cm := cmcore.New(dev, cmcore.Options{Logger: log, AutoMRA: d.cfg.AutoMRA, Observer: gate, OnReceiveError: d.kickRescan})
	if err := cm.Start(); err != nil {
		cm.Close()
		return fmt.Errorf("start the CM on %s: %w", dev.Name(), err)
	}
	uc := ucm.Config{CM: cm, Memory: d.cfg.Env.Memory, ThreadGroup: d.cfg.Env.ThreadGroup, ProcessName: d.cfg.Env.ProcessName, IDs: d.ids, Budget: d.budget, Limits: d.cfg.Limits, Logger: log}
	up := false
	if d.metrics != nil {
		uc.Observer = d.metrics.Device(dev.Name())
		// A device not served keeps no series (its CM is closed by then).
		defer func() {
			if !up {
				gate.close()
				d.metrics.Forget(dev.Name())
			}
		}()
	}
	u, err := ucm.New(uc)
	if err != nil {
		cm.Close()
		return fmt.Errorf("ucm device for %s: %w", dev.Name(), err)
	}
	name := fmt.Sprintf("infiniband/ucm%d", i)
	// Node: where Close opens the node to wake the CUSE readers.
	cc := cuse.Config{DevName: name, Logger: log, Node: filepath.Join(d.cfg.DevDir, name), IdleReaders: d.cfg.IdleReaders, MaxWrite: ucm.MaxWrite}
	cc.Major, cc.Minor = d.nums.want(i)
	srv, err := d.cfg.Env.Register(ctx, cc, u)
	if err != nil && cc.Major != 0 && cc.Major != UCMMajor {
		// A minor of the shared major that the kernel refuses: a major
		// of the node's own, as it would have had without sharing.
		log.Debug("device number refused; asking for a dynamic one", "major", cc.Major, "minor", cc.Minor, "err", err)
		cc.Major = 0
		srv, err = d.cfg.Env.Register(ctx, cc, u)
	}
	if err != nil {
		cm.Close()
		return fmt.Errorf("register /dev/%s: %w", name, cuseHint(err))
	}
	s := &served{index: i, node: filepath.Join(d.cfg.DevDir, name), dev: dev, cm: cm, gate: gate, ucm: u, srv: srv, done: make(chan struct{})}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(s.done)
		err := srv.Serve()
		switch {
		case err == nil || errors.Is(err, cuse.ErrServerClosed):
		case d.cfg.Rescan > 0:
			// Only this node's clients lose their files; the rescan
			// makes the node again on a new channel.
			log.Error("CUSE channel failed; serving the device again on a new one", "err", err)
			s.broken.Store(true)
			d.kickRescan(0, err)
		default:
			log.Error("CUSE channel failed; the device is gone", "err", err)
			select {
			case d.failed <- fmt.Errorf("/dev/%s: CUSE channel failed: %w", name, err):
			default:
			}
		}
	}()
	if err := waitNode(ctx, s.node, d.cfg.NodeMode); err != nil {
		s.stop()
		return err
	}
	major, minor, err := d.cfg.Env.NodeNumber(s.node)
	if err != nil {
		// Not knowing it costs only the sharing: the next node asks for
		// a dynamic major of its own.
		log.Warn("cannot read the node's device number", "err", err)
	}
	s.major = major
	d.nums.got(major)
	d.mu.Lock()
	at, _ := slices.BinarySearchFunc(d.served, i, func(o *served, i int) int { return o.index - i })
	d.served = slices.Insert(d.served, at, s)
	d.mu.Unlock()
	log.Info("serving", "path", s.node, "devnum", fmt.Sprintf("%d:%d", major, minor))
	up = true
	return nil
}

// stop ends what serve started for s: the CUSE channel first (its open
// files are released, their ids destroyed through the CM), then the CM.
func (s *served) stop() error {
	err := s.srv.Close()
	<-s.done
	err = errors.Join(err, s.cm.Close())
	s.gate.close()
	return err
}

// observerGate hands a device's CM MADs to the daemon's observers until
// the device is let go: cmcore.Close does not wait for a send still in the
// kernel (umad resolving a peer's MAC, up to a second), whose observation
// would come after the metrics forgot the device and make its series again,
// for good. An observation under way when the gate closes is waited for,
// so that none lands after the device's series are forgotten. Counted, not
// locked: an observer may call the CM (cmcore.Observer allows it), whose
// send observes again on the same goroutine, where a read lock taken twice
// with close waiting would deadlock.
type observerGate struct {
	obs    cmcore.Observer
	off    atomic.Bool
	inside atomic.Int64 // observations under way
}

func (g *observerGate) ObserveMAD(ev *cmcore.MADEvent) {
	// inside before off, as close sets off before it reads inside: one
	// of the two sees the other (sequentially consistent atomics).
	g.inside.Add(1)
	defer g.inside.Add(-1)
	if !g.off.Load() {
		g.obs.ObserveMAD(ev)
	}
}

// WantsTime implements cmcore.TimeObserver for the observers behind.
func (g *observerGate) WantsTime() bool {
	t, ok := g.obs.(cmcore.TimeObserver)
	return !g.off.Load() && (!ok || t.WantsTime())
}

// close ends the observations, once those under way have. Called from
// an observation, it would wait for itself; none does (the daemon's
// observers never retire a device).
func (g *observerGate) close() {
	g.off.Store(true)
	for g.inside.Load() != 0 {
		time.Sleep(100 * time.Microsecond)
	}
}

// servedNow is a copy of the devices served, by index.
func (d *Daemon) servedNow() []*served {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.served)
}

// observer is what every CM's Options.Observer gets: nil without
// observers, so that the CMs pay only their nil check.
func (d *Daemon) observer() cmcore.Observer {
	// The trace hub always: with no `ucmd trace` running it costs one
	// atomic load per MAD.
	obs := append([]cmcore.Observer{d.trace}, d.cfg.Observers...)
	if d.metrics != nil {
		obs = append(slices.Clip(obs), d.metrics)
	}
	switch len(obs) {
	case 0:
		return nil
	case 1:
		return obs[0]
	}
	return cmcore.Observers(obs)
}

// traceOwners lists a device's ids with their file's process, for the
// trace's comm id -> process resolution.
func (d *Daemon) traceOwners(dev string) []trace.Owner {
	var out []trace.Owner
	for _, s := range d.servedNow() {
		if s.dev.Name() != dev {
			continue
		}
		for _, f := range s.ucm.Files() {
			for _, id := range f.IDs {
				out = append(out, trace.Owner{
					PID: f.PID, Comm: f.Comm, LocalCommID: id.LocalCommID, RemoteCommID: id.RemoteCommID,
					ServiceID: id.ServiceID, Listening: id.State == cmcore.StateListen,
				})
			}
		}
	}
	return out
}

func cuseHint(err error) error {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w (opening /dev/cuse needs root or CAP_SYS_ADMIN)", err)
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%w (the node or device number is taken: another ucmd running?)", err)
	}
	return err
}

// waitNode waits for devtmpfs/udev to create the node, then sets its mode.
func waitNode(ctx context.Context, path string, mode os.FileMode) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Chmod(path, mode)
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return fmt.Errorf("set mode of %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (d *Daemon) writeClassTree() error {
	var devs []sysclass.Device
	for _, s := range d.servedNow() {
		sd := sysclass.Device{Index: s.index, IBDev: s.dev.Name()}
		var st unix.Stat_t
		if err := unix.Stat(s.node, &st); err == nil {
			sd.Major, sd.Minor = unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))
		}
		devs = append(devs, sd)
	}
	return sysclass.WriteTree(d.cfg.RuntimeDir, devs)
}

// Failed delivers the first failure of a device's CUSE channel (the kernel
// aborted the connection, e.g. `echo 1 > /sys/fs/fuse/connections/N/abort`)
// when the daemon does not rescan (Config.Rescan 0): the device is gone and
// the daemon should exit so that it is restarted. A daemon that rescans
// serves the device again instead (docs/hotplug.md).
func (d *Daemon) Failed() <-chan error { return d.failed }

// MaxBlockedReaders is the sum of the CUSE servers' MaxBlockedReaders:
// how many of the daemon's threads can wait in read(2) at once.
func (d *Daemon) MaxBlockedReaders() int {
	n := 0
	for _, s := range d.servedNow() {
		if r, ok := s.srv.(interface{ MaxBlockedReaders() int }); ok {
			n += r.MaxBlockedReaders()
		}
	}
	return n
}

// Probe takes, one at a time, every lock that a command or a MAD takes
// (the daemon's, each device's CM and files and ids, the budget) and lets
// it go at once; none is one a client can hold, since copies into a
// client's memory and waits for events hold no lock (docs/design.md
// §4.2). So it returns unless the daemon is deadlocked: the health check
// after which `ucmd serve` pings systemd's watchdog. A status snapshot
// takes the same locks, but allocates some 160 bytes an id.
func (d *Daemon) Probe() {
	for _, s := range d.servedNow() {
		s.cm.Probe()
		s.ucm.Probe()
	}
	d.budget.Probe()
}

// Nodes returns the device nodes served, in order.
func (d *Daemon) Nodes() []string {
	var out []string
	for _, s := range d.servedNow() {
		out = append(out, s.node)
	}
	return out
}

// Close stops everything: clients blocked on a node get errors (the kernel
// answers ENOTCONN once the CUSE channel closes), ids are destroyed, the CMs
// stop, and the class tree and status socket go away.
func (d *Daemon) Close() error {
	d.stopWatch()
	if d.metSrv != nil {
		d.metSrv.Close()
	}
	d.trace.Close()
	if d.status != nil {
		d.status.Close()
	}
	all := d.servedNow()
	// The servers first: releasing their files destroys the ids, whose
	// DREQs and REJs tell the peers, which needs the CMs' ports still open
	// (TestFullStackUcmdStops in test/interop). All at once: a server
	// whose clients' copies hang waits its grace (5 s) for them.
	var closing sync.WaitGroup
	for _, s := range all {
		closing.Go(func() { s.srv.Close() })
	}
	closing.Wait()
	d.wg.Wait()
	for _, s := range all {
		s.cm.Close()
	}
	if d.cfg.RuntimeDir != "" {
		sysclass.RemoveTree(d.cfg.RuntimeDir)
	}
	d.unlockRuntimeDir()
	return nil
}

// madCounters is how `ucmd status` shows a CM's counters: received MADs
// dropped and sends that failed are counted apart.
func madCounters(st cmcore.Stats) status.MADCounter {
	return status.MADCounter{
		Sent: st.Sent, Received: st.Received, Retransmitted: st.Retransmitted,
		TimedOut: st.TimedOut, Dropped: st.Dropped, SendFailed: st.SendErrors,
	}
}

// Snapshot implements status.Provider.
func (d *Daemon) Snapshot() status.Snapshot {
	fabric := d.cfg.Fabric
	if fabric == "" {
		fabric = FabricUMAD
	}
	snap := status.Snapshot{Version: d.cfg.Version, Started: d.started, Fabric: fabric}
	// The devices served, not served and retired, as of one moment: read
	// apart, a device retired in between showed as served and retired at
	// once (and counted so in the metrics).
	d.mu.Lock()
	served := slices.Clone(d.served)
	snap.Unserved = slices.Clone(d.unserved)
	if len(d.retired) > 0 {
		snap.Retired = maps.Clone(d.retired)
	}
	d.mu.Unlock()
	for _, s := range served {
		st := s.cm.Stats()
		sd := status.Device{
			Name:     s.dev.Name(),
			Node:     s.node,
			NodeGUID: formatGUID(s.dev.NodeGUID()),
			Counters: madCounters(st),
			Errors:   s.ucm.Errors(),
		}
		// Sized up front (a file may hold tens of thousands of ids), but
		// nil when empty: JSON keeps its null.
		files := s.ucm.Files()
		if len(files) > 0 {
			sd.Files = make([]status.File, 0, len(files))
		}
		for _, f := range files {
			sf := status.File{PID: f.PID, UID: f.UID, Comm: f.Comm, Events: f.QueuedEvents, Opened: f.Opened.Unix(),
				Waiting: f.Waiting, CopyWaiting: f.CopyWaiting}
			if len(f.IDs) > 0 {
				sf.IDs = make([]status.ID, 0, len(f.IDs))
			}
			for _, id := range f.IDs {
				sid := status.ID{
					ID: id.ID, State: id.State.String(), ServiceID: status.Hex64(id.ServiceID),
					Port: id.Port, LocalQPN: id.LocalQPN, RemoteQPN: id.RemoteQPN,
					LocalCommID: id.LocalCommID, RemoteCommID: id.RemoteCommID, Events: id.QueuedEvents,
				}
				if !id.RemoteGID.IsZero() {
					sid.RemoteGID = id.RemoteGID.String()
				}
				sf.IDs = append(sf.IDs, sid)
			}
			sd.Files = append(sd.Files, sf)
		}
		for _, p := range s.dev.Ports() {
			sp := status.Port{Num: p.Num()}
			if a, err := p.Attr(); err == nil {
				sp.LinkLayer, sp.State, sp.LID = a.LinkLayer.String(), a.State.String(), a.LID
				for _, g := range a.GIDs {
					if g.Index == 0 {
						sp.GID0 = g.GID.String()
					}
				}
			}
			if err := s.cm.ReceiveError(uint8(p.Num())); err != nil {
				sp.State, sp.ReceiveError = "STOPPED", err.Error()
			}
			if ep, ok := s.cm.Endpoint(uint8(p.Num())).(*umad.Endpoint); ok && sp.LinkLayer == hw.LinkEthernet.String() {
				st := ep.Stats()
				sp.Neighbours = &status.Neighbours{Resolved: st.Resolved, Failed: st.ResolveFailures, Unanswered: st.ResolveUnanswered}
				if err := ep.ResolveError(); err != nil {
					sp.Neighbours.Error = err.Error()
				}
			}
			sd.Ports = append(sd.Ports, sp)
		}
		snap.Devices = append(snap.Devices, sd)
	}
	snap.Limits = budgetStatus(d.budget)
	return snap
}

// budgetStatus is the budget as status shows it.
func budgetStatus(b *ucm.Budget) status.Limits {
	u := b.Usage()
	l := status.Limits{MemoryCharged: u.Bytes, MemoryBudget: u.Limit, Refused: b.Refusals()}
	l.Copies, l.CopiesMax = b.Copies()
	users := b.Users()
	l.Users = make([]status.User, len(users))
	for i, uu := range users {
		l.Users[i] = status.User{UID: uu.UID, Files: uu.Files, IDs: uu.IDs, Timewait: uu.Timewait, Events: uu.Events, Waiting: uu.Waits, Copies: uu.Copies, Memory: uu.Bytes}
	}
	return l
}

func formatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}
