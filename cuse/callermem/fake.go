package callermem

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// PageSize is the granularity at which Fake maps and unmaps memory.
const PageSize = 4096

// Fake is an in-memory Memory for tests: each pid has a sparse address
// space of pages that are mapped (zero-filled) with Map or Alloc and removed
// with Unmap. A transfer touching any unmapped byte fails with EFAULT; like
// the kernel, a write may have changed the mapped bytes before the fault.
// Unknown pids fail with ESRCH (wrapped in EFAULT, as ProcessVM does).
// The zero value is not usable; call NewFake. Fake is safe for concurrent use.
type Fake struct {
	mu    sync.Mutex
	procs map[int]*fakeProc
}

type fakeProc struct {
	pages map[uint64]*[PageSize]byte // by page address
	next  uint64                     // Alloc cursor
}

var _ Memory = (*Fake)(nil)

// NewFake returns an empty fake with no processes.
func NewFake() *Fake { return &Fake{procs: make(map[int]*fakeProc)} }

func (f *Fake) proc(pid int) *fakeProc {
	p := f.procs[pid]
	if p == nil {
		p = &fakeProc{pages: make(map[uint64]*[PageSize]byte), next: 0x10000}
		f.procs[pid] = p
	}
	return p
}

func pageRange(addr uint64, n int) (first, end uint64) {
	first = addr &^ (PageSize - 1)
	end = (addr + uint64(n) + PageSize - 1) &^ (PageSize - 1)
	return first, end
}

// Map makes the pages covering [addr, addr+n) of pid present (zero-filled
// where they were not mapped yet). It creates pid if needed.
func (f *Fake) Map(pid int, addr uint64, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.proc(pid)
	first, end := pageRange(addr, n)
	for pg := first; pg < end; pg += PageSize {
		if p.pages[pg] == nil {
			p.pages[pg] = new([PageSize]byte)
		}
	}
}

// Unmap removes the pages covering [addr, addr+n) of pid, so that any
// access to them fails with EFAULT.
func (f *Fake) Unmap(pid int, addr uint64, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.proc(pid)
	first, end := pageRange(addr, n)
	for pg := first; pg < end; pg += PageSize {
		delete(p.pages, pg)
	}
}

// Alloc maps a fresh, zeroed range of n bytes in pid and returns its
// address. Each range ends where an unmapped guard page begins, so that a
// device that reads or writes even one byte past it faults; a range of
// whole pages starts on a page.
func (f *Fake) Alloc(pid int, n int) uint64 {
	n = max(n, 1)
	f.mu.Lock()
	p := f.proc(pid)
	first := p.next
	_, end := pageRange(first, n)
	p.next = end + PageSize
	f.mu.Unlock()
	addr := end - uint64(n)
	f.Map(pid, addr, n)
	return addr
}

// Bytes returns a copy of [addr, addr+n) of pid, failing the same way Read
// does; a test helper for inspecting what a device wrote.
func (f *Fake) Bytes(pid int, addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	return b, f.Read(pid, addr, b)
}

// Read implements Memory.
func (f *Fake) Read(pid int, addr uint64, dst []byte) error {
	return f.access("read", pid, addr, dst, func(page, buf []byte) { copy(buf, page) })
}

// Write implements Memory.
func (f *Fake) Write(pid int, addr uint64, src []byte) error {
	return f.access("write", pid, addr, src, func(page, buf []byte) { copy(page, buf) })
}

func (f *Fake) access(op string, pid int, addr uint64, buf []byte, copyFn func(page, buf []byte)) error {
	if len(buf) == 0 {
		return nil
	}
	if err := check(op, pid, addr, len(buf)); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.procs[pid]
	if p == nil {
		return &Error{Op: op, Pid: pid, Addr: addr, Len: len(buf), Err: fmt.Errorf("fake: no process %d: %w", pid, unix.ESRCH)}
	}
	done := 0
	for done < len(buf) {
		a := addr + uint64(done)
		pg := p.pages[a&^(PageSize-1)]
		if pg == nil {
			return &Error{Op: op, Pid: pid, Addr: addr, Len: len(buf), Done: done, Err: unix.EFAULT}
		}
		off := int(a & (PageSize - 1))
		n := min(PageSize-off, len(buf)-done)
		copyFn(pg[off:off+n], buf[done:done+n])
		done += n
	}
	return nil
}
