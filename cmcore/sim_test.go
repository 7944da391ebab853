package cmcore

import (
	"slices"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw/sim"
)

// pair is two CMs on one fabric: a actively connects to b, which listens
// on service 0x1234 with an auto-responding handler unless told otherwise.
type pair struct {
	n            *simNet
	a, b         *CM
	da, db       *sim.Device
	ra, rb       *recorder
	listener     *ID
	bChildren    []*ID
	passiveReact func(ev *Event) Outcome
}

func newPair(t *testing.T, seed uint64, knobs sim.Knobs) *pair {
	p := &pair{n: newSimNet(t, seed, knobs), ra: newRecorder(), rb: newRecorder()}
	p.a, p.da = p.n.addCM("a")
	p.b, p.db = p.n.addCM("b")
	t.Cleanup(p.n.close)
	p.rb.react = func(ev *Event) Outcome {
		if ev.Type == EventREQReceived {
			p.bChildren = append(p.bChildren, ev.ID)
		}
		if p.passiveReact != nil {
			return p.passiveReact(ev)
		}
		return Keep
	}
	p.listener = p.b.CreateID(p.rb.handle)
	must(t, p.listener.Listen(0x1234, 0))
	return p
}

func (p *pair) req(qpn uint32) *REQParams {
	r := testREQParams()
	r.Primary = simPath(p.da, p.db)
	r.QPN = qpn
	return r
}

// acceptAll makes b answer REQ with REP and DREQ with DREP, and a answer
// REP with RTU.
func (p *pair) acceptAll() {
	p.passiveReact = func(ev *Event) Outcome {
		switch ev.Type {
		case EventREQReceived:
			return destroyIf(ev.ID.SendREP(&REPParams{QPN: ev.REQ.RemoteQPN + 0x10000, StartingPSN: 7}))
		case EventDREQReceived:
			return destroyIf(ev.ID.SendDREP(nil))
		}
		return Keep
	}
	p.ra.react = func(ev *Event) Outcome {
		switch ev.Type {
		case EventREPReceived:
			return destroyIf(ev.ID.SendRTU(nil))
		case EventDREQReceived:
			return destroyIf(ev.ID.SendDREP(nil))
		}
		return Keep
	}
}

func wantEvents(t *testing.T, side string, got []EventType, want ...EventType) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s events %v, want %v", side, got, want)
	}
}

func TestSimConnectDisconnect(t *testing.T) {
	p := newPair(t, 1, sim.Knobs{})
	p.acceptAll()
	a := p.a.CreateID(p.ra.handle)
	must(t, a.SendREQ(p.req(0x100)))
	p.n.run(time.Second)
	if len(p.bChildren) != 1 {
		t.Fatalf("b got %d connections", len(p.bChildren))
	}
	b := p.bChildren[0]
	sa, _ := a.State()
	sb, _ := b.State()
	if sa != StateEstablished || sb != StateEstablished {
		t.Fatalf("states %v / %v", sa, sb)
	}
	if aa, ba := a.Attr(), b.Attr(); aa.RemoteCommID != ba.LocalCommID || ba.RemoteCommID != aa.LocalCommID {
		t.Errorf("comm IDs don't pair: %+v %+v", aa, ba)
	}
	must(t, a.SendDREQ(nil))
	p.n.run(10 * time.Second)
	wantEvents(t, "active", p.ra.log[a], EventREPReceived, EventDREPReceived, EventTimewaitExit)
	wantEvents(t, "passive", p.rb.log[b], EventREQReceived, EventRTUReceived, EventDREQReceived, EventTimewaitExit)
	a.Destroy()
	b.Destroy()
	p.listener.Destroy()
	p.n.run(time.Minute)
	for _, cm := range []*CM{p.a, p.b} {
		if ids, evs := cm.Count(); ids != 0 || evs != 0 {
			t.Errorf("%d ids and %d events left", ids, evs)
		}
	}
	if n := p.n.clk.Pending(); n != 0 {
		t.Errorf("%d timers left", n)
	}
	// REQ, RTU, DREQ from a; REP, DREP from b; nothing lost or retried.
	if sta, stb := p.a.Stats(), p.b.Stats(); sta != (Stats{Sent: 3, Received: 2}) || stb != (Stats{Sent: 2, Received: 3}) {
		t.Errorf("stats a %+v, b %+v", sta, stb)
	}
}

