package conformance

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// Node is a DUT on a real device node: commands are plain write(2)s from
// this process, with pointers into memory mapped outside the Go heap, so
// the garbage collector never moves what the device reads and writes.
type Node struct {
	path string
	// Loopback, if set, is a path record from the device's port to
	// itself; cases that connect need it.
	Loopback *abi.PathRec
	mem      *mmapMem
}

// OpenPath returns a DUT for the ucm device node at path (e.g.
// /dev/infiniband/ucm0). It checks that path is a ucm node (ErrNotUCM
// otherwise, before anything else touches it): a character device whose
// sysfs name is ucmN (or infiniband!ucmN, a CUSE device), answering a write
// with an unknown command with EINVAL as ib_ucm_write did. Set the returned
// *Node's Loopback to run the connecting cases.
func OpenPath(path string) (DUT, error) {
	if err := probeNode(path, "/sys"); err != nil {
		return nil, err
	}
	return &Node{path: path, mem: &mmapMem{}}, nil
}

// ErrNotUCM is wrapped by OpenPath's error when the path is no ucm node.
var ErrNotUCM = errors.New("not a ucm device")

var ucmSysName = regexp.MustCompile(`(^|!)ucm[0-9]+$`)

// probeNode checks that path is a ucm node without changing anything on one:
// the sysfs entry of its device number is looked at first (so a write never
// reaches a tty or a disk), then an unknown command must fail with EINVAL.
func probeNode(path, sysfs string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("%s: %w: not a character device (a ucm node is /dev/infiniband/ucmN)", path, ErrNotUCM)
	}
	major, minor := unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))
	if target, err := os.Readlink(filepath.Join(sysfs, "dev/char", fmt.Sprintf("%d:%d", major, minor))); err == nil {
		if name := filepath.Base(target); !ucmSysName.MatchString(name) {
			return fmt.Errorf("%s: %w: character device %d:%d is %q in sysfs (%s), not ucmN", path, ErrNotUCM, major, minor, name, filepath.Base(filepath.Dir(target)))
		}
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	hdr := make([]byte, 8) // cmd = NumCmds, in = out = 0
	binary.NativeEndian.PutUint32(hdr, abi.NumCmds)
	n, err := unix.Write(fd, hdr)
	switch {
	case errors.Is(err, unix.EINVAL):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w: a write with an unknown command failed with %v, a ucm node answers EINVAL", path, ErrNotUCM, err)
	default:
		return fmt.Errorf("%s: %w: a write with an unknown command returned %d, a ucm node answers EINVAL", path, ErrNotUCM, n)
	}
}

// Open implements DUT.
func (n *Node) Open(nonblock bool) (File, error) {
	flags := unix.O_RDWR | unix.O_CLOEXEC
	if nonblock {
		flags |= unix.O_NONBLOCK
	}
	fd, err := unix.Open(n.path, flags, 0)
	if err != nil {
		return nil, err
	}
	return &nodeFile{fd: fd}, nil
}

// Mem implements DUT.
func (n *Node) Mem() Memory { return n.mem }

// LoopbackPath implements DUT.
func (n *Node) LoopbackPath() (abi.PathRec, bool) {
	if n.Loopback == nil {
		return abi.PathRec{}, false
	}
	return *n.Loopback, true
}

// Close implements DUT: it unmaps the memory handed out.
func (n *Node) Close() error { return n.mem.free() }

// nodeFile is an open file descriptor of the node.
type nodeFile struct {
	mu     sync.RWMutex // Close waits (a while) for calls in flight
	fd     int
	closed atomic.Bool
}

func (f *nodeFile) Write(b []byte) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed.Load() {
		return 0, unix.EBADF
	}
	for {
		n, err := unix.Write(f.fd, b)
		if err == unix.EINTR {
			continue // the Go runtime's preemption signals, not the test's
		}
		return n, err
	}
}

func (f *nodeFile) Read(n int) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed.Load() {
		return 0, unix.EBADF
	}
	return unix.Read(f.fd, make([]byte, n))
}

func (f *nodeFile) WaitReadable(d time.Duration) (bool, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed.Load() {
		return false, unix.EBADF
	}
	end := time.Now().Add(d)
	for {
		fds := []unix.PollFd{{Fd: int32(f.fd), Events: unix.POLLIN}}
		ms := max(int(time.Until(end)/time.Millisecond), 0)
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		return n > 0 && fds[0].Revents&unix.POLLIN != 0, nil
	}
}

func (f *nodeFile) SetNonblock(on bool) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed.Load() {
		return unix.EBADF
	}
	return unix.SetNonblock(f.fd, on)
}

// Close closes the descriptor once the calls in flight have returned, or
// after closeWait if one stays blocked (a GET_EVENT whose event never came):
// the test must go on, and that call keeps the kernel's file alive until it
// returns, so nothing is torn down under it.
func (f *nodeFile) Close() error {
	locked := false
	for end := time.Now().Add(closeWait); !locked && time.Now().Before(end); time.Sleep(time.Millisecond) {
		locked = f.mu.TryLock()
	}
	if locked {
		defer f.mu.Unlock()
	}
	if f.closed.Swap(true) {
		return nil
	}
	return unix.Close(f.fd)
}

// closeWait bounds how long Close waits for a blocked call.
const closeWait = 2 * time.Second

// mmapMem hands out anonymous mappings, each followed by a PROT_NONE
// guard page.
type mmapMem struct {
	mu      sync.Mutex
	regions map[uint64][]byte // by base address, the usable part
	maps    [][]byte          // whole mappings, to unmap
	bad     uint64
}

// Alloc places the n bytes at the end of their pages, against the guard
// page: a device that reads or writes one byte past a buffer faults, as
// the kernel's copies would have (they copied exactly the lengths asked).
func (m *mmapMem) Alloc(n int) uint64 {
	n = max(n, 1)
	page := os.Getpagesize()
	size := (n + page - 1) / page * page
	b, err := unix.Mmap(-1, 0, size+page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(fmt.Sprintf("conformance: mmap: %v", err))
	}
	if err := unix.Mprotect(b[size:], unix.PROT_NONE); err != nil {
		panic(fmt.Sprintf("conformance: mprotect: %v", err))
	}
	addr := uint64(uintptr(unsafe.Pointer(&b[size-n])))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.regions == nil {
		m.regions = make(map[uint64][]byte)
	}
	m.regions[addr] = b[size-n : size]
	m.maps = append(m.maps, b)
	return addr
}

func (m *mmapMem) Bad() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bad != 0 {
		return m.bad
	}
	b, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(fmt.Sprintf("conformance: mmap: %v", err))
	}
	m.maps = append(m.maps, b)
	m.bad = uint64(uintptr(unsafe.Pointer(&b[0])))
	return m.bad
}

func (m *mmapMem) region(addr uint64, n int) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	for base, b := range m.regions {
		if addr >= base && addr+uint64(n) <= base+uint64(len(b)) {
			return b[addr-base : addr-base+uint64(n)]
		}
	}
	panic(fmt.Sprintf("conformance: %d bytes at %#x were not allocated", n, addr))
}

func (m *mmapMem) Read(addr uint64, n int) []byte {
	return append([]byte(nil), m.region(addr, n)...)
}

func (m *mmapMem) Write(addr uint64, b []byte) { copy(m.region(addr, len(b)), b) }

func (m *mmapMem) free() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var first error
	for _, b := range m.maps {
		if err := unix.Munmap(b); err != nil && first == nil {
			first = err
		}
	}
	m.maps, m.regions, m.bad = nil, nil, 0
	return first
}
