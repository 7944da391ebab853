package storm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/ucm"
)

// Pattern is a wire-up pattern.
type Pattern string

const (
	// AllToAll connects every pair of nodes once. Node i connects to
	// i+1, ..., i+(N-1)/2 (mod N), and for even N to i+N/2 when i < N/2,
	// so every node sends about as many REQs as it receives.
	AllToAll Pattern = "all-to-all"
	// RingOnDemand connects each node to its ring successor (so to both
	// neighbours) at the start, then to OnDemand random peers, each on
	// "first use" at a random time within OnDemandSpread; a pair already
	// connected or being connected (either way) is not connected again.
	RingOnDemand Pattern = "ring"
)

// Timeouts are the CM timeouts every REQ carries (IBTA 5-bit times,
// 4.096 µs · 2^x; cmcore converts them as the kernel did: ms = 2^(x-8)).
type Timeouts struct {
	PacketLifeTime          uint8 // path record; REQ interval = 2·ms(PLT) + ms(RemoteCMResponseTimeout)
	RemoteCMResponseTimeout uint8
	LocalCMResponseTimeout  uint8 // the passive side's REP interval
	MaxCMRetries            uint8 // 4 bits
}

// DefaultTimeouts are rdma_cm's (CMA_CM_RESPONSE_TIMEOUT 20,
// CMA_MAX_CM_RETRIES 15) with the packet lifetime of cmcore's tests: a REQ
// is resent every 2·64 + 4096 = 4224 ms, 16 times in all.
var DefaultTimeouts = Timeouts{PacketLifeTime: 14, RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, MaxCMRetries: 15}

// Config is one wire-up storm.
type Config struct {
	Nodes   int
	Pattern Pattern
	// OnDemand and OnDemandSpread shape RingOnDemand (defaults 8 and 10 ms).
	OnDemand       int
	OnDemandSpread time.Duration
	// StartSpread starts each node's wire-up at a random time in
	// [0, StartSpread) (0: all at once, the worst storm).
	StartSpread time.Duration
	// Fabric: one-way latency, uniform extra jitter, loss probability.
	Latency time.Duration
	Jitter  time.Duration
	Loss    float64
	// Duplicate and Reorder are hw/sim's knobs of the same names.
	Duplicate float64
	Reorder   float64
	Seed      uint64
	// QueueLen is each port's receive queue (0: hw/sim's default).
	QueueLen int
	Timeouts Timeouts
	// Deadline bounds the simulated time (0: 10 minutes).
	Deadline time.Duration
	// NoTeardown skips the disconnect phase and its leak check.
	NoTeardown bool
	// RealClock runs on the real clock without the pump (see newRealNet):
	// times are wall-clock times, CPU load delays answers, peers
	// retransmit; Deadline is then wall-clock time and the timer leak
	// check is replaced by waiting for every id to go.
	RealClock bool
	// AtMesh, if set, runs at full mesh, with every connection still up
	// (to take a heap profile).
	AtMesh func() `json:"-"`
}

// StateCounts counts ids per CM state.
type StateCounts map[string]int

// Result is what a storm measured.
type Result struct {
	Config      Config
	Connections int // connections asked for
	Established int // established on both sides
	Failed      int // REQ or REP timed out, or rejected

	SimTime     time.Duration // simulated time from the first REQ to the last connection established on both sides
	WallTime    time.Duration // wall clock for the same
	CPUTime     time.Duration // process CPU (user + system, GC included) for the same
	ConnsPerSec float64       // connections per wall-clock second

	REQs, REQRetransmits uint64 // REQ MADs sent; REQ MADs beyond one per connection
	REPs, RTUs, MRAs     uint64 // MADs sent
	REJs                 uint64
	Retransmits          uint64 // every retransmission (cmcore Stats)
	Timeouts             uint64 // messages out of retries (cmcore Stats)
	Lost, Overflow       uint64 // MADs dropped by the loss knob, by full receive queues

	MADsDelivered uint64 // MADs the pump handed to the CMs during wire-up

	PeakHeap, PeakTotal uint64 // bytes, sampled peaks during wire-up
	BaseHeap, MeshHeap  uint64 // live heap after setup and at full mesh
	BytesPerConn        float64

	// States are the id states per node at the moment half the
	// connections were established: for each state the total over all
	// nodes and the minimum and maximum on one node.
	HalfStates map[string][3]int

	// Teardown: every connection disconnected, the clock run dry.
	TeardownWall time.Duration
	LeakedIDs    int // ids left besides the listeners: in the applications, in ucm (files and budgets) and in the CMs
	LeakedEvents int // events left queued in ucm's files and budgets and in the CMs
	LeakedTimers int
	// LeakedAfterClose is what ucm's budgets (files, ids, events, bytes)
	// and the CMs still held after every application closed its file.
	LeakedAfterClose int
	NotBothSides     int // connections that were not ESTABLISHED on both ends at full mesh
}