func TestSimRejectByPassive(t *testing.T) {
	p := newPair(t, 1, sim.Knobs{})
	p.passiveReact = func(ev *Event) Outcome {
		return destroyIf(ev.ID.SendREJ(wire.REJConsumerDefined, nil, []byte("no")))
	}
	a := p.a.CreateID(p.ra.handle)
	must(t, a.SendREQ(p.req(0x100)))
	p.n.run(time.Minute)
	wantEvents(t, "active", p.ra.log[a], EventREJReceived)
	wantEvents(t, "passive", p.rb.log[p.bChildren[0]], EventREQReceived)
	if s, _ := a.State(); s != StateIdle {
		t.Errorf("active %v", s)
	}
}

func TestSimRejectByActive(t *testing.T) {
	p := newPair(t, 1, sim.Knobs{})
	p.acceptAll()
	p.ra.react = func(ev *Event) Outcome { return destroyIf(ev.ID.SendREJ(wire.REJConsumerDefined, nil, nil)) }
	a := p.a.CreateID(p.ra.handle)
	must(t, a.SendREQ(p.req(0x100)))
	p.n.run(time.Minute)
	wantEvents(t, "active", p.ra.log[a], EventREPReceived)
	// A REJ received in REP_SENT resets to IDLE (only REJ 10 means TIMEWAIT).
	wantEvents(t, "passive", p.rb.log[p.bChildren[0]], EventREQReceived, EventREJReceived)
	if s, _ := p.bChildren[0].State(); s != StateIdle {
		t.Errorf("passive %v, want IDLE", s)
	}
}

// TestSimMRAExtendsSlowAccept: the passive side MRAs and answers long
// after the REQ would have timed out; the connection still comes up.
func TestSimMRAExtendsSlowAccept(t *testing.T) {
	p := newPair(t, 1, sim.Knobs{})
	p.acceptAll()
	p.passiveReact = func(ev *Event) Outcome {
		if ev.Type == EventREQReceived {
			return destroyIf(ev.ID.SendMRA(22, nil)) // ≈16.8 s
		}
		return Keep
	}
	a := p.a.CreateID(p.ra.handle)
	must(t, a.SendREQ(p.req(0x100))) // unextended: REQ_ERROR after 4 × 384 ms
	p.n.run(10 * time.Second)
	b := p.bChildren[0]
	must(t, b.SendREP(&REPParams{QPN: 0x200}))
	p.n.run(time.Second)
	wantEvents(t, "active", p.ra.log[a], EventMRAReceived, EventREPReceived)
	wantEvents(t, "passive", p.rb.log[b], EventREQReceived, EventRTUReceived)
}

func TestSimLAPAPR(t *testing.T) {
	p := newPair(t, 1, sim.Knobs{})
	p.acceptAll()
	a := p.a.CreateID(p.ra.handle)
	must(t, a.SendREQ(p.req(0x100)))
	p.n.run(time.Second)
	b := p.bChildren[0]
	p.passiveReact = func(ev *Event) Outcome {
		if ev.Type == EventLAPReceived {
			return destroyIf(ev.ID.SendAPR(wire.APRSuccess, []byte{1}, nil))
		}
		return Keep
	}
	must(t, a.SendLAP(simPath(p.da, p.db), nil))
	p.n.run(time.Second)
	wantEvents(t, "active", p.ra.log[a], EventREPReceived, EventAPRReceived)
	wantEvents(t, "passive", p.rb.log[b], EventREQReceived, EventRTUReceived, EventLAPReceived)
	if _, l := a.State(); l != LAPIdle {
		t.Errorf("active LAP state %v", l)
	}
}

func TestSimSIDR(t *testing.T) {
	p := newPair(t, 1, sim.Knobs{})
	p.passiveReact = func(ev *Event) Outcome {
		if ev.Type == EventSIDRREQReceived {
			return destroyIf(ev.ID.SendSIDRREP(&SIDRREPParams{QPN: 0x77, QKey: 0x1111}))
		}
		return Keep
	}
	var got *Event
	ra := func(ev *Event) Outcome { cp := *ev; got = &cp; return Keep }
	a := p.a.CreateID(ra)
	must(t, a.SendSIDRREQ(&SIDRREQParams{Path: simPath(p.da, p.db), ServiceID: 0x1234, TimeoutMs: 100, MaxCMRetries: 3}))
	p.n.run(time.Second)
	if got == nil || got.Type != EventSIDRREPReceived || got.SIDRREP.QPN != 0x77 || got.SIDRREP.QKey != 0x1111 {
		t.Fatalf("got %+v", got)
	}
}

