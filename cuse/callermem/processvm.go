package callermem

import (
	"golang.org/x/sys/unix"
)

// ProcessVM accesses client memory with process_vm_readv and
// process_vm_writev. It needs ptrace access to the client
// (PTRACE_MODE_ATTACH_REALCREDS: same thread group, matching real ids, or
// CAP_SYS_PTRACE; Yama ptrace_scope 3 forbids it even to root). Like
// copy_to_user, writes do not override read-only mappings.
type ProcessVM struct{}

var (
	_ Memory    = ProcessVM{}
	_ SegWriter = ProcessVM{}
)

// Read implements Memory.
func (ProcessVM) Read(pid int, addr uint64, dst []byte) error {
	return transfer(false, pid, addr, dst)
}

// Write implements Memory.
func (ProcessVM) Write(pid int, addr uint64, src []byte) error {
	return transfer(true, pid, addr, src)
}

// transfer is one Read or Write. Its iovecs are arrays on the stack, and
// the system call is called directly, not through a function value (which
// would move them to the heap): a command's copy allocates nothing.
func transfer(write bool, pid int, addr uint64, buf []byte) error {
	op := "read"
	if write {
		op = "write"
	}
	if len(buf) == 0 {
		return nil
	}
	if err := check(op, pid, addr, len(buf)); err != nil {
		return err
	}
	var local [1]unix.Iovec
	var remote [1]unix.RemoteIovec
	done := 0
	for done < len(buf) {
		// The kernel copies page by page and returns a short count when
		// it faults after copying something; retrying the rest then
		// yields the fault as EFAULT or a zero count.
		local[0] = unix.Iovec{Base: &buf[done]}
		local[0].SetLen(len(buf) - done)
		remote[0] = unix.RemoteIovec{Base: uintptr(addr) + uintptr(done), Len: len(buf) - done}
		var n int
		var err error
		if write {
			n, err = unix.ProcessVMWritev(pid, local[:], remote[:], 0)
		} else {
			n, err = unix.ProcessVMReadv(pid, local[:], remote[:], 0)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &Error{Op: op, Pid: pid, Addr: addr, Len: len(buf), Done: done, Err: err}
		}
		if n <= 0 {
			return &Error{Op: op, Pid: pid, Addr: addr, Len: len(buf), Done: done, Err: errShort}
		}
		done += n
	}
	return nil
}

// maxSegs bounds WriteSegs' iovecs, which live on the stack.
const maxSegs = 8

// WriteSegs implements SegWriter: one process_vm_writev for all of segs
// (more only when the kernel stops short, to find the segment that
// faulted, as transfer does for one).
func (p ProcessVM) WriteSegs(pid int, segs []Seg) (int, error) {
	if len(segs) > maxSegs {
		for i, sg := range segs {
			if err := p.Write(pid, sg.Addr, sg.Data); err != nil {
				return i, err
			}
		}
		return len(segs), nil
	}
	for i, sg := range segs {
		if err := check("write", pid, sg.Addr, len(sg.Data)); err != nil {
			// Those before it are written, as by a Write each: GET_EVENT's
			// response lands though its data pointer wraps (copy_to_user
			// of the response, then EFAULT for the data).
			if n, werr := p.WriteSegs(pid, segs[:i]); werr != nil {
				return n, werr
			}
			return i, err
		}
	}
	var local [maxSegs]unix.Iovec
	var remote [maxSegs]unix.RemoteIovec
	first, off := 0, 0 // the first segment not yet written, and how much of it is
	for first < len(segs) {
		n := 0
		for i := first; i < len(segs); i++ {
			b, addr := segs[i].Data, segs[i].Addr
			if i == first {
				b, addr = b[off:], addr+uint64(off)
			}
			if len(b) == 0 {
				continue
			}
			local[n] = unix.Iovec{Base: &b[0]}
			local[n].SetLen(len(b))
			remote[n] = unix.RemoteIovec{Base: uintptr(addr), Len: len(b)}
			n++
		}
		if n == 0 {
			break
		}
		done, err := unix.ProcessVMWritev(pid, local[:n], remote[:n], 0)
		if err == unix.EINTR {
			continue
		}
		sg := segs[first]
		if err != nil {
			return first, &Error{Op: "write", Pid: pid, Addr: sg.Addr, Len: len(sg.Data), Done: off, Err: err}
		}
		if done <= 0 {
			return first, &Error{Op: "write", Pid: pid, Addr: sg.Addr, Len: len(sg.Data), Done: off, Err: errShort}
		}
		// Advance past what was written: whole segments, then part of one.
		for done > 0 && first < len(segs) {
			left := len(segs[first].Data) - off
			if done < left {
				off += done
				break
			}
			done -= left
			first, off = first+1, 0
		}
		for first < len(segs) && len(segs[first].Data) == off {
			first, off = first+1, 0
		}
	}
	return len(segs), nil
}
