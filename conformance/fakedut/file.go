package fakedut

import (
	"sync"
	"time"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"golang.org/x/sys/unix"
)

// File is a conformance.File of the fake kernel. Its methods may be called from
// any goroutine: they never use the kernel's test-failing waits.
type File struct {
	F      *cusetest.File
	Caller cuse.Caller
	mu     sync.Mutex // serialises SetFlags with requests reading Flags
	closed bool
}

// Write implements conformance.File. As the kernel's fuse_direct_io, it
// sends a write longer than the server's max_write as several WRITE
// requests of at most max_write bytes, one after another, each at its
// offset in the write (cuse_write_iter starts at 0), and stops at
// the first error or short count: the bytes written before an error are
// the result, the error only when there are none.
func (f *File) Write(b []byte) (int, error) {
	max := int(f.F.Kernel().Init.MaxWrite)
	done := 0
	for {
		chunk := b[done:]
		if len(chunk) > max {
			chunk = chunk[:max]
		}
		f.mu.Lock()
		p := f.F.WriteAsyncAt(f.Caller, chunk, uint64(done))
		f.mu.Unlock()
		r, err := wait(p)
		if err == nil && r.Errno != 0 {
			err = r.Errno
		}
		if err != nil {
			if done > 0 {
				return done, nil
			}
			return 0, err
		}
		done += r.Size()
		if r.Size() < len(chunk) || done == len(b) {
			return done, nil
		}
	}
}

// WriteAsync sends a write and returns it pending, for tests that
// interrupt it.
func (f *File) WriteAsync(b []byte) *cusetest.Pending {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.F.WriteAsync(f.Caller, b)
}

// Read implements conformance.File.
func (f *File) Read(n int) (int, error) {
	f.mu.Lock()
	p := f.F.ReadAsync(f.Caller, n)
	f.mu.Unlock()
	r, err := wait(p)
	if err != nil {
		return 0, err
	}
	if r.Errno != 0 {
		return 0, r.Errno
	}
	return len(r.Body), nil
}

// WaitReadable implements conformance.File by polling every millisecond.
func (f *File) WaitReadable(d time.Duration) (bool, error) {
	end := time.Now().Add(d)
	for {
		r, err := wait(f.F.PollAsync(f.Caller, unix.POLLIN, 0))
		if err != nil {
			return false, err
		}
		if r.Errno != 0 {
			return false, r.Errno
		}
		if r.Revents()&unix.POLLIN != 0 {
			return true, nil
		}
		if time.Now().After(end) {
			return false, nil
		}
		time.Sleep(time.Millisecond)
	}
}

// SetNonblock implements conformance.File.
func (f *File) SetNonblock(on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.F.Flags &^ unix.O_NONBLOCK
	if on {
		fl |= unix.O_NONBLOCK
	}
	f.F.SetFlags(fl)
	return nil
}

// Close implements conformance.File: RELEASE, awaited. Closing twice is harmless.
func (f *File) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	r, err := wait(f.F.ReleaseAsync())
	if err != nil {
		return err
	}
	if r.Errno != 0 {
		return r.Errno
	}
	return nil
}

// fakeMem is Memory over a callermem.Fake.
type fakeMem struct {
	f   *callermem.Fake
	pid int

	once sync.Once
	bad  uint64
}

func (m *fakeMem) Alloc(n int) uint64 { return m.f.Alloc(m.pid, n) }

func (m *fakeMem) Bad() uint64 {
	m.once.Do(func() {
		m.bad = m.f.Alloc(m.pid, 1)
		m.f.Unmap(m.pid, m.bad, 1)
	})
	return m.bad
}

func (m *fakeMem) Read(addr uint64, n int) []byte {
	b, err := m.f.Bytes(m.pid, addr, n)
	if err != nil {
		panic(err) // a test helper misused: addr must come from Alloc
	}
	return b
}

func (m *fakeMem) Write(addr uint64, b []byte) {
	if err := m.f.Write(m.pid, addr, b); err != nil {
		panic(err)
	}
}

// WriteAs implements conformance.CredWriter: the fake kernel puts any
// credentials in the request header.
func (f *File) WriteAs(uid, gid uint32, b []byte) (int, error) {
	f.mu.Lock()
	c := f.Caller
	c.Uid, c.Gid = uid, gid
	p := f.F.WriteAsync(c, b)
	f.mu.Unlock()
	r, err := wait(p)
	if err != nil {
		return 0, err
	}
	if r.Errno != 0 {
		return 0, r.Errno
	}
	return r.Size(), nil
}