// TestSimDuplicates: every MAD delivered twice; each side still sees each
// event exactly once.
func TestSimDuplicates(t *testing.T) {
	p := newPair(t, 1, sim.Knobs{Duplicate: 1})
	p.acceptAll()
	a := p.a.CreateID(p.ra.handle)
	must(t, a.SendREQ(p.req(0x100)))
	p.n.run(time.Second)
	must(t, a.SendDREQ(nil))
	p.n.run(10 * time.Second)
	if len(p.bChildren) != 1 {
		t.Fatalf("duplicate REQ made %d connections", len(p.bChildren))
	}
	wantEvents(t, "active", p.ra.log[a], EventREPReceived, EventDREPReceived, EventTimewaitExit)
	wantEvents(t, "passive", p.rb.log[p.bChildren[0]], EventREQReceived, EventRTUReceived, EventDREQReceived, EventTimewaitExit)
}

// TestSimLostRTU: the RTU is lost; b's REP retransmission reaches a, which
// is ESTABLISHED and resends the RTU.
func TestSimLostRTU(t *testing.T) {
	p := newPair(t, 1, sim.Knobs{})
	p.acceptAll()
	dropped := false
	p.n.f.SetFilter(func(src, dst hwPort, mad *hwMAD) sim.Verdict {
		if !dropped && attrOf(mad) == wire.AttrRTU {
			dropped = true
			return sim.Drop
		}
		return sim.Pass
	})
	a := p.a.CreateID(p.ra.handle)
	must(t, a.SendREQ(p.req(0x100)))
	p.n.run(2 * time.Second)
	if !dropped {
		t.Fatal("no RTU dropped")
	}
	wantEvents(t, "passive", p.rb.log[p.bChildren[0]], EventREQReceived, EventRTUReceived)
	wantEvents(t, "active", p.ra.log[a], EventREPReceived)
}

// TestSimStaleConnection: a's CM restarts and reuses a QPN b still
// considers connected: b answers REJ 10 and disconnects the old
// connection.
func TestSimStaleConnection(t *testing.T) {
	p := newPair(t, 1, sim.Knobs{})
	p.acceptAll()
	a := p.a.CreateID(p.ra.handle)
	must(t, a.SendREQ(p.req(0x100)))
	p.n.run(time.Second)
	old := p.bChildren[0]
	p.a.Close() // crash: no DREQ
	a2cm := p.n.startCM(p.da)
	r2 := newRecorder()
	a2 := a2cm.CreateID(r2.handle)
	must(t, a2.SendREQ(p.req(0x100)))
	p.n.run(time.Minute)
	wantEvents(t, "restarted active", r2.log[a2], EventREJReceived, EventTimewaitExit)
	// The old connection got a DREQ answered by the restarted CM's
	// unknown-ID DREP.
	wantEvents(t, "old passive", p.rb.log[old], EventREQReceived, EventRTUReceived, EventDREPReceived, EventTimewaitExit)
	if len(p.bChildren) != 1 {
		t.Errorf("stale REQ created a connection")
	}
}

// TestSimTimeouts: partitions end each request in its *_ERROR event.
func TestSimTimeouts(t *testing.T) {
	t.Run("REQ", func(t *testing.T) {
		p := newPair(t, 1, sim.Knobs{})
		p.n.f.Partition(p.da.Port(1), p.db.Port(1))
		a := p.a.CreateID(p.ra.handle)
		must(t, a.SendREQ(p.req(0x100)))
		p.n.run(time.Minute)
		wantEvents(t, "active", p.ra.log[a], EventREQError)
		st := p.a.Stats()
		if st.TimedOut != 1 || st.Retransmitted == 0 || st.Sent != st.Retransmitted+1 || st.Received != 0 {
			t.Errorf("stats after an unanswered REQ: %+v", st)
		}
	})
	t.Run("REP", func(t *testing.T) {
		p := newPair(t, 1, sim.Knobs{})
		p.passiveReact = func(ev *Event) Outcome {
			if ev.Type == EventREQReceived {
				p.n.f.Partition(p.da.Port(1), p.db.Port(1))
				return destroyIf(ev.ID.SendREP(&REPParams{QPN: 0x200}))
			}
			return Keep
		}
		a := p.a.CreateID(p.ra.handle)
		must(t, a.SendREQ(p.req(0x100)))
		p.n.run(time.Minute)
		wantEvents(t, "active", p.ra.log[a], EventREQError)
		wantEvents(t, "passive", p.rb.log[p.bChildren[0]], EventREQReceived, EventREPError)
	})
	t.Run("DREQ", func(t *testing.T) {
		p := newPair(t, 1, sim.Knobs{})
		p.acceptAll()
		a := p.a.CreateID(p.ra.handle)
		must(t, a.SendREQ(p.req(0x100)))
		p.n.run(time.Second)
		p.n.f.Partition(p.da.Port(1), p.db.Port(1))
		must(t, a.SendDREQ(nil))
		p.n.run(time.Minute)
		wantEvents(t, "active", p.ra.log[a], EventREPReceived, EventDREQError, EventTimewaitExit)
	})
}
