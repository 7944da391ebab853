package ucm

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
)

// Config describes a Device.
type Config struct {
	// CM is the communication manager of the RDMA device served (started
	// by the caller). Required.
	CM *cmcore.CM
	// Memory reaches the callers' memory: callermem.ProcessVM{} in the
	// daemon, a *callermem.Fake in tests. Required.
	Memory callermem.Memory
	// IDs is the daemon-wide id space; nil gives this device its own.
	IDs *IDTable
	// Limits bound each open file; their per-user and daemon limits
	// apply when Budget is nil.
	Limits Limits
	// Budget counts every user's ids, events and files against the
	// per-user limits and the memory budget: give the same one to every
	// Device of a daemon (like IDs). nil gives this device its own, made
	// from Limits.
	Budget *Budget
	// Logger receives events that had to be dropped and similar trouble;
	// nil means slog.Default().
	Logger *slog.Logger
	// ThreadGroup finds a writing thread's process, for the check that
	// only the opener's threads write to a file (cred.go); nil means
	// ProcThreadGroup. Tests give a fake.
	ThreadGroup ThreadGroupFunc
	// ProcessName names a process (its comm), read once per open file
	// for `ucmd status` and the failed-command log; nil means
	// ProcProcessName. Tests give a fake.
	ProcessName ProcessNameFunc
	// Observer, when non-nil, is told every command's latency and every
	// connection's setup time (the metrics endpoint's histograms). nil,
	// the default, reads no clock for it: one nil check per command.
	Observer Observer
}

// Device is one /dev/infiniband/ucmN: it implements cuse.Device.
type Device struct {
	cm     *cmcore.CM
	mem    callermem.Memory
	ids    *IDTable
	budget *Budget
	limits Limits
	log    *slog.Logger
	// threadGroup is Config.ThreadGroup or ProcThreadGroup.
	threadGroup ThreadGroupFunc
	processName ProcessNameFunc
	fails       *failures // failed commands: counts by errno, the debug log
	obs         Observer  // Config.Observer, nil for none
	// handler is d.handle as a cmcore.Handler, made once: a method value
	// allocates each time it is taken.
	handler cmcore.Handler

	filesMu sync.Mutex
	files   map[*file]struct{} // open files, for Files

	lossWarn, credWarn spacedWarn // lost events (file.warn); unread thread groups (openWriters)
}

// spacedWarn lets one of a kind of log line through at Warn a minute, the
// rest at Debug: what a client can trigger at will must not flood the log.
type spacedWarn struct {
	mu   sync.Mutex
	last time.Time
}

// spacedWarnEvery is how often a spacedWarn lets a Warn through.
const spacedWarnEvery = time.Minute

// level is the level of a line logged now.
func (w *spacedWarn) level(now time.Time) slog.Level {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.last.IsZero() && now.Sub(w.last) < spacedWarnEvery {
		return slog.LevelDebug
	}
	w.last = now
	return slog.LevelWarn
}

var _ cuse.Device = (*Device)(nil)

// MaxWrite is the max_write a Device's CUSE server must ask for
// (cuse.Config.MaxWrite): the longest write(2) of a command, its 8-byte
// header and the 65,535 bytes a 16-bit hdr.in can name. The kernel splits
// a longer write into requests of max_write bytes each, and a command cut
// in two fails (hdr.in + 8 > len: EINVAL) where ucm.c took it whole.
const MaxWrite = abi.HeaderSize + math.MaxUint16

// New returns the device for cfg.CM.
func New(cfg Config) (*Device, error) {
	if cfg.CM == nil || cfg.Memory == nil {
		return nil, errors.New("ucm: Config needs a CM and a Memory")
	}
	d := &Device{cm: cfg.CM, mem: cfg.Memory, ids: cfg.IDs, limits: cfg.Limits.withDefaults(), log: cfg.Logger}
	if d.ids == nil {
		d.ids = NewIDTable()
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.budget = cfg.Budget
	if d.budget == nil {
		d.budget = NewBudget(cfg.Limits, d.log)
	}
	d.handler = d.handle
	d.threadGroup = cfg.ThreadGroup
	if d.threadGroup == nil {
		d.threadGroup = ProcThreadGroup
	}
	d.fails = newFailures(d.log)
	d.obs = cfg.Observer
	d.processName = cfg.ProcessName
	if d.processName == nil {
		d.processName = ProcProcessName
	}
	d.files = make(map[*file]struct{})
	d.cm.OnReleased(d.released)
	return d, nil
}

// released is the CM's release hook (cmcore.CM.OnReleased): an id torn
// down while its connection's timewait ran is let go at last, and its
// charge refunded (file.lingered).
func (d *Device) released(ctx any) {
	c, _ := ctx.(*ucmCtx)
	if c == nil {
		return
	}
	c.file.lingered(c, false)
}

// Open implements cuse.Device: every open(2) gets its own file state. As
// the kernel, it checks nothing beyond what the node's mode allowed, but
// the opener's uid must be below its limit of open files (EMFILE) and the
// daemon within its memory budget (ENOMEM); see Budget.take.
func (d *Device) Open(_ context.Context, req cuse.Request, w cuse.Waker) (cuse.Handle, error) {
	if err := d.budget.take(req.Caller.Uid, fileCharge); err != nil {
		return nil, err
	}
	f := newFile(d, req, w)
	d.filesMu.Lock()
	d.files[f] = struct{}{}
	d.filesMu.Unlock()
	return f, nil
}

// Budget returns the budget the device charges (Config.Budget or its own).
func (d *Device) Budget() *Budget { return d.budget }
