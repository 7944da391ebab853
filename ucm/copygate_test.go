package ucm_test

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"github.com/ucmd/ucmd/internal/syncbuf"
	"github.com/ucmd/ucmd/ucm"
)

// hangs stalls every write into the caller's memory, whatever the
// address, until released, as a buffer mapped from a FUSE file whose
// server does not answer; it counts the writes stalled at once.
type hangs struct {
	callermem.Memory
	open     chan struct{}
	openOnce sync.Once
	in, most atomic.Int32
	armed    atomic.Bool
}

func (h *hangs) wrap(m callermem.Memory) callermem.Memory { h.Memory = m; return h }
func (h *hangs) release()                                 { h.openOnce.Do(func() { close(h.open) }) }

// waitHung waits, up to the tests' bound, until n writes hang.
func (h *hangs) waitHung(n int32) {
	for deadline := time.Now().Add(wait); h.in.Load() < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// sendSettled sends one command and waits, up to the tests' bound, until
// it hangs in its copy or waits for a copy slot: sent one at a time, the
// commands take the slots in the order sent, which a test may then count
// on (the server's readers would otherwise take them in any order).
func (h *hangs) sendSettled(d *fakedut.DUT, c *conformance.Client, cmd []byte) *cusetest.Pending {
	before := h.in.Load() + int32(copyWaiting(d))
	p := fake(c).WriteAsync(cmd)
	for deadline := time.Now().Add(wait); h.in.Load()+int32(copyWaiting(d)) <= before && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return p
}

// isDone reports whether p has been answered, without waiting.
func isDone(p *cusetest.Pending) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// copyWaiting is how many commands of the device's files wait for a copy
// slot.
func copyWaiting(d *fakedut.DUT) int {
	n := 0
	for _, f := range d.Device.Files() {
		n += f.CopyWaiting
	}
	return n
}

func (h *hangs) Write(pid int, addr uint64, b []byte) error {
	if h.armed.Load() {
		n := h.in.Add(1)
		for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
		}
		<-h.open
		h.in.Add(-1)
	}
	return h.Memory.Write(pid, addr, b)
}

// One user's copies that hang hold at most Limits.UserCopies of the
// daemon's copies (each a thread: the copy is a system call); the user's
// next ones wait without one, an interrupt ends such a wait with EINTR,
// and other users' commands go on. When the hang ends, every waiting copy
// is made.
func TestUserCopiesBoundHungCopies(t *testing.T) {
	h := &hangs{open: make(chan struct{})}
	d := fakedut.New(t, &fakedut.Options{WrapMemory: h.wrap, Limits: ucm.Limits{UserCopies: 2}})
	t.Cleanup(h.release)
	c, err := conformance.NewClient(d, false)
	must(t, err)
	h.armed.Store(true)
	var pending []*cusetest.Pending
	var resps []uint64
	for range 5 {
		resp := c.Mem.Alloc(abi.CreateIDRespSize)
		resps = append(resps, resp)
		pending = append(pending, h.sendSettled(d, c, conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: resp})))
	}
	h.waitHung(2)
	time.Sleep(50 * time.Millisecond) // time for a third to get in, were it let
	if n := h.most.Load(); n != 2 {
		t.Fatalf("%d copies of one user hung at once, want the limit of 2", n)
	}
	for _, p := range pending {
		blocked(t, "CREATE_ID behind hung copies", p)
	}

	// A waiting copy's command is interrupted: EINTR, and its id is gone
	// with it, as after a copy that failed.
	e := pending[4]
	d.Kernel.Interrupt(e.Unique)
	if r := replyOf(t, e); r.Errno != unix.EINTR {
		t.Fatalf("interrupted CREATE_ID waiting to copy: %v, want EINTR", r.Errno)
	}

	// Another user is not held up.
	d.Caller.Uid, d.Caller.Gid = 1001, 1001
	other, err := conformance.NewClient(d, false)
	must(t, err)
	h.armed.Store(false)
	done := make(chan error, 1)
	go func() { _, err := other.CreateID(2); done <- err }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(wait):
		t.Fatal("another user's CREATE_ID not answered while one user's copies hang")
	}

	h.release()
	ids := map[uint32]bool{}
	for i, p := range pending[:4] {
		if r := replyOf(t, p); r.Errno != 0 {
			t.Fatalf("CREATE_ID %d after the hang: %v", i, r.Errno)
		}
		var r abi.CreateIDResp
		r.Decode(c.Mem.Read(resps[i], abi.CreateIDRespSize))
		ids[r.ID] = true
	}
	if len(ids) != 4 {
		t.Errorf("ids %v after the hang, want 4 distinct", ids)
	}
}

// DESTROY_ID destroys before it copies its answer out. Interrupted while
// it waits for a copy slot, it answers EFAULT, as the kernel did for an
// answer it could not write: the id is gone, and EINTR would say that
// nothing happened.
func TestUserCopiesDestroyInterrupted(t *testing.T) {
	h := &hangs{open: make(chan struct{})}
	d := fakedut.New(t, &fakedut.Options{WrapMemory: h.wrap, Limits: ucm.Limits{UserCopies: 1}})
	t.Cleanup(h.release)
	c, err := conformance.NewClient(d, false)
	must(t, err)
	id, err := c.CreateID(1)
	must(t, err)
	h.armed.Store(true)
	hung := fake(c).WriteAsync(conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 2, Response: c.Mem.Alloc(abi.CreateIDRespSize)}))
	h.waitHung(1)
	destroy := fake(c).WriteAsync(conformance.Encode(abi.CmdDestroyID, abi.DestroyIDRespSize, &abi.DestroyID{ID: id, Response: c.Mem.Alloc(abi.DestroyIDRespSize)}))
	blocked(t, "DESTROY_ID waiting to copy", destroy)
	d.Kernel.Interrupt(destroy.Unique)
	if r := replyOf(t, destroy); r.Errno != unix.EFAULT {
		t.Fatalf("DESTROY_ID interrupted waiting to copy: %v, want EFAULT", r.Errno)
	}
	h.armed.Store(false)
	h.release()
	if r := replyOf(t, hung); r.Errno != 0 {
		t.Fatalf("CREATE_ID after the hang: %v", r.Errno)
	}
	if _, err := c.AttrID(id); err == nil {
		t.Errorf("ATTR_ID of the id DESTROY_ID answered EFAULT for: still there")
	}
}

