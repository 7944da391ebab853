package storm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
	"github.com/ucmd/ucmd/hw/sim"
)

// CM management attribute IDs (IBTA vol. 1 table 12.6.2), for the counts
// taken from the fabric's trace.
const (
	attrREQ = 0x0010
	attrMRA = 0x0011
	attrREJ = 0x0012
	attrREP = 0x0013
	attrRTU = 0x0014
)

const stateEstablished = cmcore.StateEstablished

// simNet is N CMs on one hw/sim fabric driven by one fake clock, one
// goroutine at a time: a pump on the driving goroutine hands each MAD that
// reached a port to that port's CM receive goroutine and waits until the
// goroutine is back in Recv, and timers (the fabric's latencies, the CMs'
// retransmissions and timewaits, the harness's own) fire on the driving
// goroutine inside Advance. So a seed replays exactly and the simulated
// clock only moves when every CM is idle: processing takes no simulated
// time, and the wall clock measures what it costs.
type simNet struct {
	clk  clock.Clock
	fake *clock.Fake // nil on the real clock
	f    *sim.Fabric

	mu     sync.Mutex // guards ready, head and sends (trace runs under the fabric's lock)
	ready  []*pumpEP  // ports with a MAD queued, in arrival order
	head   int
	sends  [32]uint64 // MADs sent per attribute ID - 0x10 (retransmissions included)
	byPort map[sim.PortID]*pumpEP
	eps    []*pumpEP

	autoMRA uint8 // cmcore.Options.AutoMRA of the CMs added from now on

	// The applications woken by their file (an event queued), in wake
	// order; run on the driving goroutine between MAD deliveries.
	appMu sync.Mutex
	woken []*stack
	spare []*stack
	errs  atomic.Int64 // commands that failed where none should
}

// wake queues st's application to run: on the fake clock in the driving
// goroutine's list, on the real one on its own goroutine (each node a host
// with its own application running concurrently, as on a real fabric).
func (n *simNet) wake(st *stack) {
	if st.kick != nil {
		select {
		case st.kick <- struct{}{}:
		default:
		}
		return
	}
	n.appMu.Lock()
	if !st.woken {
		st.woken = true
		n.woken = append(n.woken, st)
	}
	n.appMu.Unlock()
}

// runApps runs every woken application until none is; it reports whether
// any ran. Driving goroutine only.
func (n *simNet) runApps() bool {
	ran := false
	for {
		n.appMu.Lock()
		ws := n.woken
		n.woken, n.spare = n.spare[:0], nil
		for _, st := range ws {
			st.woken = false
		}
		n.appMu.Unlock()
		for _, st := range ws {
			st.mu.Lock()
			st.run()
			st.mu.Unlock()
		}
		clear(ws)
		n.appMu.Lock()
		n.spare = ws[:0]
		n.appMu.Unlock()
		if len(ws) == 0 {
			return ran
		}
		ran = true
	}
}

func newSimNet(seed uint64, knobs sim.Knobs, queueLen int) *simNet {
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	n := &simNet{
		clk:    fake,
		fake:   fake,
		f:      sim.New(sim.Config{Seed: seed, Clock: fake, Knobs: knobs, QueueLen: queueLen}),
		byPort: make(map[sim.PortID]*pumpEP),
	}
	n.f.SetTrace(n.trace)
	return n
}

// newRealNet is a simNet on the real clock without the pump: every CM's
// receive goroutine runs when its MADs arrive, the fabric's latencies and
// the CMs' timers are real timers, and a CM slow to answer makes its peers
// retransmit, as on a real fabric. Nothing replays.
func newRealNet(seed uint64, knobs sim.Knobs, queueLen int) *simNet {
	n := &simNet{
		clk:    clock.Real{},
		f:      sim.New(sim.Config{Seed: seed, Clock: clock.Real{}, Knobs: knobs, QueueLen: queueLen}),
		byPort: make(map[sim.PortID]*pumpEP),
	}
	n.f.SetTrace(n.trace)
	return n
}

