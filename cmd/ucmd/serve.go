package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/journal"
	"github.com/ucmd/ucmd/internal/metrics"
	"github.com/ucmd/ucmd/internal/sdnotify"
	"github.com/ucmd/ucmd/internal/sysmon"
	"github.com/ucmd/ucmd/ucm"
)

type serveFlags struct {
	fabric       string
	devices      []string
	deviceGiven  bool   // --device was on the command line, maybe empty
	simGiven     string // a --fabric sim flag on the command line, "" if none
	simDevices   int
	simIB        bool
	fixedNumbers bool
	mode         string
	logLevel     string
	logJSON      bool
	maxIDs       int
	maxEvents    int
	userIDs      int
	userEvents   int
	userFiles    int
	userWaits    int
	userCopies   int
	copies       int
	memoryBudget int64
	autoMRA      int
	waitDevices  time.Duration
	rescan       time.Duration
	monitorSlack time.Duration
	statusGroup  string
	metrics      string
	cpuProfile   string
	traceFile    string
}

// minMemoryBudget is the smallest --memory-budget taken.
const minMemoryBudget = 1 << 20

// maxSimDevices bounds --sim-devices at the kernel ucm driver's count of
// devices (IB_UCM_MAX_DEVICES).
const maxSimDevices = 1024

func (f *serveFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.fabric, "fabric", daemon.FabricUMAD, "where CM MADs go: umad (real HCAs, InfiniBand or RoCE) or sim (a built-in simulated fabric)")
	fs.StringSliceVar(&f.devices, "device", nil, "serve only these RDMA devices (repeatable; default: every device with umad ports)")
	fs.IntVar(&f.simDevices, "sim-devices", 2, "with --fabric sim: number of simulated devices")
	fs.BoolVar(&f.simIB, "sim-ib", false, "with --fabric sim: InfiniBand ports (LIDs) instead of RoCE (GIDs)")
	fs.DurationVar(&f.waitDevices, "wait-devices", 0, "with --fabric umad: wait up to this long for the RDMA devices (every --device, else at least one) to appear with umad ports, as at boot (0: do not wait)")
	fs.DurationVar(&f.rescan, "rescan", defaultRescan, "how often to look for RDMA devices added, removed or registered again while serving (a driver reload, a firmware reset, rdma link add/delete): a new device gets the lowest free ucmN, a removed one loses its node (0: never)")
	fs.BoolVar(&f.fixedNumbers, "fixed-numbers", false, "register ucm0 to ucm31 as 231:224+N, the kernel driver's numbers (later nodes, as without it, share a major the kernel picks)")
	fs.StringVar(&f.statusGroup, "status-group", "", "`GROUP` (a name in /etc/group, or a gid) that may use the status and trace sockets (ucmd status, ucmd trace: every CM MAD, private data included) besides root: mode 0660 and that group; default root only")
	fs.StringVar(&f.metrics, "metrics-listen", "", "`HOST:PORT` to serve Prometheus metrics on at /metrics (MADs, retransmissions, timeouts, ids per state, files, queued events, failed commands, command latency and connection setup histograms; docs/metrics.md); e.g. 127.0.0.1:9435; default off, which also attaches no latency timing")
	fs.StringVar(&f.mode, "mode", "0666", "permissions of the device nodes (the kernel driver used 0666); udev applies the MODE of 90-ucmd.rules at every event, so another mode needs that rule overridden in /etc/udev/rules.d")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines instead of text")
	fs.IntVar(&f.maxIDs, "max-ids", 0, "most ids one open file may hold (0: default 65536)")
	fs.IntVar(&f.maxEvents, "max-events", 0, "most undelivered events one open file may queue (0: default 65536)")
	fs.IntVar(&f.userIDs, "user-ids", 0, fmt.Sprintf("most ids one user (uid) may hold over all its files, those destroyed but still in their connection's timewait included, past which CREATE_ID fails with ENOMEM and new connections are rejected (0: default %d)", ucm.DefaultUserIDs))
	fs.IntVar(&f.userEvents, "user-events", 0, fmt.Sprintf("most undelivered events one user may have queued over all its files, past which new connections are rejected and other events dropped (0: default %d)", ucm.DefaultUserEvents))
	fs.IntVar(&f.userFiles, "user-files", 0, fmt.Sprintf("most files one user may have open on the ucm nodes, past which open fails with EMFILE (0: default %d)", ucm.DefaultUserFiles))
	fs.IntVar(&f.userWaits, "user-waits", 0, fmt.Sprintf("most commands of one user that may wait at once (GET_EVENT for an event, DESTROY_ID for the id's other commands, a copy for a copy slot), each a goroutine of the daemon's, past which the command fails with ENOMEM (0: default %d)", ucm.DefaultUserWaits))
	fs.IntVar(&f.userCopies, "user-copies", 0, fmt.Sprintf("most copies into or out of client memory one user may have in progress at once, each a thread of the daemon's for as long as the copy takes (one into memory the client's own file system serves may hang); more wait their turn (0: default %d)", ucm.DefaultUserCopies))
	fs.IntVar(&f.copies, "copies", 0, fmt.Sprintf("most copies into or out of client memory all users together may have in progress at once; more wait their turn (0: default %d)", ucm.DefaultCopies))
	fs.IntVar(&f.autoMRA, "auto-mra", 0, "`TIMEOUT`: answer a retransmitted REQ whose connection the application has not accepted yet with an MRA of this service timeout (5-bit IBTA time, 4.096 µs·2^TIMEOUT; 24, rdma_cm's, is about 69 s), so that a slow acceptor's peers do not time out; SEND_MRA, SEND_REP and SEND_REJ behave as without it (0: off, the kernel ib_cm's behaviour)")
	fs.DurationVar(&f.monitorSlack, "monitor-slack", sysmon.DefaultSlack, "timer slack of the Go runtime's monitor thread, which the threads it starts inherit (/proc/TID/timerslack_ns, which takes CAP_SYS_NICE): how late the kernel may end its sleeps, which spares it most of its wake-ups (docs/perf.md, \"The runtime monitor's sleeps\"); 0 leaves the kernel's 50µs")
	// For performance work (docs/perf.md), not for operators.
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to `FILE` (pprof)")
	fs.MarkHidden("cpuprofile")
	fs.StringVar(&f.traceFile, "runtime-trace", "", "write a Go runtime execution trace of the whole run to `FILE` (go tool trace)")
	fs.MarkHidden("runtime-trace")
	fs.Int64Var(&f.memoryBudget, "memory-budget", 0, fmt.Sprintf("bytes all users' files, ids, events and waiting commands may cost the daemon together, past which commands fail with ENOMEM (0: default %d, 512 MiB; at least 1 MiB)", ucm.DefaultMemoryBudget))
}

