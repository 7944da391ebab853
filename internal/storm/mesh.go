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

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/sim"
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
	LeakedIDs    int // ids left in the CMs besides the listeners
	LeakedEvents int
	LeakedTimers int
	NotBothSides int // connections that were not ESTABLISHED on both ends at full mesh
}

type node struct {
	i        int
	dev      *sim.Device
	cm       *cmcore.CM
	listener *cmcore.ID
	qpn      atomic.Uint32
	gid      hw.GID
	lid      uint16
}

type conn struct {
	idx   int
	a, b  int // active, passive node
	start time.Duration
	act   *cmcore.ID                // driver goroutine only
	pas   atomic.Pointer[cmcore.ID] // set by the handler
	out   outcome
}

type mesh struct {
	cfg   Config
	net   *simNet
	t0    time.Time
	nodes []*node
	conns []*conn

	tally
	handlerErrs atomic.Int64
}

// Run runs one storm.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Nodes < 2 {
		return nil, fmt.Errorf("storm: need at least 2 nodes, not %d", cfg.Nodes)
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
	m := &mesh{cfg: cfg}
	knobs := sim.Knobs{Delay: cfg.Latency, Jitter: cfg.Jitter, Loss: cfg.Loss, Duplicate: cfg.Duplicate, Reorder: cfg.Reorder}
	if cfg.RealClock {
		m.net = newRealNet(cfg.Seed, knobs, cfg.QueueLen)
	} else {
		m.net = newSimNet(cfg.Seed, knobs, cfg.QueueLen)
	}
	defer m.close()
	for i := range cfg.Nodes {
		cm, dev, err := m.net.addCM(fmt.Sprintf("n%d", i))
		if err != nil {
			return nil, err
		}
		a, err := dev.Port(1).Attr()
		if err != nil {
			return nil, err
		}
		nd := &node{i: i, dev: dev, cm: cm, gid: a.GIDs[0].GID, lid: a.LID}
		nd.listener = cm.CreateID(m.handle)
		if err := nd.listener.Listen(serviceID, 0); err != nil {
			return nil, err
		}
		m.nodes = append(m.nodes, nd)
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
	_, err := m.net.runUntil(ctx, m.t0.Add(cfg.Deadline), func() bool {
		done := m.established.Load() + m.failed.Load()
		if !half && 2*m.established.Load() >= total {
			half = true
			res.HalfStates = m.states()
		}
		return done == total
	})
	res.WallTime, res.CPUTime = time.Since(wall), cpuTime()-cpu
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
	for _, c := range m.conns {
		pas := c.pas.Load()
		if c.act == nil || pas == nil {
			res.NotBothSides++
			continue
		}
		as, _ := c.act.State()
		ps, _ := pas.State()
		if as != stateEstablished || ps != stateEstablished {
			res.NotBothSides++
		}
	}
	var errs []error
	if n := m.handlerErrs.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("storm: %d CM calls failed", n))
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
		m.conns = append(m.conns, &conn{idx: len(m.conns), a: a, b: b, start: start})
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
		return fmt.Errorf("storm: unknown pattern %q (want %s or %s)", m.cfg.Pattern, AllToAll, RingOnDemand)
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

// connect creates the active id and sends the REQ, whose private data
// carries the connection's index. Driver goroutine.
func (m *mesh) connect(c *conn) {
	nd := m.nodes[c.a]
	c.act = nd.cm.CreateID(m.handle)
	c.act.SetContext(c)
	var pd [4]byte
	binary.BigEndian.PutUint32(pd[:], uint32(c.idx))
	to := m.cfg.Timeouts
	peer := m.nodes[c.b]
	path := &cmcore.PathRecord{
		SGID: nd.gid, DGID: peer.gid, SLID: nd.lid, DLID: peer.lid,
		PKey: 0xffff, MTU: 4, Rate: 3, PacketLifeTime: to.PacketLifeTime, Reversible: true,
	}
	err := c.act.SendREQ(&cmcore.REQParams{
		Primary: path, ServiceID: serviceID, QPType: cmcore.QPTypeRC,
		QPN: nd.qpn.Add(1), StartingPSN: 1,
		RemoteCMResponseTimeout: to.RemoteCMResponseTimeout, LocalCMResponseTimeout: to.LocalCMResponseTimeout,
		MaxCMRetries: to.MaxCMRetries, RetryCount: 7, RNRRetryCount: 7,
		PrivateData: pd[:],
	})
	if err != nil {
		m.handlerErrs.Add(1)
		m.fail(c)
	}
}

func (m *mesh) fail(c *conn) { c.out.fail(&m.tally) }

func (m *mesh) mark(c *conn, active bool) {
	c.out.established(&m.tally, active, m.net.clk.Now().Sub(m.t0))
}

