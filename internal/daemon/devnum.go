package daemon

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// The historic ucm device numbers: major 231, minors from 224.
const (
	UCMMajor     = 231
	UCMBaseMinor = 224
	MaxFixed     = 32 // minors 224..255
)

// devNumbers hands out the ucm nodes' device numbers as the kernel driver
// did (docs/cuse.md §2.1): with FixedNumbers ucm0 to ucm31 are 231:224+N,
// and every other node takes a minor of one dynamic major that all of them
// share, ucmN's being N-32 (N without FixedNumbers).
//
// CUSE registers one number per device, and a device that asks for a
// dynamic one gets a major of its own. The kernel has fewer than 150
// majors to give (fs/char_dev.c: 234-254 and 384-511), every driver's
// alike: one per node would run out near 140 RDMA devices (as the test VM
// showed) and leave other drivers that load later without one. So the
// first node asks for a dynamic major, its minor with it; the others ask
// for that major, which the kernel registers minor by minor. The major is
// the kernel's to give away again once none of ours holds a minor of it,
// so the nodes on it are counted; and should the kernel refuse a minor of
// it (another driver took that minor), the node asks for a dynamic major
// of its own instead.
type devNumbers struct {
	fixed bool

	mu     sync.Mutex
	shared uint32 // the major the nodes share; 0 until one is registered
	on     int    // nodes registered on shared
}

// want returns the number to ask for ucmN; major 0 asks for a dynamic one.
func (n *devNumbers) want(i int) (major, minor uint32) {
	if n.fixed && i < MaxFixed {
		return UCMMajor, uint32(UCMBaseMinor + i)
	}
	if n.fixed {
		i -= MaxFixed
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.shared, uint32(i)
}

// got records the major a node was registered with (0: not known, as when
// the node is not a device file). A dynamic major becomes the shared one
// if there is none.
func (n *devNumbers) got(major uint32) {
	if major == 0 || major == UCMMajor {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.shared == 0 {
		n.shared = major
	}
	if major == n.shared {
		n.on++
	}
}

// gone records that a node registered with major was removed.
func (n *devNumbers) gone(major uint32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if major != 0 && major == n.shared {
		if n.on--; n.on == 0 {
			n.shared = 0
		}
	}
}

// nodeNumber is the device number of the node at path.
func nodeNumber(path string) (major, minor uint32, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, fmt.Errorf("device number of %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return 0, 0, nil
	}
	return unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), nil
}