// logger writes to w, the command's stderr. When that is the journal's
// stream (under systemd) each line carries its priority, and text lines
// no time of their own (internal/journal).
func (f *serveFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	file, _ := w.(*os.File)
	onJournal := file != nil && journal.IsStream(file)
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	if f.logJSON {
		h = slog.NewJSONHandler(w, opts)
	} else {
		if onJournal {
			opts.ReplaceAttr = journal.DropTime
		}
		h = slog.NewTextHandler(w, opts)
	}
	if onJournal {
		h = journal.NewHandler(w, h)
	}
	return slog.New(h), nil
}

// validate checks the flags by themselves, before anything looks at the
// machine: a wrong flag is reported as that, not as a missing /dev/cuse.
func (f *serveFlags) validate() error {
	switch f.fabric {
	case daemon.FabricUMAD, daemon.FabricSim:
	default:
		return fmt.Errorf("--fabric %q: want %s (real HCAs, InfiniBand or RoCE) or %s (the built-in simulated fabric)", f.fabric, daemon.FabricUMAD, daemon.FabricSim)
	}
	if f.simDevices < 1 || f.simDevices > maxSimDevices {
		return fmt.Errorf("--sim-devices %d: want from 1 to %d (each a node served by threads of its own)", f.simDevices, maxSimDevices)
	}
	if f.autoMRA < 0 || f.autoMRA > 31 {
		return fmt.Errorf("--auto-mra %d: want an MRA service timeout from 1 to 31 (IBTA 5-bit time; 24 is rdma_cm's, about 69 s), or 0 for none", f.autoMRA)
	}
	if f.metrics != "" {
		if err := metrics.CheckAddr(f.metrics); err != nil {
			return err
		}
	}
	if f.monitorSlack < 0 || f.monitorSlack > time.Second {
		return fmt.Errorf("--monitor-slack %v: want from 0 (the kernel's default) to 1s", f.monitorSlack)
	}
	if f.waitDevices < 0 {
		return fmt.Errorf("--wait-devices %v: cannot be negative", f.waitDevices)
	}
	if f.rescan != 0 && f.rescan < minRescan {
		return fmt.Errorf("--rescan %v: want 0 (never) or at least %v", f.rescan, minRescan)
	}
	if f.deviceGiven && len(f.devices) == 0 {
		// pflag reads "" as no names: it would serve every device.
		return fmt.Errorf(`--device "": not an RDMA device name (such as mlx5_0 or rxe0; see /sys/class/infiniband)`)
	}
	if f.simGiven != "" && f.fabric != daemon.FabricSim {
		return fmt.Errorf("--%s is for --fabric %s (this is --fabric %s)", f.simGiven, daemon.FabricSim, f.fabric)
	}
	if len(f.devices) > 0 && f.fabric == daemon.FabricSim {
		return fmt.Errorf("--device selects RDMA devices of --fabric %s; with --fabric %s use --sim-devices", daemon.FabricUMAD, daemon.FabricSim)
	}
	for _, d := range f.devices {
		if d == "" || strings.ContainsAny(d, "/ \t") || d == "." || d == ".." {
			return fmt.Errorf("--device %q: not an RDMA device name (such as mlx5_0 or rxe0; see /sys/class/infiniband)", d)
		}
	}
	// A group that does not exist is a flag's error (64), found before
	// ucmd looks at the machine.
	return daemon.CheckStatusGroup(f.statusGroup)
}

