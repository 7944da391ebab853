package ucm

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cuse/callermem"
	"golang.org/x/sys/unix"
)

// call is one command in flight: the file and the thread blocked in
// write(2), whose memory the command may touch until it answers. Calls
// are pooled, with the command decoded into their own structs (dec) and
// their response encoded in out, so that a command that creates nothing
// allocates nothing.
type call struct {
	f        *file
	ctx      context.Context // the request's: cancelled on INTERRUPT
	pid      int             // the writing thread, whose memory the pointers address
	nonblock bool            // the file is O_NONBLOCK: GET_EVENT does not wait

	dec  abi.Decoder
	out  [max(abi.EventRespSize, abi.QPAttrSize, abi.AttrIDRespSize)]byte
	segs [3]callermem.Seg // GET_EVENT's copies: response, data, info
}

var calls = sync.Pool{New: func() any { return new(call) }}

// newCall takes a call from the pool for a command of f's by thread pid.
func newCall(ctx context.Context, f *file, pid int, nonblock bool) *call {
	c := calls.Get().(*call)
	c.ctx, c.f, c.pid, c.nonblock = ctx, f, pid, nonblock
	return c
}

// done returns c to the pool: the command it decoded is no longer valid.
func (c *call) done() {
	c.ctx, c.f, c.segs = nil, nil, [3]callermem.Seg{} // keep no file or event alive
	calls.Put(c)
}

// enterCopy takes one of the file's user's copy slots and one of every
// user's (copySlots), what stands between copies that hang and the
// daemon's threads, waiting for them if all are taken; leaveCopy gives
// both back. Free slots cost a compare-and-swap each way, each.
//
// A command of a released file copies no more: a file is released while
// a command is in flight only when the daemon lets its channel go (a
// shutdown, or a channel aborted while an earlier copy hung), and then
// the kernel has answered the caller, who may already use that memory for
// something else. (An interrupt answers nothing by itself: the command
// decides, and DESTROY_ID completes and copies its answer as the kernel's
// did.)
func (c *call) enterCopy(what string) error {
	f := c.f
	select {
	case <-f.done:
		return fmt.Errorf("%s: %w", what, errReleased)
	default:
	}
	if f.copies.take() {
		if f.all.take() {
			return nil
		}
		f.copies.leave()
	}
	return c.waitCopy(what)
}

// waitCopy is enterCopy's slow path: the user's slot first, then one of
// all users', never the other way, so that no two waits can hold what
// the other waits for.
func (c *call) waitCopy(what string) error {
	f := c.f
	if err := f.beginWait(); err != nil {
		return fmt.Errorf("%s: all of the user's %d copies in progress: %w", what, f.copies.max, err)
	}
	f.copyWaits.Add(1)
	defer func() {
		f.copyWaits.Add(-1)
		f.endWait()
	}()
	if err := f.copies.wait(c.ctx, f.done, c.slowCopy); err != nil {
		return fmt.Errorf("%s: waiting for one of the user's %d copies in progress: %w", what, f.copies.max, err)
	}
	f.copies.parked.Add(1)
	err := f.all.wait(c.ctx, f.done, c.slowCopies)
	f.copies.parked.Add(-1)
	if err != nil {
		f.copies.leave()
		return fmt.Errorf("%s: waiting for one of the %d copies in progress of every user: %w", what, f.all.max, err)
	}
	return nil
}

func (c *call) leaveCopy() {
	c.f.all.leave()
	c.f.copies.leave()
}

// slowCopy logs, once for the user's slots, a copy that waited
// slowCopyWait for one: the user's copies hang, and so do its commands.
func (c *call) slowCopy() {
	c.logSlowCopy(c.f.copies, "ucm: a user's copies into its processes' memory hang; its commands wait for them")
}

// slowCopies logs the same for all users' slots: many users' copies hang,
// and everybody's commands wait for them.
func (c *call) slowCopies() {
	c.logSlowCopy(c.f.all, "ucm: copies of many users into their processes' memory hang; every user's commands wait for them")
}

func (c *call) logSlowCopy(s *copySlots, msg string) {
	level := slog.LevelDebug
	if s.warned.CompareAndSwap(false, true) {
		level = slog.LevelWarn
	}
	c.f.d.log.Log(context.Background(), level, msg,
		"uid", c.f.uid, "pid", c.pid, "copies", s.max, "waited", slowCopyWait,
		"cause", "buffers whose pages do not arrive, such as a mapping of a file on a FUSE file system whose server does not answer (docs/cuse.md §3)",
		"see", "ucmd status: each user's copies in progress (COPYING)")
}

// read is copy_from_user: n bytes at addr, or EFAULT.
func (c *call) read(addr uint64, n int, what string) ([]byte, error) {
	if c.pid <= 0 {
		// The caller is outside our pid namespace: its memory is
		// unreachable, and pid 0 would be our own.
		return nil, fmt.Errorf("%s: caller not visible: %w", what, unix.EFAULT)
	}
	if err := c.enterCopy(what); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	err := c.f.d.mem.Read(c.pid, addr, b)
	c.leaveCopy()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}

// write is copy_to_user.
func (c *call) write(addr uint64, b []byte, what string) error {
	if c.pid <= 0 {
		return fmt.Errorf("%s: caller not visible: %w", what, unix.EFAULT)
	}
	if err := c.enterCopy(what); err != nil {
		return err
	}
	err := c.f.d.mem.Write(c.pid, addr, b)
	c.leaveCopy()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// writeSegs is several copy_to_user calls in a row, in one system call: it
// stops at the first that faults, named by what.
func (c *call) writeSegs(segs []callermem.Seg, what []string) error {
	if c.pid <= 0 {
		return fmt.Errorf("%s: caller not visible: %w", what[0], unix.EFAULT)
	}
	if err := c.enterCopy(what[0]); err != nil {
		return err
	}
	i, err := callermem.WriteSegs(c.f.d.mem, c.pid, segs)
	c.leaveCopy()
	if err != nil {
		return fmt.Errorf("%s: %w", what[i], err)
	}
	return nil
}

// respond copies the response encoded in c.out[:n] to addr. Responses
// are encoded by their callers with a static Encode, which keeps the
// struct on the caller's stack (through an abi.Struct it would escape).
func (c *call) respond(addr uint64, n int) error {
	return c.write(addr, c.out[:n], "response")
}

// data is ib_ucm_alloc_data: nothing when n is 0, whatever the pointer.
func (c *call) data(addr uint64, n uint8, what string) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	return c.read(addr, int(n), what)
}

// path is ib_ucm_path_get: nil for a 0 pointer.
func (c *call) path(addr uint64, what string) (*abi.PathRec, error) {
	if addr == 0 {
		return nil, nil
	}
	b, err := c.read(addr, abi.PathRecSize, what)
	if err != nil {
		return nil, err
	}
	var p abi.PathRec
	p.Decode(b)
	return &p, nil
}
