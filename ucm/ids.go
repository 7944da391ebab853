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
	mu    sync.Mutex
	slots map[uint32]*ucmCtx
	free  idHeap // freed ids below next (and stale ones at or above it)
	next  uint32 // every id >= next is free
}

// NewIDTable returns an empty id space. Give the same table to every
// Device of one daemon.
func NewIDTable() *IDTable {
	return &IDTable{slots: make(map[uint32]*ucmCtx)}
}

// Len returns how many ids are allocated (live, hidden or being torn down).
func (t *IDTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.slots)
}

// alloc gives c the lowest free id, hidden until publish.
func (t *IDTable) alloc(c *ucmCtx) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.free.Len() > 0 && t.free[0] >= t.next {
		// The minimum is stale, so is every entry (see release).
		t.free = t.free[:0]
	}
	var id uint32
	switch {
	case t.free.Len() > 0:
		id = heap.Pop(&t.free).(uint32)
	case t.next == ^uint32(0):
		return fmt.Errorf("ucm: id space exhausted: %w", unix.ENOMEM)
	default:
		id = t.next
		t.next++
	}
	c.id = id
	c.slot = slotHidden
	t.slots[id] = c
	return nil
}

// publish makes c usable by commands.
func (t *IDTable) publish(c *ucmCtx) {
	t.mu.Lock()
	if t.slots[c.id] == c && c.slot == slotHidden {
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
	if t.slots[c.id] != c || c.slot != slotRemoved {
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
	c := t.slots[id]
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
	if t.slots[c.id] == c {
		c.slot = slotClosing
	}
	t.mu.Unlock()
}

// release frees c's number for reuse and reports whether it did: releasing
// twice is harmless, and only the first counts.
//
// Cost: O(log N), amortised. Freed ids below next-1 go on the min-heap;
// the top id is not pushed at all, next just shrinks over it and over the
// free ids right below it (found free in slots: no heap search). Heap
// entries that end up >= next are stale and left in place: alloc throws
// them away when it meets them, and since alloc pops the minimum, meeting
// one means every entry is stale, so it drops the whole heap in O(1). The
// old max()/removeMax scanned the heap on every release: O(N) under the
// daemon-wide lock, O(N^2) for closing a file of N ids. A bitmap with a
// summary level would also do; the heap keeps the code small and costs
// nothing while ids are few.
func (t *IDTable) release(c *ucmCtx) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.slots[c.id] != c {
		return false
	}
	delete(t.slots, c.id)
	if c.id != t.next-1 {
		heap.Push(&t.free, c.id)
		return true
	}
	// Each step down undoes one step up of alloc: amortised O(1).
	t.next--
	for t.next > 0 && t.slots[t.next-1] == nil {
		t.next--
	}
	return true
}

// idHeap is a min-heap of free ids. Entries below IDTable.next are free and
// distinct; entries at or above it are stale (see release).
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