func (f *serveFlags) config(g *globalFlags, logTo io.Writer) (daemon.Config, error) {
	if err := f.validate(); err != nil {
		return daemon.Config{}, err
	}
	log, err := f.logger(logTo)
	if err != nil {
		return daemon.Config{}, err
	}
	mode, err := strconv.ParseUint(f.mode, 8, 32)
	if err != nil || mode > 0o777 || mode == 0 {
		return daemon.Config{}, fmt.Errorf("--mode %q: want octal permissions such as 0666", f.mode)
	}
	// Each limit: not negative (0 is its default), and the copies below
	// MaxCopies, since a hung copy holds a thread and more could pass the
	// Go runtime's fatal limit, which would end every user's connections.
	for _, l := range []struct {
		flag string
		v    int64
		max  int64 // 0: none
	}{
		{"max-ids", int64(f.maxIDs), 0}, {"max-events", int64(f.maxEvents), 0}, {"user-ids", int64(f.userIDs), 0},
		{"user-events", int64(f.userEvents), 0}, {"user-files", int64(f.userFiles), 0}, {"user-waits", int64(f.userWaits), 0},
		{"user-copies", int64(f.userCopies), ucm.MaxCopies}, {"copies", int64(f.copies), ucm.MaxCopies},
		{"memory-budget", f.memoryBudget, 0},
	} {
		if l.v < 0 {
			return daemon.Config{}, fmt.Errorf("--%s %d: cannot be negative (0 is the default)", l.flag, l.v)
		}
		if l.max > 0 && l.v > l.max {
			return daemon.Config{}, fmt.Errorf("--%s %d: at most %d (each copy that hangs holds one of ucmd's threads, and the Go runtime ends a program past 10,000)", l.flag, l.v, l.max)
		}
	}
	// The budget is in bytes: a figure in MiB or GiB typed without its
	// unit would leave no room for a single client (a file alone is
	// charged 2 KiB), and every open would fail with ENOMEM.
	if f.memoryBudget > 0 && f.memoryBudget < minMemoryBudget {
		return daemon.Config{}, fmt.Errorf("--memory-budget %d: in bytes, at least %d (1 MiB); %d MiB would be %d",
			f.memoryBudget, minMemoryBudget, f.memoryBudget, f.memoryBudget<<20)
	}
	cfg := daemon.Config{
		Fabric:       f.fabric,
		Devices:      f.devices,
		SimDevices:   f.simDevices,
		SimIB:        f.simIB,
		WaitDevices:  f.waitDevices,
		FixedNumbers: f.fixedNumbers,
		NodeMode:     os.FileMode(mode),
		DevDir:       g.env.devDir,
		RuntimeDir:   g.runtimeDir,
		StatusGroup:  f.statusGroup,
		Version:      buildVersion(),
		Logger:       log,
		Env:          g.env.daemon,
		AutoMRA:      uint8(f.autoMRA),
	}
	cfg.MetricsListen = f.metrics
	cfg.Rescan = f.rescan
	cfg.Limits = ucm.Limits{
		MaxIDs: f.maxIDs, MaxEvents: f.maxEvents,
		UserIDs: f.userIDs, UserEvents: f.userEvents, UserFiles: f.userFiles, UserWaits: f.userWaits,
		UserCopies: f.userCopies, Copies: f.copies, MemoryBudget: f.memoryBudget,
	}
	return cfg, nil
}