type conn struct {
	idx   int
	a, b  int // active, passive node
	start time.Duration
	// act and pas are the ucm ids of the two ends (-1: none): act is
	// node a's application's, under its mu; pas node b's.
	act, pas int64
	actEst   bool      // node a's mu: REP received, RTU sent
	sent     time.Time // node a's mu: the first REQ (listener storm)
	out      outcome
}

type mesh struct {
	cfg   Config
	net   *simNet
	t0    time.Time
	nodes []*stack
	conns []*conn

	tally
	dreqs atomic.Int64 // DREQs waiting for DREP or DREQ_ERROR
}

// MaxNodes is how many nodes one simulated subnet holds: each takes the
// next unicast LID.
const MaxNodes = sim.MaxUnicastLID

// Run runs one storm.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Nodes < 2 || cfg.Nodes > MaxNodes {
		return nil, settings("need 2 to %d nodes (one unicast LID each), not %d", MaxNodes, cfg.Nodes)
	}
	if cfg.Pattern == "" {
		cfg.Pattern = AllToAll
	}
	if cfg.Timeouts == (Timeouts{}) {
		cfg.Timeouts = DefaultTimeouts
	}
	if cfg.OnDemand == 0 {
		cfg.OnDemand = 8
	}
	if cfg.OnDemandSpread == 0 {
		cfg.OnDemandSpread = 10 * time.Millisecond
	}
	if cfg.Deadline == 0 {
		cfg.Deadline = 10 * time.Minute
	}
	if err := checkMemory(fmt.Sprintf("%d nodes %s", cfg.Nodes, cfg.Pattern), maxConnections(cfg), memAvailable()); err != nil {
		return nil, err
	}
	m := &mesh{cfg: cfg}
	knobs := sim.Knobs{Delay: cfg.Latency, Jitter: cfg.Jitter, Loss: cfg.Loss, Duplicate: cfg.Duplicate, Reorder: cfg.Reorder}
	if cfg.RealClock {
		m.net = newRealNet(cfg.Seed, knobs, cfg.QueueLen)
	} else {
		m.net = newSimNet(cfg.Seed, knobs, cfg.QueueLen)
	}
	defer m.close()
	mem := callermem.NewFake()
	for i := range cfg.Nodes {
		st, err := m.net.addStack(i, mem, 0, ucm.Limits{})
		if err != nil {
			return nil, err
		}
		st.onEv = m.onEvent
		m.nodes = append(m.nodes, st)
	}
	if err := m.plan(); err != nil {
		return nil, err
	}
	res := &Result{Config: cfg, Connections: len(m.conns)}
	res.BaseHeap = liveHeap()

	// Wire-up.
	ms := startMemSampler()
	wall, cpu := time.Now(), cpuTime()
	m.t0 = m.net.clk.Now()
	m.schedule()
	half := false
	total := int64(len(m.conns))
	var statesWall, statesCPU time.Duration // taking the states is not the storm's work
	_, err := m.net.runUntil(ctx, m.t0.Add(cfg.Deadline), func() bool {
		done := m.established.Load() + m.failed.Load()
		if !half && 2*m.established.Load() >= total {
			half = true
			w, c := time.Now(), cpuTime()
			res.HalfStates = m.states()
			statesWall, statesCPU = time.Since(w), cpuTime()-c
		}
		return done == total
	})
	res.WallTime, res.CPUTime = time.Since(wall)-statesWall, cpuTime()-cpu-statesCPU
	res.PeakHeap, res.PeakTotal = ms.end()
	if err != nil {
		return res, err
	}
	res.MeshHeap = liveHeap()
	if cfg.AtMesh != nil {
		cfg.AtMesh()
	}
	res.SimTime = time.Duration(m.lastEst.Load())
	res.Established = int(m.established.Load())
	res.Failed = int(m.failed.Load())
	if res.WallTime > 0 {
		res.ConnsPerSec = float64(res.Established) / res.WallTime.Seconds()
	}
	if res.Established > 0 && res.MeshHeap > res.BaseHeap {
		res.BytesPerConn = float64(res.MeshHeap-res.BaseHeap) / float64(res.Established)
	}
	m.counters(res)
	res.NotBothSides = m.notBothSides()
	var errs []error
	if n := m.net.errs.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("storm: %d ucm commands failed", n))
	}
	if res.Established != res.Connections || res.NotBothSides != 0 {
		errs = append(errs, fmt.Errorf("storm: %d of %d connections established on both sides (%d failed, %d not ESTABLISHED on both ends)",
			res.Established, res.Connections, res.Failed, res.NotBothSides))
	}
	if !cfg.NoTeardown {
		errs = append(errs, m.teardown(ctx, res))
	}
	return res, errors.Join(errs...)
}

