// Package daemontest runs the whole daemon without a kernel: its Env
// registers every device with a fake CUSE kernel (cuse/cusetest) instead
// of /dev/cuse, gives the devices in-memory caller memory, skips the
// preflight checks and creates each device node as a plain file in a
// temporary DevDir, so that daemon.Start with --fabric sim serves, reports
// status and shuts down in a unit test. Files are opened through Kernel or
// DUT, which is the conformance suite's view of a node.
package daemontest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"github.com/ucmd/ucmd/internal/daemon"
	"golang.org/x/sys/unix"
)

// Pid is the client thread of every file opened through a DUT; Tgid is
// its process (the fake ThreadGroup's answer for Pid), ProcessName that
// process's name: what `ucmd status` shows for the file.
const (
	Pid         = 4242
	Tgid        = 4200
	ProcessName = "fakedut"
)

// Timeout bounds one request through the fake kernel.
const Timeout = 10 * time.Second

// Fake is a machine without a kernel. Set its fields before Start.
type Fake struct {
	// DevDir is where the nodes are created (daemon.Config.DevDir).
	DevDir string
	// Mem is the caller memory of every device.
	Mem *callermem.Fake
	// Preflight, if set, is the daemon's preflight check (nil: none).
	Preflight func() error
	// Refuse, if set, is asked before each registration: an error is the
	// kernel refusing it (a name or device number in use, say).
	Refuse func(cuse.Config) error

	t        testing.TB
	mu       sync.Mutex
	channels map[string]*Channel
	numbers  map[[2]uint32]string // device numbers registered, to their DevName
}

// dynamicMajors are the majors the fake hands out for major 0, in order,
// as fs/char_dev.c does: the first with no minor registered.
var dynamicMajors = func() []uint32 {
	var m []uint32
	for i := uint32(254); i >= 234; i-- {
		m = append(m, i)
	}
	for i := uint32(511); i >= 384; i-- {
		m = append(m, i)
	}
	return m
}()

// New returns a Fake with a fresh DevDir and caller memory.
func New(t testing.TB) *Fake {
	return &Fake{t: t, DevDir: t.TempDir(), Mem: callermem.NewFake(), channels: map[string]*Channel{}, numbers: map[[2]uint32]string{}}
}

// Env is the daemon.Env of the fake machine.
func (f *Fake) Env() daemon.Env {
	return daemon.Env{
		Preflight: func() error {
			if f.Preflight != nil {
				return f.Preflight()
			}
			return nil
		},
		Register: f.register,
		Memory:   f.Mem,
		// No test reads the host's /proc.
		ThreadGroup: func(tid int) (int, error) {
			if tid == Pid {
				return Tgid, nil
			}
			return tid, nil
		},
		ProcessName: func(pid int) (string, error) {
			if pid == Tgid {
				return ProcessName, nil
			}
			return fmt.Sprintf("client%d", pid), nil
		},
		NodeNumber: f.nodeNumber,
	}
}

// Number returns the device number registered as devName
// ("infiniband/ucm0"); ok is false if none is.
func (f *Fake) Number(devName string) (major, minor uint32, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for n, name := range f.numbers {
		if name == devName {
			return n[0], n[1], true
		}
	}
	return 0, 0, false
}

func (f *Fake) nodeNumber(path string) (major, minor uint32, err error) {
	rel, err := filepath.Rel(f.DevDir, path)
	if err != nil {
		return 0, 0, err
	}
	if major, minor, ok := f.Number(rel); ok {
		return major, minor, nil
	}
	return 0, 0, fmt.Errorf("%s: %w", path, unix.ENOENT)
}

// number registers cfg's device number as the kernel does for CUSE: major
// 0 takes the first dynamic major with no minor registered, any other
// exactly Major:Minor, EBUSY if taken.
func (f *Fake) number(cfg cuse.Config) ([2]uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := [2]uint32{cfg.Major, cfg.Minor}
	if n[0] == 0 {
		used := map[uint32]bool{}
		for k := range f.numbers {
			used[k[0]] = true
		}
		for _, m := range dynamicMajors {
			if !used[m] {
				n[0] = m
				break
			}
		}
		if n[0] == 0 {
			return n, fmt.Errorf("no dynamic major left: %w", unix.EBUSY)
		}
	}
	if name, ok := f.numbers[n]; ok {
		return n, fmt.Errorf("%d:%d is %s's: %w", n[0], n[1], name, unix.EBUSY)
	}
	f.numbers[n] = cfg.DevName
	return n, nil
}

func (f *Fake) unnumber(n [2]uint32) {
	f.mu.Lock()
	delete(f.numbers, n)
	f.mu.Unlock()
}

// Config completes cfg for the fake machine: its Env and DevDir.
func (f *Fake) Config(cfg daemon.Config) daemon.Config {
	cfg.Env = f.Env()
	cfg.DevDir = f.DevDir
	return cfg
}