func runServe(cmd *cobra.Command, g *globalFlags, f *serveFlags) error {
	// A log line to a stderr nobody reads any more (a pipe whose reader
	// exited, a journal stream cut) must not end the daemon: the runtime
	// kills on EPIPE at fd 2 unless SIGPIPE is ignored, and a lost log
	// line costs less than every client's connections.
	signal.Ignore(syscall.SIGPIPE)
	f.deviceGiven = cmd.Flags().Changed("device")
	for _, name := range []string{"sim-devices", "sim-ib"} {
		if cmd.Flags().Changed(name) {
			f.simGiven = name
		}
	}
	// Everything config refuses is a flag's value.
	cfg, err := f.config(g, cmd.ErrOrStderr())
	if err != nil {
		return usage(err)
	}
	if why := udevModeConflict(cfg.NodeMode); why != "" {
		cfg.Logger.Warn(why)
	}
	// ucmd loads no module itself (the unit's ExecStartPre lines do, with
	// their own privileges): whatever it was started with, it gives up
	// CAP_SYS_MODULE before it serves anyone.
	drop := g.env.dropCap
	if drop == nil {
		drop = dropCapability
	}
	if held, err := drop(unix.CAP_SYS_MODULE); errors.Is(err, syscall.ENOTSUP) {
		cfg.Logger.Warn("keeping CAP_SYS_MODULE: this ucmd was built with cgo, where Go cannot change every thread's capabilities; build it with CGO_ENABLED=0, as make build and the package do")
	} else if err != nil {
		cfg.Logger.Warn("could not drop CAP_SYS_MODULE", "err", err)
	} else if held {
		cfg.Logger.Debug("dropped CAP_SYS_MODULE")
	}
	if tid, err := sysmon.SetSlack(f.monitorSlack); err != nil {
		cfg.Logger.Warn("runtime monitor keeps the kernel's timer slack", "err", err)
	} else if tid != 0 {
		cfg.Logger.Debug("set the timer slack of the runtime's monitor thread", "tid", tid, "slack", f.monitorSlack)
	}
	stopCPU, err := recordTo(f.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	defer stopCPU()
	stopTrace, err := recordTo(f.traceFile, trace.Start, trace.Stop)
	if err != nil {
		return fmt.Errorf("--runtime-trace: %w", err)
	}
	defer stopTrace()
	// SIGHUP too: the Go runtime's default for it is to exit at once,
	// skipping the shutdown that tells clients and systemd (a closed
	// terminal; ucmd has nothing to reload).
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	base := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(base)
	// Every device's readers from the CPUs, fixed before any Ps are added
	// for them.
	cfg.IdleReaders = sysmon.IdleReaders(base)
	resize := func(d *daemon.Daemon) {
		blocked := d.MaxBlockedReaders()
		procs, raised := sysmon.SpareProcs(base, blocked)
		if raised {
			cfg.Logger.Debug("sized GOMAXPROCS for the CUSE readers", "gomaxprocs", procs)
		} else if short := sysmon.ProcsShort(procs, blocked); short > 0 {
			cfg.Logger.Warn("GOMAXPROCS from the environment leaves too few Ps for the CUSE readers waiting in read(2): the Go runtime will take Ps back from them, a thread wake-up per request when busy; unset it, or raise it",
				"gomaxprocs", procs, "waiting_readers", blocked, "gomaxprocs_needed", procs+short)
		}
	}
	// A rescan that served or retired a device: the readers' Ps follow, and
	// systemd's status line names the nodes.
	cfg.Changed = func(d *daemon.Daemon) {
		resize(d)
		st := "STATUS=serving " + strings.Join(d.Nodes(), " ")
		if len(d.Nodes()) == 0 {
			st = "STATUS=no RDMA device to serve; waiting for one"
		}
		sdnotify.Notify(st)
	}
	d, err := daemon.Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil && cmd.Context().Err() == nil {
			// A stop while waiting for devices at boot, or while
			// registering them, is a stop, not a failure of the unit.
			cfg.Logger.Info("stopped while starting", "why", err)
			sdnotify.Notify(sdnotify.Stopping)
			return nil
		}
		if daemon.KernelCMInTheWay(err) {
			return withStatus(exitUnavailable, err)
		}
		return err
	}
	resize(d)
	cfg.Logger.Info("ucmd ready", "version", cfg.Version, "fabric", cfg.Fabric, "nodes", d.Nodes(), "runtime_dir", cfg.RuntimeDir,
		"limits", cfg.Limits)
	// Type=notify: READY=1 only now, with every node in place (Start waits
	// for each), so units ordered after ucmd find them.
	if _, err := sdnotify.Notify(fmt.Sprintf("%s\nSTATUS=serving %s", sdnotify.Ready, strings.Join(d.Nodes(), " "))); err != nil {
		cfg.Logger.Warn("sd_notify READY=1", "err", err)
	}
	// systemd's watchdog counts from READY=1; ping at half its interval,
	// as sd_watchdog_enabled(3) advises.
	if every, ok, err := sdnotify.WatchdogInterval(); err != nil {
		cfg.Logger.Warn("systemd watchdog not fed", "err", err)
	} else if ok {
		cfg.Logger.Info("feeding systemd's watchdog", "interval", every)
		go watchdog(ctx, every/2, d.Probe, func() error {
			_, err := sdnotify.Notify(sdnotify.Watchdog)
			return err
		}, cfg.Logger)
	}
	select {
	case <-ctx.Done():
		cfg.Logger.Info("shutting down")
		sdnotify.Notify(sdnotify.Stopping)
		err := d.Close()
		cfg.Logger.Info("stopped")
		return err
	case err := <-d.Failed():
		sdnotify.Notify(sdnotify.Stopping)
		d.Close()
		return err
	}
}

