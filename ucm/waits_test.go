package ucm_test

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"github.com/ucmd/ucmd/ucm"
)

// waiting waits, up to the tests' bound, until d's files have n commands
// waiting, copy of them for a copy slot, and returns the counts last seen.
func waiting(d *fakedut.DUT, n, copy int) (int, int) {
	var w, cw int
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		w, cw = 0, 0
		for _, f := range d.Device.Files() {
			w += f.Waiting
			cw += f.CopyWaiting
		}
		if w == n && cw == copy {
			break
		}
	}
	return w, cw
}

// Each waiting command is a goroutine of the daemon's, where the kernel
// let the caller's thread wait: a user's waits are bounded by
// Limits.UserWaits (ENOMEM past it, at once, nothing taken) and charged to
// the memory budget; other users wait as before, an interrupted wait
// makes room, and the release gives everything back.
func TestUserWaitsBound(t *testing.T) {
	d := fakedut.New(t, &fakedut.Options{Limits: ucm.Limits{UserWaits: 3}})
	uid := d.Caller.Uid
	c, err := conformance.NewClient(d, false)
	must(t, err)
	before := d.Device.Budget().Usage().Bytes
	get := func(c *conformance.Client) *cusetest.Pending {
		b, _ := eventGet(c)
		return fake(c).WriteAsync(b)
	}
	var ps []*cusetest.Pending
	for range 3 {
		ps = append(ps, get(c))
	}
	if w, _ := waiting(d, 3, 0); w != 3 {
		t.Fatalf("%d GET_EVENTs waiting, want 3", w)
	}
	if u := d.Device.Budget().User(uid); u.Waits != 3 {
		t.Errorf("budget counts %d waits of the user, want 3", u.Waits)
	}
	if per := (d.Device.Budget().Usage().Bytes - before) / 3; per < 8<<10 {
		t.Errorf("a waiting command charges %d bytes, want at least its goroutine's 8 KiB stack", per)
	}

	if r := replyOf(t, get(c)); r.Errno != unix.ENOMEM {
		t.Fatalf("GET_EVENT past the user's 3 waits: %v, want ENOMEM", r.Errno)
	}

	d.Caller.Uid, d.Caller.Gid = uid+1, uid+1
	other, err := conformance.NewClient(d, false)
	must(t, err)
	otherGet := get(other)
	blocked(t, "another user's GET_EVENT", otherGet)

	d.Kernel.Interrupt(ps[0].Unique)
	if r := replyOf(t, ps[0]); r.Errno != unix.EINTR {
		t.Fatalf("interrupted GET_EVENT: %v, want EINTR", r.Errno)
	}
	d.Caller.Uid, d.Caller.Gid = uid, uid
	ps[0] = get(c)
	blocked(t, "GET_EVENT once an interrupt made room", ps[0])

	must(t, c.Close())
	for _, p := range ps {
		replyOf(t, p)
	}
	must(t, other.Close())
	replyOf(t, otherGet)
	if u := d.Device.Budget().User(uid); u != (ucm.UserUsage{UID: uid}) {
		t.Errorf("the user holds %+v after closing its file", u)
	}
	if b := d.Device.Budget().Usage().Bytes; b != 0 {
		t.Errorf("budget charges %d bytes with every file closed", b)
	}
}

// A command refused a wait for a copy slot fails as one whose copy
// failed: CREATE_ID with ENOMEM and no id made, DESTROY_ID (which has
// destroyed) with EFAULT, as the kernel for an answer it could not write.
func TestUserWaitsCopyRefused(t *testing.T) {
	h := &hangs{open: make(chan struct{})}
	d := fakedut.New(t, &fakedut.Options{WrapMemory: h.wrap, Limits: ucm.Limits{UserCopies: 1, UserWaits: 1}})
	t.Cleanup(h.release)
	uid := d.Caller.Uid
	c, err := conformance.NewClient(d, false)
	must(t, err)
	id, err := c.CreateID(1)
	must(t, err)
	create := func() *cusetest.Pending {
		return fake(c).WriteAsync(conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 2, Response: c.Mem.Alloc(abi.CreateIDRespSize)}))
	}
	h.armed.Store(true)
	hung := create()
	h.waitHung(1)
	queued := create()
	if w, cw := waiting(d, 1, 1); w != 1 || cw != 1 {
		t.Fatalf("%d commands waiting, %d for a copy; want 1 and 1", w, cw)
	}

	if r := replyOf(t, create()); r.Errno != unix.ENOMEM {
		t.Fatalf("CREATE_ID refused a wait for a copy slot: %v, want ENOMEM", r.Errno)
	}
	if u := d.Device.Budget().User(uid); u.IDs != 3 {
		t.Errorf("the user holds %d ids, want 3: the refused CREATE_ID's must be gone", u.IDs)
	}
	destroy := fake(c).WriteAsync(conformance.Encode(abi.CmdDestroyID, abi.DestroyIDRespSize, &abi.DestroyID{ID: id, Response: c.Mem.Alloc(abi.DestroyIDRespSize)}))
	if r := replyOf(t, destroy); r.Errno != unix.EFAULT {
		t.Fatalf("DESTROY_ID refused a wait for a copy slot: %v, want EFAULT", r.Errno)
	}

	h.armed.Store(false)
	h.release()
	for _, p := range []*cusetest.Pending{hung, queued} {
		if r := replyOf(t, p); r.Errno != 0 {
			t.Fatalf("CREATE_ID after the hang: %v", r.Errno)
		}
	}
	if _, err := c.AttrID(id); err == nil {
		t.Errorf("ATTR_ID of the id DESTROY_ID answered EFAULT for: still there")
	}
	if u := d.Device.Budget().User(uid); u.IDs != 2 || u.Waits != 0 {
		t.Errorf("the user holds %+v after the hang, want 2 ids and no waits", u)
	}
}
