package cmcore

import "sync"

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
	if cm.evHead > 0 && len(cm.events) == cap(cm.events) && cm.evHead >= len(cm.events)/2 {
		// Slide the backlog down rather than grow: while the queue is
		// never empty the array would otherwise keep a slot for every
		// event since it last was.
		n := copy(cm.events, cm.events[cm.evHead:])
		clear(cm.events[n:])
		cm.events, cm.evHead = cm.events[:n], 0
	}
	cm.events = append(cm.events, queuedEvent{ev: ev, owner: owner})
}

func (cm *CM) backlog() int { return len(cm.events) - cm.evHead }

// maxBacklog bounds the undelivered events the receive path adds to.
// One goroutine at a time delivers; without a bound, another port's
// receiver could queue a REQ flood faster than a slow handler takes it,
// one new id and one event per REQ held outside every ucm limit for as
// long as the flood lasts. A receiver that finds the backlog full waits
// (throttle), reading nothing: its MADs wait in the kernel's queue, as
// they do while a handler runs (hw.Deliverer).
const maxBacklog = 1024

// throttle holds the receiving goroutine while another one delivers and
// the backlog is full, until that drain ends (the drainer wakes it then,
// and Close does), then takes over what is left. A wake-up that finds a
// new drainer already at work goes on waiting unless the backlog is down
// to half. Held receivers add nothing until that drain ends, so a flood
// faster than its delivery cannot keep the goroutine that happened to be
// draining (another port's receiver, a timer, a client's command) at it
// for much more than maxBacklog events.
func (cm *CM) throttle() {
	cm.mu.Lock()
	if !cm.delivering || cm.backlog() < maxBacklog {
		cm.mu.Unlock()
		return
	}
	cm.waiting++
	for !cm.closed && cm.delivering && cm.backlog() > maxBacklog/2 {
		cm.room.Wait()
	}
	cm.waiting--
	take := !cm.closed && !cm.delivering && cm.backlog() > 0
	cm.mu.Unlock()
	if take {
		cm.deliver()
	}
}

// deliver drains the event queue on the calling goroutine unless another
// goroutine already is. One drainer at a time gives the per-id (indeed
// per-CM) ordering; handlers run without cm.mu.
//
// The drainer is the only one that knows which id a handler call is for
// (q.ev.ID), and it alone acts on the call's Outcome, once the handler has
// returned. Nothing in cmcore ever waits for a handler, so no caller can
// tell a call from inside a handler from any other, and none needs to:
// Destroy behaves the same from everywhere (see ID.Destroy and the
// deadlock-freedom argument in doc.go).
func (cm *CM) deliver() {
	cm.mu.Lock()
	if cm.delivering {
		cm.mu.Unlock()
		return
	}
	cm.delivering = true
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
		h := q.owner.handler
		cm.mu.Unlock()
		out := Keep
		if h != nil {
			out = cm.runHandler(h, q.ev)
		}
		cm.mu.Lock()
		// The handler may have destroyed ev.ID itself (then the outcome
		// has nothing left to do), or another goroutine may have.
		if out != Keep && !q.ev.ID.destroyed {
			silent := out == DestroySilently && q.ev.Type == EventREQReceived
			cm.destroyUnlocked(q.ev.ID, silent)
		}
		freeEvent(q.ev)
	}
	// Reuse the queue's array once it is drained.
	clear(cm.events[:cm.evHead])
	cm.events, cm.evHead = cm.events[:0], 0
	cm.delivering = false
	if cm.waiting > 0 {
		cm.room.Broadcast()
	}
	cm.mu.Unlock()
}

// runHandler calls h. A handler that panics (a bug, which the CUSE
// server recovers from on its request's goroutine) must not leave the CM
// marked as delivering: nothing would deliver its events again, and once
// the backlog is full its receivers would wait for good.
func (cm *CM) runHandler(h Handler, ev *Event) Outcome {
	returned := false
	defer func() {
		if !returned {
			cm.mu.Lock()
			cm.delivering = false
			cm.room.Broadcast()
			cm.mu.Unlock()
		}
	}()
	out := h(ev)
	returned = true
	return out
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