// Rescan bounds: a look costs two directory reads in sysfs, more when
// something changed (docs/hotplug.md).
const (
	defaultRescan = 2 * time.Second
	minRescan     = 100 * time.Millisecond
)

func newServeCmd(g *globalFlags, f *serveFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "serve /dev/infiniband/ucmN for RDMA devices (the default command)",
		Long: `Serve /dev/infiniband/ucm0, ucm1, ... through CUSE, one per RDMA device in
the order the devices registered, running the IB connection manager over
the kernel's umad interface (or a simulated fabric with --fabric sim).

Needs /dev/cuse (modprobe cuse), root (CAP_SYS_ADMIN, CAP_SYS_PTRACE), and the
CM management class free on every port: the kernel's ib_cm (pulled in by
rdma_cm, rdma_ucm, ib_ipoib, ib_srpt, ...) must not be loaded.`,
		Example: `  sudo ucmd serve                            # every RDMA device with umad ports
  sudo ucmd serve --device mlx5_0 --fixed-numbers   # one device, as 231:224
  sudo ucmd serve --fabric sim --sim-devices 2      # no hardware: two simulated devices
  sudo ucmd serve --user-ids 1024 --log-level debug
  sudo ucmd serve --metrics-listen 127.0.0.1:9435   # Prometheus metrics at /metrics`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, g, f) },
	}
	f.register(cmd.Flags())
	return cmd
}
