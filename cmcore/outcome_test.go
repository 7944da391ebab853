package cmcore

import (
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
)

// Handler outcomes and Destroy from inside handlers (issue 16 points 2
// and 3): the handler's return value alone decides what happens to its id,
// and Destroy behaves the same wherever it is called from.

func dreqFor(id *ID) *wire.DREQ {
	return &wire.DREQ{LocalCommID: peerComm, RemoteCommID: id.localID, RemoteQPN: localQPN}
}

// TestOutcomeDestroy: a handler returning Destroy gets its id destroyed
// after it returns, with what Destroy sends in the id's state, and no event
// of the id follows.
func TestOutcomeDestroy(t *testing.T) {
	cases := []struct {
		name  string
		reach string
		in    func(h *harness, id *ID) wire.Message
		check func(t *testing.T, sent []wire.Message)
	}{
		{"DREQ_RECEIVED", "ESTABLISHED", func(h *harness, id *ID) wire.Message { return dreqFor(id) },
			func(t *testing.T, s []wire.Message) { one[*wire.DREP](t, s) }},
		{"REP_RECEIVED", "REQ_SENT", func(h *harness, id *ID) wire.Message { return h.peerREP(id) },
			rejWith(wire.REJConsumerDefined, nil, wire.MessageREP, false)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			id := h.reach(c.reach)
			h.onEvent = func(*Event) Outcome { return Destroy }
			h.inject(0x66, c.in(h, id))
			if evs := h.takeEvents(); len(evs) != 1 {
				t.Fatalf("events %v", evs)
			}
			c.check(t, h.sent())
			if h.cm.acquire(id.localID, peerComm) != nil {
				t.Error("the id is still found after its handler returned Destroy")
			}
			h.clk.Advance(time.Hour)
			none(t, h.sent())
			if evs := h.takeEvents(); len(evs) != 0 {
				t.Errorf("events after Destroy: %v", evs)
			}
			if ids, _ := h.cm.Count(); ids != 0 {
				t.Errorf("%d ids left", ids)
			}
		})
	}
}

// TestSIDROutcome: for a SIDR_REQ both destroying outcomes answer SIDR_REP
// REJECT (only a REQ can be dropped silently); Keep answers nothing yet.
func TestSIDROutcome(t *testing.T) {
	for _, c := range []struct {
		out    Outcome
		reject bool
	}{{Keep, false}, {Destroy, true}, {DestroySilently, true}} {
		t.Run(c.out.String(), func(t *testing.T) {
			h := newHarness(t)
			l := h.newID()
			must(t, l.Listen(0x4444, 0))
			h.onEvent = func(*Event) Outcome { return c.out }
			h.inject(0x88, &wire.SIDRREQ{RequestID: 5, PartitionKey: 0xffff, ServiceID: 0x4444})
			s := h.sent()
			if !c.reject {
				none(t, s)
				return
			}
			if r := one[*wire.SIDRREP](t, s); r.Status != wire.SIDRReject || r.RequestID != 5 {
				t.Errorf("SIDR_REP %+v, want REJECT for request 5", r)
			}
		})
	}
}

// TestOutcomeAfterOwnDestroy: a handler that destroys its own id and then
// returns Destroy sends the destroy's message once.
func TestOutcomeAfterOwnDestroy(t *testing.T) {
	h := newHarness(t)
	id := h.reach("ESTABLISHED")
	h.onEvent = func(ev *Event) Outcome { ev.ID.Destroy(); return Destroy }
	h.inject(0x66, dreqFor(id))
	one[*wire.DREP](t, h.sent())
}

