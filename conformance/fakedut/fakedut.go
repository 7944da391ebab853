// Package fakedut is the conformance suite's device under test for unit
// tests: a ucm.Device on one simulated InfiniBand port (real clock, perfect
// fabric), served by the fake kernel of package cusetest, with in-memory
// caller memory. It lives apart from package conformance so that the daemon,
// which runs the suite on real nodes, does not link the test machinery.
package fakedut

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/ucm"
	"golang.org/x/sys/unix"
)

// Pid is the client thread of a DUT: all its files and memory.
const Pid = 4242

// fakeTimeout bounds one request through the fake kernel.
const fakeTimeout = 10 * time.Second

// DUT is the fake device under test; it implements conformance.DUT.
type DUT struct {
	Kernel *cusetest.Kernel
	Device *ucm.Device
	CM     *cmcore.CM
	Sim    *sim.Device
	IDs    *ucm.IDTable
	Caller cuse.Caller

	mem *fakeMem
}

// Options adjust a DUT; the zero value is the default device.
type Options struct {
	// Limits are the device's per-file limits.
	Limits ucm.Limits
	// WrapMemory, if set, wraps the caller memory the device uses (the
	// test's view through Mem is unaffected), e.g. to stall or fail
	// copies.
	WrapMemory func(callermem.Memory) callermem.Memory
	// ThreadGroup is the device's ucm.Config.ThreadGroup: which process
	// each caller thread belongs to. nil puts every pid in a process of
	// its own (tgid = pid), so that no test reads the host's /proc.
	ThreadGroup ucm.ThreadGroupFunc
	// Logger is the device's ucm.Config.Logger (failed commands are
	// logged at debug level); nil is slog.Default().
	Logger *slog.Logger
	// Observer is the device's ucm.Config.Observer (command latency,
	// connection setup time); nil is none.
	Observer ucm.Observer
	// Deliver runs the CM's receive path as on hw/umad: the fabric's
	// endpoints deliver each MAD to the CM on a goroutine of their own,
	// in a buffer overwritten after the call (sim.Config.Deliver).
	Deliver bool
}

// ProcessName is every process's name on a DUT (ucm.Config.ProcessName),
// so that no test reads the host's /proc.
const ProcessName = "fakedut"

// New builds a DUT; opts may be nil. Everything is torn down by tb's
// cleanup.
func New(tb testing.TB, opts *Options) *DUT {
	tb.Helper()
	if opts == nil {
		opts = &Options{}
	}
	fab := sim.New(sim.Config{Seed: 1, Deliver: opts.Deliver})
	sd, err := fab.AddIB("sim0", 1)
	if err != nil {
		tb.Fatal(err)
	}
	cm := cmcore.New(sd, cmcore.Options{})
	if err := cm.Start(); err != nil {
		tb.Fatal(err)
	}
	mem := callermem.NewFake()
	var devMem callermem.Memory = mem
	if opts.WrapMemory != nil {
		devMem = opts.WrapMemory(mem)
	}
	ids := ucm.NewIDTable()
	tg := opts.ThreadGroup
	if tg == nil {
		tg = func(tid int) (int, error) { return tid, nil }
	}
	dev, err := ucm.New(ucm.Config{CM: cm, Memory: devMem, IDs: ids, Limits: opts.Limits, ThreadGroup: tg,
		ProcessName: func(int) (string, error) { return ProcessName, nil }, Logger: opts.Logger, Observer: opts.Observer})
	if err != nil {
		tb.Fatal(err)
	}
	// Registered first, so it runs after the kernel's cleanup has released
	// every file.
	tb.Cleanup(func() { cm.Close() })
	k := cusetest.Start(tb, dev, &cusetest.Options{Memory: mem, Timeout: fakeTimeout, Config: cuse.Config{MaxWrite: ucm.MaxWrite}})
	return &DUT{
		Kernel: k, Device: dev, CM: cm, Sim: sd, IDs: ids,
		Caller: cuse.Caller{Pid: Pid, Uid: 1000, Gid: 1000},
		mem:    &fakeMem{f: mem, pid: Pid},
	}
}

// Open implements DUT.
func (d *DUT) Open(nonblock bool) (conformance.File, error) {
	flags := uint32(unix.O_RDWR)
	if nonblock {
		flags |= unix.O_NONBLOCK
	}
	// Kernel.Open waits on the calling goroutine: open files from the
	// test's goroutine.
	f, errno := d.Kernel.Open(d.Caller, flags)
	if errno != 0 {
		return nil, errno
	}
	return &File{F: f, Caller: d.Caller}, nil
}

// Mem implements DUT.
func (d *DUT) Mem() conformance.Memory { return d.mem }

// LoopbackPath implements DUT: the simulated port to itself.
func (d *DUT) LoopbackPath() (abi.PathRec, bool) {
	a, err := d.Sim.Port(1).Attr()
	if err != nil || len(a.GIDs) == 0 {
		return abi.PathRec{}, false
	}
	return conformance.LoopbackPath(a.GIDs[0].GID, a.LID), true
}

// Close implements DUT; the test's cleanup does the work.
func (d *DUT) Close() error { return nil }

func wait(p *cusetest.Pending) (cusetest.Reply, error) {
	select {
	case <-p.Done():
		return p.Wait(), nil
	case <-time.After(fakeTimeout):
		return cusetest.Reply{}, fmt.Errorf("request %d unanswered after %v", p.Unique, fakeTimeout)
	}
}
