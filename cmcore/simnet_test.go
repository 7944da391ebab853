package cmcore

import (
	"context"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
	"github.com/ucmd/ucmd/hw/sim"
)

// simNet runs CMs on an hw/sim fabric, deterministically: the fabric has
// no delay (delivery happens inside Send), and a pump on the test goroutine
// hands each queued MAD to its CM's receive goroutine and waits until that
// goroutine is back in Recv, so exactly one goroutine works at a time and
// a seed replays exactly. Timers fire on the test goroutine in Advance.
type simNet struct {
	t   testing.TB
	f   *sim.Fabric
	clk *clock.Fake
	eps []*pumpEP
	cms []*CM
}

func newSimNet(t testing.TB, seed uint64, knobs sim.Knobs) *simNet {
	clk := clock.NewFake(time.Unix(2_000_000, 0))
	return &simNet{t: t, clk: clk, f: sim.New(sim.Config{Seed: seed, Clock: clk, Knobs: knobs})}
}

// addCM adds an IB device with one port and starts a CM on it.
func (n *simNet) addCM(name string) (*CM, *sim.Device) {
	n.t.Helper()
	d, err := n.f.AddIB(name, 1)
	if err != nil {
		n.t.Fatal(err)
	}
	return n.startCM(d), d
}

func (n *simNet) startCM(d *sim.Device) *CM {
	n.t.Helper()
	pd := &pumpDev{Device: d, net: n}
	for _, p := range d.Ports() {
		pd.ports = append(pd.ports, &pumpPort{Port: p, sp: p.(*sim.Port), net: n})
	}
	cm := New(pd, Options{Clock: n.clk})
	if err := cm.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.cms = append(n.cms, cm)
	return cm
}

// settle delivers every queued MAD, including those sent in reaction,
// until the fabric is quiet.
func (n *simNet) settle() {
	for progress := true; progress; {
		progress = false
		for _, e := range n.eps {
			if e.closed {
				continue
			}
			for e.taken < e.sp.Counters().Received {
				r, err := e.inner.Recv(context.Background())
				if err != nil {
					n.t.Fatalf("sim recv: %v", err)
				}
				e.taken++
				e.in <- r
				<-e.back
				progress = true
			}
		}
	}
}

// run settles, then moves the clock forward by d, firing timers (and
// settling after each) in deadline order.
func (n *simNet) run(d time.Duration) {
	end := n.clk.Now().Add(d)
	for {
		n.settle()
		next, ok := n.clk.Next()
		if !ok || next.After(end) {
			n.clk.Advance(end.Sub(n.clk.Now()))
			n.settle()
			return
		}
		n.clk.Advance(next.Sub(n.clk.Now()))
	}
}

func (n *simNet) close() {
	for _, cm := range n.cms {
		cm.Close()
	}
	n.cms = nil
}

type pumpDev struct {
	hw.Device
	net   *simNet
	ports []*pumpPort
}

func (d *pumpDev) Ports() []hw.Port {
	ps := make([]hw.Port, len(d.ports))
	for i, p := range d.ports {
		ps[i] = p
	}
	return ps
}

type pumpPort struct {
	hw.Port
	sp  *sim.Port
	net *simNet
}

func (p *pumpPort) OpenMAD(reg hw.Registration) (hw.Endpoint, error) {
	inner, err := p.Port.OpenMAD(reg)
	if err != nil {
		return nil, err
	}
	e := &pumpEP{inner: inner, sp: p.sp, in: make(chan hw.Received), back: make(chan struct{}), taken: p.sp.Counters().Received}
	p.net.eps = append(p.net.eps, e)
	return e, nil
}

// pumpEP is the endpoint the CM sees: sends go straight to the fabric,
// receives come only from the pump.
type pumpEP struct {
	inner  hw.Endpoint
	sp     *sim.Port
	taken  uint64 // MADs the pump has taken from inner (pump goroutine only)
	closed bool   // pump goroutine only
	in     chan hw.Received
	back   chan struct{}
	busy   bool // CM goroutine only: a MAD was handed out
}

func (e *pumpEP) Send(ctx context.Context, dst hw.Address, mad *hw.MAD) error {
	return e.inner.Send(ctx, dst, mad)
}

func (e *pumpEP) Recv(ctx context.Context) (hw.Received, error) {
	if e.busy {
		e.busy = false
		select {
		case e.back <- struct{}{}:
		case <-ctx.Done():
			return hw.Received{}, ctx.Err()
		}
	}
	select {
	case r := <-e.in:
		e.busy = true
		return r, nil
	case <-ctx.Done():
		return hw.Received{}, ctx.Err()
	}
}

// Close is called by CM.Close on the test goroutine, which is also the
// pump's.
func (e *pumpEP) Close() error {
	e.closed = true
	return e.inner.Close()
}

// recorder is a handler that logs events per id and can react.
type recorder struct {
	log   map[*ID][]EventType
	react func(ev *Event) Outcome
}

func newRecorder() *recorder { return &recorder{log: make(map[*ID][]EventType)} }

func (r *recorder) handle(ev *Event) Outcome {
	r.log[ev.ID] = append(r.log[ev.ID], ev.Type)
	if r.react != nil {
		return r.react(ev)
	}
	return Keep
}

// simPath is the path from a's port 1 to b's port 1.
func simPath(a, b *sim.Device) *PathRecord {
	aa, _ := a.Port(1).Attr()
	ba, _ := b.Port(1).Attr()
	return &PathRecord{
		SGID: aa.GIDs[0].GID, DGID: ba.GIDs[0].GID, SLID: aa.LID, DLID: ba.LID,
		PKey: 0xffff, MTU: 4, Rate: 3, PacketLifeTime: 14, Reversible: true,
	}
}

type (
	hwPort = hw.Port
	hwMAD  = hw.MAD
)

func attrOf(mad *hw.MAD) uint16 { return uint16(mad[16])<<8 | uint16(mad[17]) }
