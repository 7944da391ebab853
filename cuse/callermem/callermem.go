// Package callermem reads and writes the memory of the client thread that
// made a CUSE request, the way copy_from_user and copy_to_user did for the
// kernel driver: all or nothing, and EFAULT when any byte cannot be
// transferred.
//
// ProcessVM is the real implementation (process_vm_readv/writev); Fake is an
// in-memory one for tests. Address the caller only by the pid the kernel put
// in the request header (cuse.Caller.Pid), and only while that request is
// unanswered: the thread is then blocked in its system call, so its id
// cannot be reused. Never take a pid from a client's payload.
package callermem

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Memory is access to client memory, keyed by thread id and address.
// Read fills dst from [addr, addr+len(dst)) and Write copies src to
// [addr, addr+len(src)). Either the whole range is transferred or the
// error satisfies errors.Is(err, unix.EFAULT) and errors.As finds
// unix.EFAULT first, so a device can hand it to the client as is. A
// zero-length transfer always succeeds.
type Memory interface {
	Read(pid int, addr uint64, dst []byte) error
	Write(pid int, addr uint64, src []byte) error
}

// Error describes a failed transfer. It unwraps to unix.EFAULT (what the
// client must see) and to the underlying cause, for logs and errors.Is.
type Error struct {
	Op   string // "read" or "write"
	Pid  int
	Addr uint64
	Len  int
	Done int   // bytes transferred before the failure
	Err  error // the cause: EFAULT, ESRCH, EPERM, ...
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %d bytes at %#x of pid %d (done %d): %v", e.Op, e.Len, e.Addr, e.Pid, e.Done, e.Err)
}

// Unwrap yields EFAULT first so that errors.As(err, &errno) picks the
// errno the client must get; the cause stays reachable with errors.Is.
func (e *Error) Unwrap() []error { return []error{unix.EFAULT, e.Err} }

// errShort is the cause of a transfer the kernel cut short.
var errShort = errors.New("short transfer")

// check validates a transfer before any system call: pid 0 means the caller
// is invisible in our pid namespace, and the range must not wrap.
func check(op string, pid int, addr uint64, n int) error {
	switch {
	case pid <= 0:
		return &Error{Op: op, Pid: pid, Addr: addr, Len: n, Err: fmt.Errorf("invalid pid %d", pid)}
	case addr+uint64(n) < addr, uint64(uintptr(addr+uint64(n))) != addr+uint64(n):
		return &Error{Op: op, Pid: pid, Addr: addr, Len: n, Err: unix.EFAULT}
	}
	return nil
}

// Seg is one destination range of a vectored write.
type Seg struct {
	Addr uint64
	Data []byte
}

// SegWriter is a Memory that writes several ranges with one system call.
type SegWriter interface {
	// WriteSegs writes segs in order; see the function WriteSegs.
	WriteSegs(pid int, segs []Seg) (int, error)
}

// WriteSegs writes segs in order as that many Writes would, with one
// system call when m is a SegWriter (ProcessVM is): a GET_EVENT's
// response, data and info, which the kernel copied one after the other.
// On failure it returns the index of the segment that failed, whose
// predecessors are written and whose successors are not; on success,
// len(segs).
func WriteSegs(m Memory, pid int, segs []Seg) (int, error) {
	if w, ok := m.(SegWriter); ok {
		return w.WriteSegs(pid, segs)
	}
	for i, sg := range segs {
		if err := m.Write(pid, sg.Addr, sg.Data); err != nil {
			return i, err
		}
	}
	return len(segs), nil
}