// A copy that waits a second for a slot is logged: at Warn the first time
// for the user's slots, at Debug after that.
func TestUserCopiesSlowWaitLogged(t *testing.T) {
	h := &hangs{open: make(chan struct{})}
	var logs syncbuf.Buffer
	d := fakedut.New(t, &fakedut.Options{WrapMemory: h.wrap, Limits: ucm.Limits{UserCopies: 1},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	t.Cleanup(h.release)
	c, err := conformance.NewClient(d, false)
	must(t, err)
	h.armed.Store(true)
	create := func() *cusetest.Pending {
		return fake(c).WriteAsync(conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: c.Mem.Alloc(abi.CreateIDRespSize)}))
	}
	var ps []*cusetest.Pending
	for range 3 {
		ps = append(ps, create()) // one hangs, two wait
	}
	const msg = "copies into its processes' memory hang"
	deadline := time.Now().Add(wait)
	for strings.Count(logs.String(), msg) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN msg=\"ucm: a user's "+msg); n != 1 {
		t.Errorf("%d warnings of copies waiting, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "level=DEBUG msg=\"ucm: a user's "+msg); n != 1 {
		t.Errorf("%d debug lines of copies waiting, want 1:\n%s", n, out)
	}
	h.release()
	for _, p := range ps {
		if r := replyOf(t, p); r.Errno != 0 {
			t.Fatalf("CREATE_ID after the hang: %v", r.Errno)
		}
	}
}

// Copies that hang are bounded across users too (Limits.Copies): one
// person may have many uids (a user namespace on its subordinate uids),
// and each uid's own slots would let them take as many of the daemon's
// threads. Past the bound a copy waits whoever's it is, the wait is
// logged, an interrupt ends it (EINTR), and the hung copies complete when
// the hang ends.
func TestCopiesBoundAcrossUsers(t *testing.T) {
	h := &hangs{open: make(chan struct{})}
	var logs syncbuf.Buffer
	d := fakedut.New(t, &fakedut.Options{WrapMemory: h.wrap, Limits: ucm.Limits{UserCopies: 2, Copies: 3},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(h.release)
	var pending []*cusetest.Pending
	h.armed.Store(true)
	for uid := uint32(2000); uid < 2003; uid++ {
		d.Caller.Uid, d.Caller.Gid = uid, uid
		c, err := conformance.NewClient(d, false)
		must(t, err)
		for range 2 {
			pending = append(pending, h.sendSettled(d, c, conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: c.Mem.Alloc(abi.CreateIDRespSize)})))
		}
	}
	h.waitHung(3)
	time.Sleep(50 * time.Millisecond) // time for a fourth to get in, were it let
	if n := h.most.Load(); n != 3 {
		t.Fatalf("%d copies of 3 users hung at once, want the daemon's limit of 3", n)
	}
	if waitCopies := copyWaiting(d); waitCopies != 3 {
		t.Errorf("status shows %d commands waiting for a copy, want 3", waitCopies)
	}
	// Whose copies hang: the users holding the daemon's slots, not the
	// ones waiting for them.
	if n, max := d.Device.Budget().Copies(); n != 3 || max != 3 {
		t.Errorf("%d copies in progress of %d, want 3 of 3", n, max)
	}
	var copying []int
	for _, u := range d.Device.Budget().Users() {
		copying = append(copying, u.Copies)
	}
	if !slices.Equal(copying, []int{2, 1, 0}) {
		t.Errorf("copies in progress by uid 2000, 2001, 2002: %v, want [2 1 0]", copying)
	}
	const msg = `level=WARN msg="ucm: copies of many users into their processes' memory hang`
	for deadline := time.Now().Add(wait); !strings.Contains(logs.String(), msg) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), msg) {
		t.Errorf("no warning of every user's copies waiting:\n%s", logs.String())
	}

	// Interrupted, the three waiting ones answer EINTR; the hung ones
	// cannot be, and complete once the hang ends.
	for _, p := range pending {
		d.Kernel.Interrupt(p.Unique)
	}
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		n := 0
		for _, p := range pending {
			if isDone(p) {
				n++
			}
		}
		if n >= 3 {
			break
		}
	}
	var hung []*cusetest.Pending
	eintr := 0
	for _, p := range pending {
		if !isDone(p) {
			hung = append(hung, p)
		} else if r := p.Wait(); r.Errno == unix.EINTR {
			eintr++
		} else {
			t.Errorf("interrupted CREATE_ID waiting for a copy: %v, want EINTR", r.Errno)
		}
	}
	if eintr != 3 || len(hung) != 3 {
		t.Fatalf("interrupted: %d answered EINTR and %d hung, want 3 and 3", eintr, len(hung))
	}
	h.release()
	for i, p := range hung {
		if r := replyOf(t, p); r.Errno != 0 {
			t.Fatalf("hung CREATE_ID %d after the hang: %v", i, r.Errno)
		}
	}
}
