package cmcore

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
)

var eventPool = sync.Pool{New: func() any { return new(Event) }}

// post queues a copy of e in a pooled Event; deliver recycles it after the
// handler returns (events are documented as valid only during the call).
// Called with cm.mu held.
func (cm *CM) post(e Event, owner *ID) {
	ev := eventPool.Get().(*Event)
	*ev = e
	cm.queue(ev, owner)
}

func freeEvent(ev *Event) {
	*ev = Event{}
	eventPool.Put(ev)
}

// queue appends an event for later delivery. Called with cm.mu held.
func (cm *CM) queue(ev *Event, owner *ID) {
	if cm.closed {
		freeEvent(ev)
		return
	}
	cm.events = append(cm.events, queuedEvent{ev: ev, owner: owner})
}

// deliver drains the event queue on the calling goroutine unless another
// goroutine already is. One drainer at a time gives the per-id (indeed
// per-CM) ordering; handlers run without cm.mu.
//
// gid is the calling goroutine's id if known (receive loops compute theirs
// once), else 0 and it is computed here: Destroy needs it to tell a call
// from inside a handler from one that must wait for the handler.
func (cm *CM) deliver(gid int64) {
	cm.mu.Lock()
	if cm.delivering {
		cm.mu.Unlock()
		return
	}
	cm.delivering = true
	if gid == 0 {
		gid = goid()
	}
	cm.deliverGo = gid
	for cm.evHead < len(cm.events) && !cm.closed {
		q := cm.events[cm.evHead]
		cm.events[cm.evHead] = queuedEvent{}
		cm.evHead++
		if q.owner.destroyed || q.ev.ID.destroyed {
			// A new connection nobody will ever see must not linger in
			// REQ_RCVD: reject it, as ucm did when purging the event.
			if q.ev.Listener != nil && !q.ev.ID.destroyed {
				cm.destroyUnlocked(q.ev.ID, false)
			}
			freeEvent(q.ev)
			continue
		}
		cm.running = q.owner
		h := q.owner.handler
		cm.mu.Unlock()
		out := Keep
		if h != nil {
			out = h(q.ev)
		}
		cm.mu.Lock()
		cm.running = nil
		cm.cond.Broadcast()
		if out != Keep && !q.ev.ID.destroyed {
			silent := out == DestroySilently && q.ev.Type == EventReqReceived
			cm.destroyUnlocked(q.ev.ID, silent)
		}
		freeEvent(q.ev)
	}
	// Reuse the queue's array once it is drained.
	clear(cm.events[:cm.evHead])
	cm.events, cm.evHead = cm.events[:0], 0
	cm.delivering = false
	cm.deliverGo = 0
	cm.mu.Unlock()
}

// destroyUnlocked destroys id from the drain loop: the MADs go out with
// cm.mu released, then the loop goes on. Called and returns with cm.mu held.
func (cm *CM) destroyUnlocked(id *ID, silent bool) {
	var t txn
	cm.destroyLocked(&t, id, silent)
	closed := cm.closed
	cm.mu.Unlock()
	if !closed {
		cm.transmit(&t)
	}
	cm.mu.Lock()
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
