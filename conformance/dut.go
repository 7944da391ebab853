// Package conformance checks a ucm device (/dev/infiniband/ucmN) against the
// kernel's ib_ucm ABI: every command's success path and errno path of
// docs/ucm-abi.md §2.3 and §3.2, the event queue rules, and the 2005
// review's rules. The cases are written once against a DUT (device under
// test) and run over two implementations: the fake kernel of package
// cusetest serving a ucm.Device on the simulated fabric (package
// conformance/fakedut, for unit tests), and a real device node opened by
// path (OpenPath, for `ucmd conformance PATH` or an old kernel's ib_ucm).
//
// Run reports each Case; the cases that connect need the DUT's loopback
// path (its port to itself, see LoopbackPath and Node.Loopback) and are
// skipped without one.
package conformance

import (
	"time"

	"github.com/ucmd/ucmd/abi"
)

// DUT is a ucm device under test.
type DUT interface {
	// Open opens the device (O_RDWR, plus O_NONBLOCK if nonblock).
	Open(nonblock bool) (File, error)
	// Mem is the client memory that command pointers point into.
	Mem() Memory
	// LoopbackPath returns a path record from the device's port to itself,
	// or false when none is known; cases that connect are then skipped.
	LoopbackPath() (abi.PathRec, bool)
	// Close releases what the DUT holds.
	Close() error
}

// File is one open file of the device.
type File interface {
	// Write is write(2). A failure is a unix.Errno.
	Write(b []byte) (int, error)
	// Read is read(2) of n bytes.
	Read(n int) (int, error)
	// WaitReadable waits up to d for poll(2) to report POLLIN.
	WaitReadable(d time.Duration) (bool, error)
	// SetNonblock switches O_NONBLOCK, as fcntl(F_SETFL).
	SetNonblock(on bool) error
	// Close is close(2).
	Close() error
}

// Memory is the test process's memory as the device sees it.
type Memory interface {
	// Alloc returns n zeroed, writable bytes followed at once by an
	// inaccessible guard page, so that an access one byte past them
	// faults.
	Alloc(n int) uint64
	// Bad returns an address at which every access faults.
	Bad() uint64
	// Read returns a copy of n bytes at addr (which Alloc returned).
	Read(addr uint64, n int) []byte
	// Write stores b at addr (which Alloc returned).
	Write(addr uint64, b []byte)
}

// LoopbackPath is a path record from a port to itself: the port's GID and
// LID (0 on RoCE) as source and destination, the default P_Key, 2048-byte
// MTU and a short packet lifetime so that timewait ends quickly.
func LoopbackPath(gid [16]byte, lid uint16) abi.PathRec {
	return abi.PathRec{
		DGID: gid, SGID: gid, DLID: lid, SLID: lid,
		PKey: 0xffff, MTU: 4, Rate: 3, PacketLifeTime: 8, Reversible: 1, NumbPath: 1,
	}
}

// CredWriter is implemented by Files that can write with other
// credentials (fsuid/fsgid), for the EACCES case of §2.3; without it the
// case is skipped.
type CredWriter interface {
	// WriteAs is write(2) by a thread whose fsuid and fsgid are uid and
	// gid. It fails with ErrSkip when that cannot be arranged.
	WriteAs(uid, gid uint32, b []byte) (int, error)
}