const serviceID = 0x0000_0000_5354_524d // "STRM"

// plan lays out the connections of the pattern.
func (m *mesh) plan() error {
	n := m.cfg.Nodes
	add := func(a, b int, start time.Duration) error {
		m.conns = append(m.conns, &conn{idx: len(m.conns), a: a, b: b, start: start, act: -1, pas: -1})
		return nil
	}
	rng := rand.New(rand.NewPCG(m.cfg.Seed, 0x73746f726d))
	starts := make([]time.Duration, n)
	if m.cfg.StartSpread > 0 {
		for i := range starts {
			starts[i] = time.Duration(rng.Int64N(int64(m.cfg.StartSpread)))
		}
	}
	switch m.cfg.Pattern {
	case AllToAll:
		for i := range n {
			for k := 1; 2*k <= n; k++ {
				if 2*k == n && i >= n/2 {
					continue
				}
				if err := add(i, (i+k)%n, starts[i]); err != nil {
					return err
				}
			}
		}
	case RingOnDemand:
		type pair struct{ a, b int }
		key := func(a, b int) pair { return pair{min(a, b), max(a, b)} }
		seen := make(map[pair]bool)
		for i := range n {
			j := (i + 1) % n
			if seen[key(i, j)] {
				continue // two nodes: one ring link
			}
			seen[key(i, j)] = true
			if err := add(i, j, starts[i]); err != nil {
				return err
			}
		}
		type use struct {
			a, b int
			at   time.Duration
		}
		var uses []use
		for i := range n {
			for range m.cfg.OnDemand {
				j := rng.IntN(n - 1)
				if j >= i {
					j++
				}
				uses = append(uses, use{i, j, starts[i] + time.Duration(rng.Int64N(int64(m.cfg.OnDemandSpread)))})
			}
		}
		slices.SortStableFunc(uses, func(x, y use) int { return int(x.at - y.at) })
		for _, u := range uses {
			if seen[key(u.a, u.b)] {
				continue
			}
			seen[key(u.a, u.b)] = true
			if err := add(u.a, u.b, u.at); err != nil {
				return err
			}
		}
	default:
		return settings("unknown pattern %q (want %s or %s)", m.cfg.Pattern, AllToAll, RingOnDemand)
	}
	return nil
}

// schedule sends every connection's REQ at its start time: the ones at 0
// now, the others from timers (one per distinct start).
func (m *mesh) schedule() {
	byStart := make(map[time.Duration][]*conn)
	var now []*conn
	for _, c := range m.conns {
		if c.start == 0 {
			now = append(now, c)
		} else {
			byStart[c.start] = append(byStart[c.start], c)
		}
	}
	for d, cs := range byStart {
		m.net.clk.AfterFunc(d, func() {
			for _, c := range cs {
				m.connect(c)
			}
		})
	}
	for _, c := range now {
		m.connect(c)
	}
}

// connect creates the active id (CREATE_ID, its cookie the connection's
// index) and sends the REQ (SEND_REQ, the index in its private data).
func (m *mesh) connect(c *conn) {
	st := m.nodes[c.a]
	st.mu.Lock()
	defer st.mu.Unlock()
	id, err := st.createID(uint64(c.idx))
	if err != nil {
		m.net.errs.Add(1)
		m.fail(c)
		return
	}
	c.act = int64(id)
	st.setEnd(id, end{c: c, active: true})
	if err := st.sendREQ(id, m.nodes[c.b], c.idx, m.cfg.Timeouts); err != nil {
		m.net.errs.Add(1)
		m.fail(c)
	}
}

