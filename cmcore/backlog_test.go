package cmcore

import (
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
)

// A REQ flood from one port while another goroutine is stuck delivering
// (a slow handler; on a two-port HCA, the other port's receiver) holds the
// flooding receiver once maxBacklog events wait, instead of queueing one
// id and one event per REQ for as long as the flood lasts. Nothing is
// lost: once the drainer moves on, every REQ is delivered, in order, and
// the drainer delivers what was queued, not the rest of the flood.
func TestREQFloodBacklogBounded(t *testing.T) {
	h := newHarness(t)
	const n = 3 * maxBacklog
	var (
		mu      sync.Mutex
		order   []uint32
		maxSeen int
	)
	stalled, release, drainerDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	first := true
	l := h.cm.CreateID(func(ev *Event) Outcome {
		if ev.Type != EventREQReceived {
			return Keep
		}
		if first { // only the drainer runs handlers
			first = false
			close(stalled)
			<-release
		}
		if ev.ID.remoteID == 0x1000+2*maxBacklog {
			// By now the stalled drainer has delivered what was queued
			// when it went on and gone back to its own work.
			select {
			case <-drainerDone:
			case <-time.After(20 * time.Second):
				t.Error("the stalled drainer went on delivering the flood")
			}
		}
		_, queued := h.cm.Count()
		mu.Lock()
		order = append(order, ev.ID.remoteID)
		maxSeen = max(maxSeen, queued)
		mu.Unlock()
		return Destroy
	})
	must(t, l.Listen(0x1234, 0))
	req := func(i int) { h.inject(uint64(i), nthREQ(i)) }
	go func() { req(0); close(drainerDone) }()
	<-stalled
	flooded := make(chan struct{})
	go func() {
		for i := 1; i < n; i++ {
			req(i)
		}
		close(flooded)
	}()

	// Either the flooding receiver is held, or it got through them all.
	held := func() bool {
		h.cm.mu.Lock()
		defer h.cm.mu.Unlock()
		return h.cm.waiting == 1
	}
	deadline := time.Now().Add(20 * time.Second)
	for !held() {
		select {
		case <-flooded:
			_, q := h.cm.Count()
			close(release)
			t.Fatalf("%d REQs queued behind a stalled handler; the flood was never held", q)
		default:
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the flooding receiver neither finished nor was held")
		}
		time.Sleep(time.Millisecond)
	}
	if ids, q := h.cm.Count(); q > maxBacklog || ids > maxBacklog+2 {
		t.Errorf("%d events and %d ids held while the flood waits, want at most %d", q, ids, maxBacklog)
	}

	close(release)
	<-flooded
	<-drainerDone
	mu.Lock()
	defer mu.Unlock()
	if len(order) != n {
		t.Fatalf("%d REQs delivered, want all %d", len(order), n)
	}
	for i, id := range order {
		if id != uint32(0x1000+i) {
			t.Fatalf("REQ %d delivered as the %dth", id-0x1000, i)
		}
	}
	if maxSeen > maxBacklog {
		t.Errorf("up to %d events queued, want at most %d", maxSeen, maxBacklog)
	}
	if c := cap(h.cm.events); c > 4*maxBacklog {
		t.Errorf("the queue's array kept %d slots", c)
	}
}

// nthREQ is the ith of a run of REQs for service 0x1234, each from its own
// comm id and QP (0x1000+i), so that none is a duplicate or stale.
func nthREQ(i int) *wire.REQ {
	m := peerREQ(0x1234)
	m.LocalCommID, m.LocalQPN = uint32(0x1000+i), uint32(0x1000+i)
	return m
}

// A queue that is never empty (events arriving as fast as they are
// delivered) keeps an array the size of its backlog, not a slot for every
// event since it last was empty.
func TestQueueSlidesDown(t *testing.T) {
	h := newHarness(t)
	cm := h.cm
	owner := h.newID()
	cm.mu.Lock()
	defer cm.mu.Unlock()
	for range 100_000 {
		cm.post(Event{Type: EventREQReceived, ID: owner}, owner)
		if cm.backlog() > 10 {
			freeEvent(cm.events[cm.evHead].ev)
			cm.events[cm.evHead] = queuedEvent{}
			cm.evHead++
		}
	}
	if c := cap(cm.events); c > 64 {
		t.Errorf("a backlog of 10 kept an array of %d", c)
	}
	if b := cm.backlog(); b != 10 {
		t.Errorf("backlog %d after sliding, want 10", b)
	}
}

// A handler that panics (recovered up the stack, as the CUSE server
// recovers its requests) leaves the CM delivering the events after it.
func TestHandlerPanicLeavesDeliveryGoing(t *testing.T) {
	h := newHarness(t)
	var got []uint32
	l := h.cm.CreateID(func(ev *Event) Outcome {
		if ev.Type != EventREQReceived {
			return Keep
		}
		if ev.ID.remoteID == 0x1000 {
			panic("a handler's bug")
		}
		got = append(got, ev.ID.remoteID)
		return Destroy
	})
	must(t, l.Listen(0x1234, 0))
	req := func(i int) { h.inject(uint64(i), nthREQ(i)) }
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the handler's panic did not reach its caller")
			}
		}()
		req(0)
	}()
	req(1)
	if len(got) != 1 || got[0] != 0x1001 {
		t.Errorf("after a handler's panic, delivered %#x, want the next REQ's 0x1001", got)
	}
}
