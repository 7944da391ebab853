package ucm_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/internal/syncbuf"
	"golang.org/x/sys/unix"
)

// procs is a fake process table for the device's ThreadGroup lookup: it
// counts lookups per thread, and its memory view gives every thread (and
// a forked child: fork copies the address space) the opener's memory.
type procs struct {
	mu      sync.Mutex
	tgid    map[int]int
	lookups map[int]int
}

func newProcs(tgid map[int]int) *procs { return &procs{tgid: tgid, lookups: make(map[int]int)} }

func (p *procs) threadGroup(tid int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lookups[tid]++
	g, ok := p.tgid[tid]
	if !ok {
		return 0, fmt.Errorf("no thread %d: %w", tid, unix.ENOENT)
	}
	return g, nil
}

func (p *procs) count(tid int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lookups[tid]
}

// sameMem maps every pid to the opener's address space.
type sameMem struct{ callermem.Memory }

func (m sameMem) Read(_ int, addr uint64, b []byte) error { return m.Memory.Read(fakedut.Pid, addr, b) }
func (m sameMem) Write(_ int, addr uint64, b []byte) error {
	return m.Memory.Write(fakedut.Pid, addr, b)
}

const (
	otherThread = fakedut.Pid + 1 // a second thread of the opener
	forkedChild = 5000            // a process forked by the opener
)

func credDUT(t *testing.T, p *procs) (*fakedut.DUT, *conformance.Client) {
	t.Helper()
	d := fakedut.New(t, &fakedut.Options{
		ThreadGroup: p.threadGroup,
		WrapMemory:  func(m callermem.Memory) callermem.Memory { return sameMem{m} },
	})
	c, err := conformance.NewClient(d, false)
	must(t, err)
	return d, c
}

// Issue 12 point 4: a forked child (or a program it execs) writing to an
// inherited fd gets EACCES for every command, as with the kernel's
// ib_safe_file_access, though its uid and gid are the opener's; another
// thread of the opener may write. Each thread is looked up once.
func TestWriteFromOtherProcess(t *testing.T) {
	p := newProcs(map[int]int{fakedut.Pid: fakedut.Pid, otherThread: fakedut.Pid, forkedChild: forkedChild})
	d, c := credDUT(t, p)
	id, err := c.CreateID(0xa)
	must(t, err)

	ff := fake(c)
	ff.Caller.Pid = forkedChild
	for round := 0; round < 3; round++ {
		_, err = c.CreateID(0xc)
		wantErrno(t, "child's CREATE_ID", err, unix.EACCES)
		_, err = c.AttrID(id)
		wantErrno(t, "child's ATTR_ID of the parent's id", err, unix.EACCES)
		_, err = c.DestroyID(id)
		wantErrno(t, "child's DESTROY_ID of the parent's id", err, unix.EACCES)
		wantErrno(t, "child's LISTEN", c.Listen(id, 0x1000, 0), unix.EACCES)
	}
	if n := p.count(forkedChild); n != 1 {
		t.Errorf("the child was looked up %d times, want once", n)
	}
	if n := d.IDs.Len(); n != 1 {
		t.Errorf("%d ids after the child's attempts, want the parent's 1", n)
	}

	ff.Caller.Pid = otherThread
	tid, err := c.CreateID(0xb)
	must(t, err)
	_, err = c.AttrID(id)
	must(t, err)
	_, err = c.DestroyID(tid)
	must(t, err)
	if n := p.count(otherThread); n != 1 {
		t.Errorf("the second thread was looked up %d times, want once", n)
	}

	ff.Caller.Pid = fakedut.Pid
	n, err := c.DestroyID(id)
	must(t, err)
	if n != 0 {
		t.Errorf("events_reported %d, want 0", n)
	}
	if n := p.count(fakedut.Pid); n != 1 {
		t.Errorf("the opener was looked up %d times, want once (at open)", n)
	}
}

// The opener's other threads are still bound by the uid/gid check (an
// opener that changed credentials was refused too).
func TestOtherThreadOtherCredentials(t *testing.T) {
	p := newProcs(map[int]int{fakedut.Pid: fakedut.Pid, otherThread: fakedut.Pid})
	_, c := credDUT(t, p)
	ff := fake(c)
	ff.Caller.Pid = otherThread
	ff.Caller.Gid++
	_, err := c.CreateID(0)
	wantErrno(t, "CREATE_ID from a thread with another gid", err, unix.EACCES)
}

// The group leader (tid == tgid) needs no lookup, even when another
// thread opened the file.
func TestLeaderOfAnotherOpener(t *testing.T) {
	p := newProcs(map[int]int{fakedut.Pid: 4000, 4000: 4000})
	_, c := credDUT(t, p)
	fake(c).Caller.Pid = 4000
	_, err := c.CreateID(0)
	must(t, err)
	if n := p.count(4000); n != 0 {
		t.Errorf("the leader was looked up %d times, want 0", n)
	}
}

// A thread whose group cannot be read is refused, and not cached: the
// next write looks again.
func TestUnknownWriterRefused(t *testing.T) {
	p := newProcs(map[int]int{fakedut.Pid: fakedut.Pid})
	_, c := credDUT(t, p)
	fake(c).Caller.Pid = 6000
	for range 2 {
		_, err := c.CreateID(0)
		wantErrno(t, "CREATE_ID from an unknown thread", err, unix.EACCES)
	}
	if n := p.count(6000); n != 2 {
		t.Errorf("%d lookups, want 2 (failures are not cached)", n)
	}
}

// A writer outside our pid namespace (pid 0) is another process when the
// opener was visible: every thread of a process shares its namespace.
func TestInvisibleWriterOfVisibleOpener(t *testing.T) {
	p := newProcs(map[int]int{fakedut.Pid: fakedut.Pid})
	_, c := credDUT(t, p)
	fake(c).Caller.Pid = 0
	_, err := c.Raw(conformance.Encode(abi.CmdCreateID, 4, &abi.CreateID{Response: 0x1000}))
	wantErrno(t, "CREATE_ID from pid 0", err, unix.EACCES)
}

// When the opener's group cannot be learnt at open, only uid and gid are
// checked, as before.
func TestOpenerGroupUnknown(t *testing.T) {
	p := newProcs(map[int]int{})
	_, c := credDUT(t, p)
	fake(c).Caller.Pid = forkedChild
	_, err := c.CreateID(0)
	must(t, err)
}

// An opener whose thread group cannot be read (killed during its open)
// is logged at Warn once a minute per device, not once an open: a client
// can do it in a loop.
func TestUnreadThreadGroupWarnsSpaced(t *testing.T) {
	logs := &syncbuf.Buffer{}
	d := fakedut.New(t, &fakedut.Options{
		ThreadGroup: func(int) (int, error) { return 0, unix.ENOENT },
		Logger:      slog.New(slog.NewTextHandler(logs, nil)),
	})
	for range 10 {
		c, err := conformance.NewClient(d, false)
		must(t, err)
		must(t, c.Close())
	}
	if n := strings.Count(logs.String(), `level=WARN msg="ucm: cannot read the opener's thread group`); n != 1 {
		t.Errorf("10 opens whose thread group could not be read: %d Warn lines, want 1\n%s", n, logs.String())
	}
}