func (f *Fake) register(_ context.Context, cfg cuse.Config, dev cuse.Device) (daemon.Channel, error) {
	if f.Refuse != nil {
		if err := f.Refuse(cfg); err != nil {
			return nil, err
		}
	}
	num, err := f.number(cfg)
	if err != nil {
		return nil, err
	}
	k := cusetest.Start(f.t, dev, &cusetest.Options{Config: cfg, Memory: f.Mem, Timeout: Timeout})
	// What devtmpfs would create: a file the daemon can chmod and stat.
	node := filepath.Join(f.DevDir, cfg.DevName)
	if err := os.MkdirAll(filepath.Dir(node), 0o755); err != nil {
		k.Close()
		f.unnumber(num)
		return nil, err
	}
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		k.Close()
		f.unnumber(num)
		return nil, err
	}
	c := &Channel{Kernel: k, node: node, fail: make(chan error, 1), closed: make(chan struct{}), release: func() { f.unnumber(num) }}
	f.mu.Lock()
	f.channels[cfg.DevName] = c
	f.mu.Unlock()
	return c, nil
}

// Channel returns the channel registered as devName ("infiniband/ucm0"),
// or nil.
func (f *Fake) Channel(devName string) *Channel {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.channels[devName]
}

// Channel is a device registered with the fake kernel; it implements
// daemon.Channel.
type Channel struct {
	// Kernel is the fake kernel the device is registered with.
	Kernel *cusetest.Kernel

	node    string
	fail    chan error
	once    sync.Once
	closed  chan struct{}
	err     error
	release func() // its device number
}

// MaxBlockedReaders is the served cuse.Server's, as on a real channel
// (daemon.Daemon.MaxBlockedReaders sums them for cmd/ucmd's Ps).
func (c *Channel) MaxBlockedReaders() int { return c.Kernel.Server().MaxBlockedReaders() }

// Serve implements daemon.Channel: the fake kernel serves the device
// already; Serve returns when the channel is closed or fails.
func (c *Channel) Serve() error {
	select {
	case <-c.closed:
		return cuse.ErrServerClosed
	case err := <-c.fail:
		return err
	}
}

// Close implements daemon.Channel: the server answers what is in flight,
// releases every open file and stops.
func (c *Channel) Close() error {
	c.once.Do(func() {
		// The server's Close, not the kernel's: that one waits for what
		// Serve returned, which the kernel's test cleanup may have taken
		// already (if it ran first).
		c.err = c.Kernel.Server().Close()
		// The kernel removes a CUSE device's node and number with its
		// channel.
		os.Remove(c.node)
		c.release()
		close(c.closed)
	})
	return c.err
}

// Fail makes Serve return err, as when the kernel aborts the connection.
func (c *Channel) Fail(err error) {
	select {
	case c.fail <- err:
	default:
	}
}

// DUT returns the conformance suite's device under test for the node
// registered as devName, with loopback as its path to itself (nil: none,
// connecting cases skip). Its files are those of fakedut, thread Pid.
func (f *Fake) DUT(devName string, loopback *abi.PathRec) (conformance.DUT, error) {
	c := f.Channel(devName)
	if c == nil {
		return nil, fmt.Errorf("daemontest: no device %q registered", devName)
	}
	return &dut{k: c.Kernel, mem: &memory{f: f.Mem}, loopback: loopback}, nil
}

type dut struct {
	k        *cusetest.Kernel
	mem      *memory
	loopback *abi.PathRec
}

var caller = cuse.Caller{Pid: Pid, Uid: 1000, Gid: 1000}

func (d *dut) Open(nonblock bool) (conformance.File, error) {
	flags := uint32(unix.O_RDWR)
	if nonblock {
		flags |= unix.O_NONBLOCK
	}
	// Kernel.Open waits on the calling goroutine: open files from the
	// test's goroutine.
	f, errno := d.k.Open(caller, flags)
	if errno != 0 {
		return nil, errno
	}
	return &fakedut.File{F: f, Caller: caller}, nil
}

func (d *dut) Mem() conformance.Memory { return d.mem }

func (d *dut) LoopbackPath() (abi.PathRec, bool) {
	if d.loopback == nil {
		return abi.PathRec{}, false
	}
	return *d.loopback, true
}

func (d *dut) Close() error { return nil }

// memory is conformance.Memory over the fake caller memory of Pid.
type memory struct {
	f    *callermem.Fake
	once sync.Once
	bad  uint64
}

func (m *memory) Alloc(n int) uint64 { return m.f.Alloc(Pid, n) }

func (m *memory) Bad() uint64 {
	m.once.Do(func() {
		m.bad = m.f.Alloc(Pid, 1)
		m.f.Unmap(Pid, m.bad, 1)
	})
	return m.bad
}

func (m *memory) Read(addr uint64, n int) []byte {
	b, err := m.f.Bytes(Pid, addr, n)
	if err != nil {
		panic(err) // addr must come from Alloc
	}
	return b
}

func (m *memory) Write(addr uint64, b []byte) {
	if err := m.f.Write(Pid, addr, b); err != nil {
		panic(err)
	}
}