func (n *simNet) trace(e sim.Event) {
	switch e.Kind {
	case sim.EventDelivered:
		if n.fake == nil {
			return
		}
		ep := n.byPort[e.Dst]
		n.mu.Lock()
		n.ready = append(n.ready, ep)
		n.mu.Unlock()
	case sim.EventSend:
		if a := e.AttrID - attrREQ; a < uint16(len(n.sends)) {
			n.mu.Lock()
			n.sends[a]++
			n.mu.Unlock()
		}
	}
}

func (n *simNet) sent(attr uint16) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sends[attr-attrREQ]
}

// addCM adds a device with one IB port and starts a CM on it.
func (n *simNet) addCM(name string) (*cmcore.CM, *sim.Device, error) {
	d, err := n.f.AddIB(name, 1)
	if err != nil {
		return nil, nil, err
	}
	var hd hw.Device = d
	if n.fake != nil {
		pd := &pumpDev{Device: d}
		for _, p := range d.Ports() {
			pd.ports = append(pd.ports, &pumpPort{Port: p, sp: p.(*sim.Port), net: n})
		}
		hd = pd
	}
	cm := cmcore.New(hd, cmcore.Options{Clock: n.clk, AutoMRA: n.autoMRA})
	if err := cm.Start(); err != nil {
		return nil, nil, err
	}
	return cm, d, nil
}

// settle delivers every queued MAD, and what they cause, until the fabric
// is quiet at the current instant. It returns how many MADs it delivered.
func (n *simNet) settle() int {
	delivered := 0
	for {
		n.mu.Lock()
		if n.head == len(n.ready) {
			n.ready, n.head = n.ready[:0], 0
			n.mu.Unlock()
			return delivered
		}
		e := n.ready[n.head]
		n.ready[n.head] = nil
		n.head++
		n.mu.Unlock()
		r, err := e.inner.Recv(context.Background())
		if err != nil {
			continue // closed meanwhile
		}
		e.in <- r
		<-e.back
		delivered++
	}
}

// runUntil settles and fires timers in deadline order until stop reports
// true (checked at every instant), no timer is left, or deadline passes. It
// reports whether stop ended it.
func (n *simNet) runUntil(ctx context.Context, deadline time.Time, stop func() bool) (bool, error) {
	if n.fake == nil {
		return n.waitUntil(ctx, deadline, stop)
	}
	for i := 0; ; i++ {
		for {
			n.settle()
			if !n.runApps() {
				break
			}
		}
		if stop != nil && stop() {
			return true, nil
		}
		if i&1023 == 0 && ctx.Err() != nil {
			return false, ctx.Err()
		}
		next, ok := n.fake.Next()
		if !ok {
			return false, nil
		}
		if next.After(deadline) {
			return false, fmt.Errorf("storm: simulated deadline %s passed", deadline.Sub(time.Unix(1_000_000, 0)))
		}
		n.fake.Advance(next.Sub(n.fake.Now()))
	}
}

// waitUntil is runUntil on the real clock: it polls stop, which must be
// set (there is no knowing when real timers are done).
func (n *simNet) waitUntil(ctx context.Context, deadline time.Time, stop func() bool) (bool, error) {
	for {
		if stop() {
			return true, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("storm: deadline passed")
		}
		time.Sleep(time.Millisecond)
	}
}

// onReal returns stop on the real clock and nil (run dry) on the fake one.
func (n *simNet) onReal(stop func() bool) func() bool {
	if n.fake == nil {
		return stop
	}
	return nil
}

// pending is the number of timers left on the fake clock, -1 on the real
// one (not known).
func (n *simNet) pending() int {
	if n.fake == nil {
		return -1
	}
	return n.fake.Pending()
}

type pumpDev struct {
	hw.Device
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
	e := &pumpEP{inner: inner, in: make(chan hw.Received), back: make(chan struct{})}
	n := p.net
	n.f.SetTrace(nil) // byPort is read by the trace without a lock
	n.byPort[p.sp.ID()] = e
	n.eps = append(n.eps, e)
	n.f.SetTrace(n.trace)
	return e, nil
}

// pumpEP is the endpoint a CM sees: sends go straight to the fabric,
// receives come only from the pump.
type pumpEP struct {
	inner hw.Endpoint
	in    chan hw.Received
	back  chan struct{}
	busy  bool // CM goroutine only: a MAD was handed out
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

func (e *pumpEP) Close() error { return e.inner.Close() }
