package ucm

import (
	"sync/atomic"

	"github.com/ucmd/ucmd/cmcore"
)

// ucmCtx is one id, the kernel's struct ib_ucm_context.
type ucmCtx struct {
	file *file
	cmID *cmcore.ID

	// Guarded by the IDTable's mutex.
	id   uint32
	slot slotState
	// refs counts commands using the id (ib_ucm_ctx_get/put); DESTROY_ID
	// waits for them after taking the id out of the table, on idle, which
	// IDTable.unused makes and the last put closes. A channel, not a
	// WaitGroup: the wait must end on INTERRUPT and on release.
	refs int
	idle chan struct{}

	// Guarded by file.mu.
	uid            uint64 // the client's cookie, echoed in its events
	eventsReported uint32 // events GET_EVENT delivered for this id
	queued         int    // events queued on this id (e.ctx == this)
	dead           bool   // torn down: events for it are dropped

	newConn bool // created for a REQ or SIDR_REQ: charged its CM state too

	// setup is when the connection's setup began (setupStamp), 0 when
	// none is under way; only with an Observer (observer.go).
	setup atomic.Int64
}

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