// TestDestroyListenerFromItsHandler: the listener's handler destroys the
// listener inside a REQ event (its own id: the event is the listener's).
// The new connection it was given is the handler's to keep; later REQs
// find no listener (REJ 8).
func TestDestroyListenerFromItsHandler(t *testing.T) {
	h := newHarness(t)
	l := h.newID()
	must(t, l.Listen(0x1234, 0))
	h.onEvent = func(ev *Event) Outcome { ev.Listener.Destroy(); return Keep }
	h.inject(0x77, peerREQ(0x1234))
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREQReceived {
		t.Fatalf("events %v", evs)
	}
	none(t, h.sent())
	child := evs[0].ID
	must(t, child.SendREP(&REPParams{QPN: localQPN}))
	one[*wire.REP](t, h.sent())
	req := peerREQ(0x1234)
	req.LocalCommID, req.LocalQPN = peerComm+1, peerQPN+1
	h.inject(0x78, req)
	rejWith(wire.REJInvalidServiceID, nil, wire.MessageREQ, true)(t, h.sent())
}

// TestDestroyOtherIDFromHandler: a handler destroys another id of its CM
// that has an event queued behind the running one: the other id's destroy
// message goes out at once and its queued event is never delivered.
func TestDestroyOtherIDFromHandler(t *testing.T) {
	h := newHarness(t)
	a := h.reach("ESTABLISHED")
	// b: a passive connection with a second peer, ESTABLISHED too.
	l := h.newID()
	must(t, l.Listen(0x1234, 0))
	req := peerREQ(0x1234)
	req.LocalCommID, req.LocalQPN = peerComm+1, peerQPN+1
	h.inject(0x77, req)
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREQReceived {
		t.Fatalf("REQ gave events %v", evs)
	}
	b := evs[0].ID
	const bQPN = localQPN + 1
	must(t, b.SendREP(&REPParams{QPN: bQPN}))
	h.inject(0x77, &wire.RTU{LocalCommID: peerComm + 1, RemoteCommID: b.localID})
	h.takeEvents()
	h.sent()
	h.onEvent = func(ev *Event) Outcome {
		if ev.ID == a {
			// A DREQ for b is queued behind a's, then b goes.
			h.inject(0x67, &wire.DREQ{LocalCommID: peerComm + 1, RemoteCommID: b.localID, RemoteQPN: bQPN})
			b.Destroy()
		}
		return Keep
	}
	h.inject(0x66, dreqFor(a))
	evs = h.takeEvents()
	if len(evs) != 1 || evs[0].ID != a || evs[0].Type != EventDREQReceived {
		t.Fatalf("events %v, want a's DREQ only", evs)
	}
	if d := one[*wire.DREP](t, h.sent()); d.LocalCommID != b.localID {
		t.Errorf("DREP from %#x, want b's (%#x): b destroyed in DREQ_RCVD", d.LocalCommID, b.localID)
	}
	if st, _ := a.State(); st != StateDREQRcvd {
		t.Errorf("a in %v, want DREQ_RCVD", st)
	}
}

// TestCrossCMDestroyFromHandlers: the handlers of two CMs run at the same
// time and each destroys the other CM's id, whose handler is the other
// one running. This deadlocked while Destroy waited for a running handler
// (cmcore/doc.go's old caveat); now neither waits.
func TestCrossCMDestroyFromHandlers(t *testing.T) {
	h1, h2 := newHarness(t), newHarness(t)
	id1, id2 := h1.reach("ESTABLISHED"), h2.reach("ESTABLISHED")
	var both sync.WaitGroup
	both.Add(2)
	cross := func(other *ID) func(*Event) Outcome {
		return func(*Event) Outcome {
			both.Done()
			both.Wait() // both handlers are running now
			other.Destroy()
			return Keep
		}
	}
	h1.onEvent, h2.onEvent = cross(id2), cross(id1)
	done := make(chan struct{}, 2)
	go func() { h1.inject(0x66, dreqFor(id1)); done <- struct{}{} }()
	go func() { h2.inject(0x66, dreqFor(id2)); done <- struct{}{} }()
	for range 2 {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("deadlock: two CMs' handlers destroying each other's ids")
		}
	}
	for i, h := range []*harness{h1, h2} {
		if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventDREQReceived {
			t.Errorf("CM %d: events %v", i+1, evs)
		}
		one[*wire.DREP](t, h.sent()) // each id destroyed in DREQ_RCVD
	}
}
