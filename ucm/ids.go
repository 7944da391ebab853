package ucm

import (
	"container/heap"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// slotState is where an id is in its life; only live ids are found by
// commands.
type slotState uint8

const (
	slotHidden  slotState = iota // allocated, not yet usable (new or undelivered REQ child)
	slotLive                     // found by commands
	slotRemoved                  // DESTROY_ID is tearing it down (restore undoes it)
	slotClosing                  // close (or its owner's teardown) is tearing it down
)

// IDTable is the daemon-wide id space, the kernel's ctx_id_table: ids are
// small integers shared by all open files of all devices, lowest free first.
// The zero value is not usable; call NewIDTable.
type IDTable struct {
	mu sync.Mutex
	// slots[id] holds the context of each allocated id, nil for a free
	// one; every id >= len(slots) is free. Lowest free first keeps the ids
	// dense, so a slice, as the kernel's idr, costs 8 bytes an id and no
	// hashing (a map cost about 25, and a hash per command).
	slots []*ucmCtx
	n     int    // allocated ids
	free  idHeap // freed ids below len(slots) (and stale ones at or above it)
}

// NewIDTable returns an empty id space. Give the same table to every
// Device of one daemon.
func NewIDTable() *IDTable {
	return &IDTable{}
}

// Len returns how many ids are allocated (live, hidden or being torn down).
func (t *IDTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// alloc gives c the lowest free id, hidden until publish.
func (t *IDTable) alloc(c *ucmCtx) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := uint32(len(t.slots))
	if t.free.Len() > 0 && t.free[0] >= next {
		// The minimum is stale, so is every entry (see release).
		t.free = t.free[:0]
	}
	switch {
	case t.free.Len() > 0:
		c.id = heap.Pop(&t.free).(uint32)
		t.slots[c.id] = c
	case next == maxIDs:
		return fmt.Errorf("ucm: id space exhausted: %w", unix.ENOMEM)
	default:
		c.id = next
		t.slots = append(t.slots, c)
	}
	c.slot = slotHidden
	t.n++
	return nil
}

// maxIDs bounds the id space: the ABI's ids are 32 bits, but a slice index
// must fit in an int, and the daemon's limits stop far below either.
const maxIDs = 1<<31 - 1

// at returns the context of id, nil if id is free.
func (t *IDTable) at(id uint32) *ucmCtx {
	if int64(id) >= int64(len(t.slots)) {
		return nil
	}
	return t.slots[id]
}

// publish makes c usable by commands.
func (t *IDTable) publish(c *ucmCtx) {
	t.mu.Lock()
	if t.at(c.id) == c && c.slot == slotHidden {
		c.slot = slotLive
	}
	t.mu.Unlock()
}

// get is ib_ucm_ctx_get: ENOENT for an id nobody can use, EINVAL for one
// that belongs to another open file; otherwise a reference that the
// caller drops with c.put.
func (t *IDTable) get(f *file, id uint32) (*ucmCtx, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, err := t.lookupLocked(f, id)
	if err != nil {
		return nil, err
	}
	c.refs++
	return c, nil
}

// put drops a reference taken by get.
func (t *IDTable) put(c *ucmCtx) {
	t.mu.Lock()
	c.refs--
	if c.refs == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
	t.mu.Unlock()
}

// unused returns a channel closed once no command holds a reference to c:
// after remove or hide, when no new reference can be taken.
func (t *IDTable) unused(c *ucmCtx) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.refs == 0 {
		return closedChan
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	return c.idle
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// restore undoes remove: a DESTROY_ID interrupted before it destroyed
// anything leaves the id as it was. It fails if close took the id meanwhile.
func (t *IDTable) restore(c *ucmCtx) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at(c.id) != c || c.slot != slotRemoved {
		return false
	}
	c.slot = slotLive
	return true
}

// remove takes a live id of f out of reach of new commands (DESTROY_ID's
// idr_remove); the number stays reserved until release.
func (t *IDTable) remove(f *file, id uint32) (*ucmCtx, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, err := t.lookupLocked(f, id)
	if err != nil {
		return nil, err
	}
	c.slot = slotRemoved
	return c, nil
}

func (t *IDTable) lookupLocked(f *file, id uint32) (*ucmCtx, error) {
	c := t.at(id)
	if c == nil || c.slot != slotLive {
		return nil, fmt.Errorf("ucm: id %d: %w", id, unix.ENOENT)
	}
	if c.file != f {
		return nil, fmt.Errorf("ucm: id %d belongs to another open file: %w", id, unix.EINVAL)
	}
	return c, nil
}

// hide makes c unreachable for good (close tearing it down).
func (t *IDTable) hide(c *ucmCtx) {
	t.mu.Lock()
	if t.at(c.id) == c {
		c.slot = slotClosing
	}
	t.mu.Unlock()
}

// release frees c's number for reuse and reports whether it did: releasing
// twice is harmless, and only the first counts.
//
// Cost: O(log N), amortised. Freed ids below the top one go on the
// min-heap; the top id is not pushed at all, the slice just shrinks over it
// and over the free ids right below it (found free in slots: no heap
// search). Heap entries that end up >= len(slots) are stale and left in
// place: alloc throws
// them away when it meets them, and since alloc pops the minimum, meeting
// one means every entry is stale, so it drops the whole heap in O(1). The
// old max()/removeMax scanned the heap on every release: O(N) under the
// daemon-wide lock, O(N^2) for closing a file of N ids. A bitmap with a
// summary level would also do; the heap keeps the code small and costs
// nothing while ids are few.
func (t *IDTable) release(c *ucmCtx) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at(c.id) != c {
		return false
	}
	t.slots[c.id] = nil
	t.n--
	if int(c.id) != len(t.slots)-1 {
		heap.Push(&t.free, c.id)
		return true
	}
	// Each step down undoes one step up of alloc: amortised O(1).
	top := len(t.slots) - 1
	for top > 0 && t.slots[top-1] == nil {
		top--
	}
	// Most ids gone (a big client exited): give the memory back.
	t.slots = giveBack(t.slots[:top], 1024)
	return true
}

// giveBack reallocates s at twice its length once three quarters of its
// array, and more than keep entries, are unused, so that the array
// follows the contexts down as it followed them up.
func giveBack(s []*ucmCtx, keep int) []*ucmCtx {
	if cap(s) > keep && len(s) < cap(s)/4 {
		return append(make([]*ucmCtx, 0, 2*len(s)), s...)
	}
	return s
}

// idHeap is a min-heap of free ids. Entries below len(IDTable.slots) are
// free and distinct; entries at or above it are stale (see release).
type idHeap []uint32

func (h idHeap) Len() int           { return len(h) }
func (h idHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h idHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *idHeap) Push(x any)        { *h = append(*h, x.(uint32)) }
func (h *idHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
