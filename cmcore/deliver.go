package cmcore

import (
	"bytes"
	"errors"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// queue appends an event for later delivery. Called with cm.mu held.
func (cm *CM) queue(ev *Event, owner *ID) {
	if cm.closed {
		return
	}
	cm.events = append(cm.events, queuedEvent{ev: ev, owner: owner})
}

// deliver drains the event queue on the calling goroutine unless another
// goroutine already is. One drainer at a time gives the per-id (indeed
// per-CM) ordering; handlers run without cm.mu.
func (cm *CM) deliver() {
	cm.mu.Lock()
	if cm.delivering {
		cm.mu.Unlock()
		return
	}
	cm.delivering = true
	cm.deliverGo = goid()
	for len(cm.events) > 0 && !cm.closed {
		q := cm.events[0]
		cm.events[0] = queuedEvent{}
		cm.events = cm.events[1:]
		if q.owner.destroyed || q.ev.ID.destroyed {
			// A new connection nobody will ever see must not linger in
			// REQ_RCVD: reject it, as ucm did when purging the event.
			if q.ev.Listener != nil && !q.ev.ID.destroyed {
				var t txn
				cm.destroyLocked(&t, q.ev.ID, false)
				cm.mu.Unlock()
				cm.flushOnly(&t)
				cm.mu.Lock()
			}
			continue
		}
		cm.running = q.owner
		h := q.owner.handler
		cm.mu.Unlock()
		var err error
		if h != nil {
			err = h(q.ev)
		}
		cm.mu.Lock()
		cm.running = nil
		cm.cond.Broadcast()
		if err != nil && !q.ev.ID.destroyed {
			var t txn
			silent := q.ev.Type == EventReqReceived && errors.Is(err, unix.ENOMEM)
			cm.destroyLocked(&t, q.ev.ID, silent)
			cm.mu.Unlock()
			cm.flushOnly(&t)
			cm.mu.Lock()
		}
	}
	if len(cm.events) == 0 {
		cm.events = nil // let the backing array go
	}
	cm.delivering = false
	cm.deliverGo = 0
	cm.mu.Unlock()
}

// flushOnly sends what t collected; the caller does not hold cm.mu and is
// already delivering (or about to).
func (cm *CM) flushOnly(t *txn) {
	cm.mu.Lock()
	closed := cm.closed
	cm.mu.Unlock()
	if closed {
		return
	}
	for _, o := range t.out {
		if o.p.ep != nil {
			_ = o.p.ep.Send(bgctx, o.dst, o.mad)
		}
	}
}

// waitHandler blocks until id's handler is not running, unless the caller
// is that handler (Destroy from inside an event). Called with cm.mu held.
func (cm *CM) waitHandler(id *ID) {
	for cm.running == id {
		if cm.deliverGo == goid() {
			return
		}
		cm.cond.Wait()
	}
}

// goid returns the current goroutine's id. It is read only where a handler
// could be calling into the CM, to tell "Destroy from inside the handler"
// (must not wait) from "Destroy from another goroutine" (must wait).
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	n, _ := strconv.ParseInt(string(b), 10, 64)
	return n
}