func (m *mesh) fail(c *conn) { c.out.fail(&m.tally) }

func (m *mesh) mark(c *conn, active bool) {
	c.out.established(&m.tally, active, m.net.clk.Now().Sub(m.t0))
}

// drop destroys id (DESTROY_ID) and forgets it in its connection. The
// caller holds st.mu.
func drop(st *stack, id uint32) {
	if e := st.endOf(id); e.c != nil {
		if e.active {
			e.c.act = -1
		} else {
			e.c.pas = -1
		}
	}
	if err := st.destroyID(id); err != nil {
		st.net.errs.Add(1)
	}
}

// onEvent is every node's application after GET_EVENT, as a libibcm
// program: REP on REQ, RTU on REP, DREP and DESTROY_ID on DREQ,
// DESTROY_ID on DREP.
func (m *mesh) onEvent(st *stack, ev *abi.EventResp, pd []byte) {
	c := st.endOf(ev.ID).c
	switch ev.Event {
	case abi.CMREQReceived:
		i, ok := connIndex(pd, len(m.conns))
		if !ok {
			drop(st, ev.ID) // not ours: rejected
			return
		}
		c = m.conns[i]
		if c.pas >= 0 {
			// The REQ's retransmission after our end's REP ran out of
			// retries: a new passive end; the old one (IDLE) goes.
			drop(st, uint32(c.pas))
			c.out.revive(&m.tally)
		}
		c.pas = int64(ev.ID)
		st.setEnd(ev.ID, end{c: c})
		if err := st.sendREP(ev.ID, uint64(c.idx)); err != nil {
			m.net.errs.Add(1)
		}
	case abi.CMREPReceived:
		if c == nil {
			return
		}
		if err := st.send(abi.CmdSendRTU, ev.ID); err != nil {
			m.net.errs.Add(1)
			return
		}
		c.actEst = true
		m.mark(c, true)
	case abi.CMRTUReceived:
		if c != nil {
			m.mark(c, false)
		}
	case abi.CMREQError, abi.CMREPError, abi.CMREJReceived:
		if c != nil {
			m.fail(c)
		}
	case abi.CMDREQReceived:
		if err := st.send(abi.CmdSendDREP, ev.ID); err != nil {
			m.net.errs.Add(1)
		}
		drop(st, ev.ID)
	case abi.CMDREPReceived, abi.CMDREQError:
		drop(st, ev.ID)
		m.dreqs.Add(-1)
	}
}

// states counts every node's ids by state, through ucm (Device.Files).
func (m *mesh) states() map[string][3]int {
	return stateStats(m.nodes)
}

func stateStats(nodes []*stack) map[string][3]int {
	out := make(map[string][3]int)
	per := make([]map[cmcore.State]int, len(nodes))
	names := make(map[cmcore.State]bool)
	for i, st := range nodes {
		per[i] = st.states()
		for s := range per[i] {
			names[s] = true
		}
	}
	for s := range names {
		v := [3]int{0, int(^uint(0) >> 1), 0}
		for _, p := range per {
			x := p[s]
			v[0] += x
			v[1] = min(v[1], x)
			v[2] = max(v[2], x)
		}
		out[s.String()] = v
	}
	return out
}

// notBothSides counts the connections whose two ends are not both
// ESTABLISHED in ucm's view of the CM.
func (m *mesh) notBothSides() int {
	states := make([]map[uint32]cmcore.State, len(m.nodes))
	for i, st := range m.nodes {
		states[i] = st.idStates()
	}
	n := 0
	for _, c := range m.conns {
		a, b := m.nodes[c.a], m.nodes[c.b]
		a.mu.Lock()
		act := c.act
		a.mu.Unlock()
		b.mu.Lock()
		pas := c.pas
		b.mu.Unlock()
		if act < 0 || pas < 0 || states[c.a][uint32(act)] != stateEstablished || states[c.b][uint32(pas)] != stateEstablished {
			n++
		}
	}
	return n
}

