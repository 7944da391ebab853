package ucm

import (
	"sync/atomic"

	"github.com/ucmd/ucmd/cmcore"
)

// ucmCtx is one id, the kernel's struct ib_ucm_context.
type ucmCtx struct {
	file *file
	cmID *cmcore.ID

	// Guarded by the IDTable's mutex (and slot, below).
	id uint32
	// queued counts the events queued on this id (e.ctx == this), under
	// file.mu; int32s beside id, as slot beside the file's flags, keep
	// the struct in the 64-byte size class (one per connection end).
	queued int32
	// refs counts commands using the id (ib_ucm_ctx_get/put); DESTROY_ID
	// waits for them after taking the id out of the table, on idle, which
	// IDTable.unused makes and the last put closes. A channel, not a
	// WaitGroup: the wait must end on INTERRUPT and on release.
	refs int32
	fidx int32 // where in file.ctxs, under file.mu
	idle chan struct{}

	// Guarded by file.mu.
	uid            uint64 // the client's cookie, echoed in its events
	eventsReported uint32 // events GET_EVENT delivered for this id
	flags          ctxFlags
	undelivered    bool // a new connection whose REQ is still queued: its events are the listener's

	slot    slotState // the IDTable's mutex
	newConn bool      // created for a REQ or SIDR_REQ: charged its CM state too

	// setup is when the connection's setup began (setupStamp), 0 when
	// none is under way; only with an Observer (observer.go).
	setup atomic.Int64
}

// ctxFlags are an id's marks, under file.mu; one byte, as the struct has
// no room for more.
type ctxFlags uint8

const (
	ctxDead ctxFlags = 1 << iota // torn down: events for it are dropped
	// Of the two calls that end an id the CM keeps for its timewait
	// (teardown and the CM's release hook), one has come; the second
	// refunds the id's charge (file.lingered).
	ctxLingerHalf
)

// put drops a reference taken by IDTable.get.
func (c *ucmCtx) put() { c.file.d.ids.put(c) }

// ctxOf returns the ucm id a CM id belongs to, nil if none.
func ctxOf(id *cmcore.ID) *ucmCtx {
	if id == nil {
		return nil
	}
	c, _ := id.Context().(*ucmCtx)
	return c
}
