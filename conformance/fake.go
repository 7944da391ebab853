package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/ucm"
	"golang.org/x/sys/unix"
)

// FakePid is the client thread of a Fake: all its files and memory.
const FakePid = 4242

// fakeTimeout bounds one request through the fake kernel.
const fakeTimeout = 10 * time.Second

// Fake is the DUT of unit tests: a ucm.Device on one simulated InfiniBand
// port (real clock, perfect fabric), served by the fake kernel of package
// cusetest, with in-memory caller memory.
type Fake struct {
	Kernel *cusetest.Kernel
	Device *ucm.Device
	CM     *cmcore.CM
	Sim    *sim.Device
	IDs    *ucm.IDTable
	Caller cuse.Caller

	mem *fakeMem
}

// FakeOptions adjust a Fake; the zero value is the default device.
type FakeOptions struct {
	// Limits are the device's per-file limits.
	Limits ucm.Limits
	// WrapMemory, if set, wraps the caller memory the device uses (the
	// test's view through Mem is unaffected), e.g. to stall or fail
	// copies.
	WrapMemory func(callermem.Memory) callermem.Memory
}

// NewFake builds a Fake; opts may be nil. Everything is torn down by tb's
// cleanup.
func NewFake(tb testing.TB, opts *FakeOptions) *Fake {
	tb.Helper()
	if opts == nil {
		opts = &FakeOptions{}
	}
	fab := sim.New(sim.Config{Seed: 1})
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
	dev, err := ucm.New(ucm.Config{CM: cm, Memory: devMem, IDs: ids, Limits: opts.Limits})
	if err != nil {
		tb.Fatal(err)
	}
	// Registered first, so it runs after the kernel's cleanup has released
	// every file.
	tb.Cleanup(func() { cm.Close() })
	k := cusetest.Start(tb, dev, &cusetest.Options{Memory: mem, Timeout: fakeTimeout})
	return &Fake{
		Kernel: k, Device: dev, CM: cm, Sim: sd, IDs: ids,
		Caller: cuse.Caller{Pid: FakePid, Uid: 1000, Gid: 1000},
		mem:    &fakeMem{f: mem, pid: FakePid},
	}
}

// Open implements DUT.
func (d *Fake) Open(nonblock bool) (File, error) {
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
	return &FakeFile{F: f, Caller: d.Caller}, nil
}

// Mem implements DUT.
func (d *Fake) Mem() Memory { return d.mem }

// LoopbackPath implements DUT: the simulated port to itself.
func (d *Fake) LoopbackPath() (abi.PathRec, bool) {
	a, err := d.Sim.Port(1).Attr()
	if err != nil || len(a.GIDs) == 0 {
		return abi.PathRec{}, false
	}
	return abi.PathRec{
		DGID: a.GIDs[0].GID, SGID: a.GIDs[0].GID, DLID: a.LID, SLID: a.LID,
		PKey: 0xffff, MTU: 4, Rate: 3, PacketLifeTime: 8, Reversible: 1, NumbPath: 1,
	}, true
}

// Close implements DUT; the test's cleanup does the work.
func (d *Fake) Close() error { return nil }

func wait(p *cusetest.Pending) (cusetest.Reply, error) {
	select {
	case <-p.Done():
		return p.Wait(), nil
	case <-time.After(fakeTimeout):
		return cusetest.Reply{}, fmt.Errorf("request %d unanswered after %v", p.Unique, fakeTimeout)
	}
}