func (m *mesh) counters(r *Result) {
	n := m.net
	r.REQs = n.sent(attrREQ)
	if r.REQs > uint64(len(m.conns)) {
		r.REQRetransmits = r.REQs - uint64(len(m.conns))
	}
	r.REPs, r.RTUs, r.MRAs, r.REJs = n.sent(attrREP), n.sent(attrRTU), n.sent(attrMRA), n.sent(attrREJ)
	for _, nd := range m.nodes {
		s := nd.cm.Stats()
		r.Retransmits += s.Retransmitted
		r.Timeouts += s.TimedOut
		r.MADsDelivered += s.Received
		c := nd.dev.Port(1).Counters()
		r.Lost += c.Lost
		r.Overflow += c.Overflow
	}
}

// teardown disconnects every connection from its active side (SEND_DREQ;
// the passive application answers SEND_DREP and destroys its end, the
// active one destroys its end on DREP), destroys every id left
// (DESTROY_ID), runs the clock dry (timewaits) and checks that only the
// listeners are left (applications, ucm, CMs), with no queued event and no
// timer; then every application closes its file and nothing may remain.
func (m *mesh) teardown(ctx context.Context, r *Result) error {
	wall := time.Now()
	for _, c := range m.conns {
		st := m.nodes[c.a]
		st.mu.Lock()
		switch {
		case c.act < 0:
		case c.actEst && st.send(abi.CmdSendDREQ, uint32(c.act)) == nil:
			m.dreqs.Add(1)
		default:
			drop(st, uint32(c.act))
		}
		st.mu.Unlock()
	}
	if _, err := m.net.runUntil(ctx, m.net.clk.Now().Add(m.cfg.Deadline), m.net.onReal(func() bool { return m.dreqs.Load() <= 0 })); err != nil {
		return err
	}
	// Then every id is destroyed, as an application's cleanup would: the
	// ends of failed connections, a passive end whose DREQ never came.
	// That must leave nothing behind either.
	if err := destroyAll(ctx, m.net, m.nodes, m.cfg.Deadline, r); err != nil {
		return err
	}
	r.TeardownWall = time.Since(wall)
	return nil
}

// destroyAll destroys every id the applications hold but their listeners,
// runs the clock dry (or, on the real clock, waits until nothing is left),
// counts what is left into r's Leaked fields, then closes every
// application's file and counts what ucm and the CMs still hold.
func destroyAll(ctx context.Context, n *simNet, nodes []*stack, deadline time.Duration, r *Result) error {
	for _, st := range nodes {
		st.mu.Lock()
		for id, e := range st.ends {
			if e.c != nil {
				drop(st, uint32(id))
			}
		}
		st.mu.Unlock()
	}
	gone := func() bool {
		for _, st := range nodes {
			if st.leaks() != (leaks{}) {
				return false
			}
		}
		return true
	}
	if _, err := n.runUntil(ctx, n.clk.Now().Add(deadline), n.onReal(gone)); err != nil {
		return err
	}
	for _, st := range nodes {
		st.mu.Lock()
		l := st.leaks()
		st.mu.Unlock()
		r.LeakedIDs += l.appEnds + l.ucmIDs + l.cmIDs
		r.LeakedEvents += l.ucmEvents + l.cmEvents
	}
	r.LeakedTimers = max(n.pending(), 0)
	for _, st := range nodes {
		st.mu.Lock()
		u, c := st.close()
		st.mu.Unlock()
		st.stop()
		r.LeakedAfterClose += u + c
	}
	if _, err := n.runUntil(ctx, n.clk.Now().Add(deadline), n.onReal(func() bool { return true })); err != nil {
		return err
	}
	r.LeakedTimers += max(n.pending(), 0)
	if r.LeakedIDs != 0 || r.LeakedEvents != 0 || r.LeakedTimers != 0 || r.LeakedAfterClose != 0 {
		return fmt.Errorf("storm: leaked %d ids, %d events, %d timers; %d held after close", r.LeakedIDs, r.LeakedEvents, r.LeakedTimers, r.LeakedAfterClose)
	}
	return nil
}

func (m *mesh) close() {
	for _, nd := range m.nodes {
		nd.stop()
		nd.cm.Close()
	}
}

// connIndex reads the connection index a REQ's private data carries; ok is
// false for data too short or an index out of range (not our REQ).
func connIndex(pd []byte, n int) (int, bool) {
	if len(pd) < 4 {
		return 0, false
	}
	i := int(binary.BigEndian.Uint32(pd))
	return i, i < n
}
