package callermem

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// mmapPages maps n anonymous pages; memory outside the Go heap, so its
// address is stable and can be unmapped under the test's control.
func mmapPages(t *testing.T, n int, prot int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n*os.Getpagesize(), prot, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}

func wantEFAULT(t *testing.T, err error, cause error) {
	t.Helper()
	var errno unix.Errno
	if !errors.As(err, &errno) || errno != unix.EFAULT {
		t.Fatalf("err = %v, want errno EFAULT first", err)
	}
	if cause != nil && !errors.Is(err, cause) {
		t.Fatalf("err = %v, want cause %v", err, cause)
	}
}

func TestProcessVMReadWriteSelf(t *testing.T) {
	mem := ProcessVM{}
	page := mmapPages(t, 2, unix.PROT_READ|unix.PROT_WRITE)
	// The pid of a request is a thread id; any thread of ours will do.
	for _, pid := range []int{os.Getpid(), unix.Gettid()} {
		msg := []byte("RESPONSE-FROM-DAEMON")
		// Straddle the page boundary to exercise a multi-page copy.
		at := os.Getpagesize() - 7
		if err := mem.Write(pid, addrOf(page)+uint64(at), msg); err != nil {
			t.Fatalf("Write(pid %d): %v", pid, err)
		}
		if !bytes.Equal(page[at:at+len(msg)], msg) {
			t.Fatalf("memory holds %q, want %q", page[at:at+len(msg)], msg)
		}
		copy(page[at:], "client-wrote-this")
		got := make([]byte, len("client-wrote-this"))
		if err := mem.Read(pid, addrOf(page)+uint64(at), got); err != nil {
			t.Fatalf("Read(pid %d): %v", pid, err)
		}
		if string(got) != "client-wrote-this" {
			t.Fatalf("Read = %q", got)
		}
	}
	// Go heap memory works the same way.
	heap := make([]byte, 32)
	if err := mem.Write(os.Getpid(), addrOf(heap), []byte{1, 2, 3}); err != nil || heap[2] != 3 {
		t.Fatalf("Write to heap: %v, %v", err, heap[:3])
	}
}

// A command's copies are on its hot path: none may allocate.
func TestProcessVMAllocs(t *testing.T) {
	mem := ProcessVM{}
	page := mmapPages(t, 1, unix.PROT_READ|unix.PROT_WRITE)
	buf := make([]byte, 64)
	segs := []Seg{{Addr: addrOf(page), Data: buf[:8]}, {Addr: addrOf(page) + 100, Data: buf[8:]}}
	pid := os.Getpid()
	n := testing.AllocsPerRun(100, func() {
		if err := mem.Write(pid, addrOf(page), buf); err != nil {
			t.Fatal(err)
		}
		if err := mem.Read(pid, addrOf(page), buf); err != nil {
			t.Fatal(err)
		}
		if _, err := mem.WriteSegs(pid, segs); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per Write, Read and WriteSegs, want 0", n)
	}
}

func TestProcessVMUnmappedIsEFAULT(t *testing.T) {
	mem := ProcessVM{}
	ps := os.Getpagesize()
	b := mmapPages(t, 2, unix.PROT_READ|unix.PROT_WRITE)
	// Unmap the second page; the first stays mapped.
	// Raw munmap: unix.Munmap only accepts whole slices it mapped.
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(addrOf(b[ps:])), uintptr(ps), 0); e != 0 {
		t.Fatalf("munmap: %v", e)
	}
	hole := addrOf(b) + uint64(ps)

	err := mem.Read(os.Getpid(), hole, make([]byte, 8))
	wantEFAULT(t, err, unix.EFAULT)
	err = mem.Write(os.Getpid(), hole, []byte("x"))
	wantEFAULT(t, err, unix.EFAULT)

	// A transfer that starts mapped and runs into the hole is short, and
	// short is EFAULT, as copy_to_user's uncopied bytes were.
	start := hole - 4
	err = mem.Write(os.Getpid(), start, []byte("12345678"))
	wantEFAULT(t, err, nil)
	var e *Error
	if !errors.As(err, &e) || e.Done != 4 {
		t.Fatalf("err = %#v, want *Error with Done 4", err)
	}
	if string(b[ps-4:ps]) != "1234" {
		t.Fatalf("bytes before the hole = %q, want them written like the kernel does", b[ps-4:ps])
	}
}

func TestProcessVMReadOnlyIsEFAULT(t *testing.T) {
	ro := mmapPages(t, 1, unix.PROT_READ)
	err := ProcessVM{}.Write(os.Getpid(), addrOf(ro), []byte("x"))
	wantEFAULT(t, err, nil)
	if ro[0] != 0 {
		t.Fatal("read-only page was written")
	}
}