// handle is every id's handler: listeners, active and passive ends.
func (m *mesh) handle(ev *cmcore.Event) cmcore.Outcome {
	c, _ := ev.ID.Context().(*conn)
	switch ev.Type {
	case evREQReceived:
		i, ok := connIndex(ev.PrivateData, len(m.conns))
		if !ok {
			return cmcore.Destroy
		}
		c = m.conns[i]
		ev.ID.SetContext(c)
		if old := c.pas.Swap(ev.ID); old != nil {
			// The REQ's retransmission after our end's REP ran out of
			// retries: a new passive end; the old one (IDLE) goes.
			old.Destroy()
			c.out.revive(&m.tally)
		}
		nd := m.nodes[c.b]
		if err := ev.ID.SendREP(&cmcore.REPParams{QPN: nd.qpn.Add(1), StartingPSN: 1}); err != nil {
			m.handlerErrs.Add(1)
			return cmcore.Destroy
		}
	case evREPReceived:
		if err := ev.ID.SendRTU(nil); err != nil {
			m.handlerErrs.Add(1)
			return cmcore.Keep
		}
		m.mark(c, true)
	case evRTUReceived:
		m.mark(c, false)
	case evREQError, evREPError, evREJReceived:
		if c != nil {
			m.fail(c)
		}
	case evDREQReceived:
		if err := ev.ID.SendDREP(nil); err != nil {
			m.handlerErrs.Add(1)
		}
		return cmcore.Destroy
	case evDREPReceived, evDREQError:
		return cmcore.Destroy
	}
	return cmcore.Keep
}

// states counts the ids of every node by state. Driver goroutine.
func (m *mesh) states() map[string][3]int {
	out := make(map[string][3]int)
	per := make([]map[string]int, len(m.nodes))
	for i := range per {
		per[i] = make(map[string]int)
	}
	for _, c := range m.conns {
		if c.act != nil {
			s, _ := c.act.State()
			per[c.a][s.String()]++
		}
		if pas := c.pas.Load(); pas != nil {
			s, _ := pas.State()
			per[c.b][s.String()]++
		}
	}
	names := make(map[string]bool)
	for _, p := range per {
		for s := range p {
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
		out[s] = v
	}
	return out
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

// teardown disconnects every connection from its active side (DREQ,
// retransmitted; the passive side answers DREP and destroys), destroys the
// ids, runs the clock dry (timewaits) and checks that only the listeners
// are left, with no queued event and no timer.
func (m *mesh) teardown(ctx context.Context, r *Result) error {
	wall := time.Now()
	for _, c := range m.conns {
		if c.act == nil {
			continue
		}
		if s, _ := c.act.State(); s == stateEstablished {
			if err := c.act.SendDREQ(nil); err != nil {
				m.handlerErrs.Add(1)
			}
		} else {
			c.act.Destroy()
		}
	}
	if _, err := m.net.runUntil(ctx, m.net.clk.Now().Add(m.cfg.Deadline), m.net.onReal(m.quiet)); err != nil {
		return err
	}
	// Then every id is destroyed (again: Destroy may be called twice), as
	// an application's close would: the ends of failed connections, a
	// passive end whose DREQ never came. That must leave nothing behind
	// either.
	for _, c := range m.conns {
		for _, id := range []*cmcore.ID{c.act, c.pas.Load()} {
			if id != nil {
				id.Destroy()
			}
		}
	}
	if _, err := m.net.runUntil(ctx, m.net.clk.Now().Add(m.cfg.Deadline), m.net.onReal(m.gone)); err != nil {
		return err
	}
	r.TeardownWall = time.Since(wall)
	for _, nd := range m.nodes {
		ids, evs := nd.cm.Count()
		r.LeakedIDs += ids - 1
		r.LeakedEvents += evs
	}
	r.LeakedTimers = max(m.net.pending(), 0)
	if r.LeakedIDs != 0 || r.LeakedEvents != 0 || r.LeakedTimers != 0 {
		return fmt.Errorf("storm: leaked %d ids, %d events, %d timers", r.LeakedIDs, r.LeakedEvents, r.LeakedTimers)
	}
	return nil
}

// quiet is the end of the disconnect phase on the real clock (the fake one
// runs dry instead): no active end waits for its DREP any more.
func (m *mesh) quiet() bool {
	for _, c := range m.conns {
		if c.act != nil {
			if s, _ := c.act.State(); s == cmcore.State(11) { // DREQ_SENT
				return false
			}
		}
	}
	return true
}

// gone is the end of the teardown on the real clock: only the listeners
// are left.
func (m *mesh) gone() bool {
	for _, nd := range m.nodes {
		if ids, evs := nd.cm.Count(); ids != 1 || evs != 0 {
			return false
		}
	}
	return true
}

func (m *mesh) close() {
	for _, nd := range m.nodes {
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