func TestProcessVMBadTarget(t *testing.T) {
	mem := ProcessVM{}
	buf := make([]byte, 8)
	// pid 0 is what the kernel sends for a caller outside our pid namespace.
	wantEFAULT(t, mem.Read(0, addrOf(buf), buf), nil)
	wantEFAULT(t, mem.Write(-1, addrOf(buf), buf), nil)
	// Above pid_max (at most 2^22), so no such process.
	wantEFAULT(t, mem.Read(1<<30, addrOf(buf), buf), unix.ESRCH)
	// A range that wraps the address space never reaches the kernel.
	wantEFAULT(t, mem.Read(os.Getpid(), ^uint64(0)-2, buf), nil)
	// Nothing to copy is never an error, even at a bad address.
	if err := mem.Write(os.Getpid(), 0, nil); err != nil {
		t.Fatalf("empty write: %v", err)
	}
}

// TestWriteSegs: one process_vm_writev writes the segments in order and,
// when one faults, reports it with those before it written and those
// after it not, as a Write per segment would.
func TestWriteSegs(t *testing.T) {
	ps := os.Getpagesize()
	pid := os.Getpid()
	for _, c := range []struct {
		name     string
		bad      int // the segment placed across into an unmapped page, or -1
		wantDone int
	}{{"all written", -1, 3}, {"first faults", 0, 0}, {"middle faults", 1, 1}, {"last faults", 2, 2}} {
		t.Run(c.name, func(t *testing.T) {
			mem := mmapPages(t, 3, unix.PROT_READ|unix.PROT_WRITE)
			if err := unix.Mprotect(mem[2*ps:], unix.PROT_NONE); err != nil { // the third page faults
				t.Fatal(err)
			}
			base := addrOf(mem)
			segs := []Seg{
				{Addr: base + 16, Data: bytes.Repeat([]byte{1}, 40)},
				{Addr: base + 200, Data: bytes.Repeat([]byte{2}, 64)},
				{Addr: base + uint64(ps) + 8, Data: bytes.Repeat([]byte{3}, 24)},
			}
			if c.bad >= 0 {
				segs[c.bad].Addr = base + uint64(2*ps) - 8 // 8 bytes mapped, then the faulting page
			}
			done, err := ProcessVM{}.WriteSegs(pid, segs)
			if done != c.wantDone {
				t.Fatalf("WriteSegs = %d, %v; want %d", done, err, c.wantDone)
			}
			if c.bad < 0 {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				wantEFAULT(t, err, nil)
			}
			for i, sg := range segs {
				if i == c.bad {
					continue
				}
				off := int(sg.Addr - base)
				got := mem[off : off+len(sg.Data)]
				if written := bytes.Equal(got, sg.Data); written != (c.bad < 0 || i < c.bad) {
					t.Errorf("segment %d written = %v, want %v", i, written, c.bad < 0 || i < c.bad)
				}
			}
			// Fake, through the sequential fallback, agrees.
			f := NewFake()
			f.Map(pid, base, 2*ps)
			if fd, _ := WriteSegs(f, pid, segs); fd != done {
				t.Errorf("Fake via WriteSegs = %d, ProcessVM %d", fd, done)
			}
		})
	}
}

// A segment whose range wraps the address space is refused before any
// system call, but the segments before it are still written.
func TestWriteSegsWrappingSegment(t *testing.T) {
	mem := mmapPages(t, 1, unix.PROT_READ|unix.PROT_WRITE)
	base := addrOf(mem)
	segs := []Seg{
		{Addr: base + 16, Data: bytes.Repeat([]byte{1}, 40)},
		{Addr: ^uint64(0) - 15, Data: make([]byte, 32)},
		{Addr: base + 100, Data: bytes.Repeat([]byte{3}, 8)},
	}
	done, err := ProcessVM{}.WriteSegs(os.Getpid(), segs)
	if done != 1 {
		t.Fatalf("WriteSegs = %d, %v; want 1", done, err)
	}
	wantEFAULT(t, err, nil)
	if !bytes.Equal(mem[16:56], segs[0].Data) {
		t.Error("the segment before the wrapping one was not written")
	}
	if bytes.Equal(mem[100:108], segs[2].Data) {
		t.Error("the segment after the wrapping one was written")
	}
}

func TestWriteSegsEmpty(t *testing.T) {
	// Nothing to copy is never an error, even at a bad address.
	if n, err := (ProcessVM{}).WriteSegs(os.Getpid(), []Seg{{Addr: 0}, {Addr: 8}}); n != 2 || err != nil {
		t.Fatalf("WriteSegs of empty segments = %d, %v", n, err)
	}
}
