package cmcore

// A randomized, seeded, model-based soak of cmcore on the hw/sim fabric.
//
// Three CMs (three devices, one IB port each) are driven through random
// interleavings of connect / accept / reject / MRA / RTU / COMM_EST /
// DREQ (either side, both at once) / DREP / LAP / APR / SIDR / destroy in
// every state / listener destroyed (also while new REQs sit in the CM's
// event queue) / a CM closed and a new one started on the same port (the
// peers' connections become stale), with the fabric's loss, duplication,
// delay, jitter and reordering knobs on.
//
// Everything runs on the deterministic pump of simnet_test.go (one
// goroutine at a time, fake clock), so a seed replays exactly.
//
// Checked, continuously:
//   - every event is legal from the id's modelled state (the §3.2/§3.4
//     tables), delivered once, never after Destroy, never to a closed CM;
//   - the id's real State() equals the model at every quiescent point;
//     the only state changes without an event are the ones the tables
//     allow (ESTABLISHED → DREQ_SENT by a stale-connection DREQ, LAP_SENT
//     → LAP_IDLE after a LAP's final timeout), and only when that MAD was
//     seen on the wire;
//   - every API call succeeds exactly when the table allows it, and fails
//     with the table's errno otherwise;
//   - request-like MADs (REQ, REP, DREQ, LAP, SIDR_REQ) are retransmitted
//     at exactly their interval (or the MRA's), at most max_cm_retries
//     times, and a final *_ERROR comes exactly at 1+retries transmissions;
//   - TIMEWAIT_EXIT comes exactly ms(av.timeout) after TIMEWAIT was
//     entered; the release hook of a lingering destroyed id fires once, at
//     that moment (or at Close);
//   - a destroyed id sends nothing after Destroy returned (an id-less DREP
//     answering a DREQ aside), and leaves the remote-id, remote-QPN, SIDR
//     and listen tables at once, the comm-id table when its timewait ends;
//   - cross-side consistency: a REP_RECEIVED / RTU_RECEIVED / DREQ_RECEIVED
//     / LAP_RECEIVED / APR_RECEIVED / MRA_RECEIVED names a peer that did
//     send that message;
//   - convergence: at the end of each epoch every live id is driven by its
//     application (REJ/REP, RTU, DREP, DREQ, APR, SIDR_REP) and must reach
//     IDLE with no timer pending; then all ids are destroyed and every
//     table, the event queues, the fake clock's timers and the goroutine
//     count must be back to their baseline;
//   - no deadlock: a watchdog dumps all goroutines if the pump stalls.
//
// Knobs (environment): SOAK_SEEDS (number of seeds, default 4), SOAK_SEED
// (first seed, default 1), SOAK_EPOCHS (default 6), SOAK_OPS (ops per
// epoch, default 400), SOAK_VERBOSE=1 prints the trace of the last seed.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw/sim"
	"golang.org/x/sys/unix"
)

type midKind uint8

const (
	kActive midKind = iota
	kPassive
	kListener
	kSIDRReq
	kSIDRRsp
)

func (k midKind) String() string {
	return [...]string{"active", "passive", "listener", "sidr-req", "sidr-rsp"}[k]
}

// mid is the model of one ID.
type mid struct {
	s     *soak
	node  *soakNode
	inst  int
	cm    *CM
	id    *ID
	name  string
	kind  midKind
	state State
	lap   LAPState

	localID   uint32
	remoteID  uint32 // as the model knows it (0: not learned)
	remoteQPN uint32 // the peer's QPN, as the model knows it
	events    []EventType
	hist      []string

	destroyed      bool
	destroySeq     uint64 // set once the destroy has completed
	destroyNested  bool   // destroyed from a nested pump: model may lag
	byOutcome      bool
	lingers        bool
	relDeadline    time.Time
	released       int
	dead           bool // its CM was closed
	closeReleased  bool
	inCall         bool
	silentDREQ     bool
	lapTimedOut    bool
	userEstPending bool
	rtuSent        bool
	prompt         bool
	mustDREQ       string // a stale REQ/REP named this connection: a DREQ must go out
	sent           uint32 // bit (attr-0x10): MADs this id was seen sending

	// Connection parameters.
	plt         uint8
	avTimeout   uint8
	interval    time.Duration // REQ (active), REP (passive), then DREQ/LAP
	retries     int
	qpn         uint32
	maxRetries8 uint8 // active: as given (8 bits)
	twEnter     time.Time
	twDur       time.Duration
	inTW        bool

	listener *mid   // passive / sidr-rsp
	active   *mid   // passive: its active end
	children []*mid // active: passive ends made from its REQs
	peer     *mid   // active: the child whose REP it took
	dst      *soakNode
	reused   bool

	listenSID, listenMask uint64
}

func (m *mid) String() string { return m.name }

func (m *mid) logf(format string, args ...any) {
	m.hist = append(m.hist, fmt.Sprintf("[%d %s] ", m.s.seq, m.s.now())+fmt.Sprintf(format, args...))
}

type soakNode struct {
	s         *soak
	idx       int
	name      string
	dev       *sim.Device
	cm        *CM
	inst      int
	obs       *soakObs
	byComm    map[uint32]*mid // current instance's ids by local comm ID
	services  [][2]uint64
	listeners []*mid
	nextQPN   uint32
	qpnPool   []uint32 // QPNs of a previous incarnation, reused after a restart
}

type txKey struct {
	obs  *soakObs
	attr uint16
	comm uint32
}

type txState struct {
	m        *mid
	attr     uint16
	n        int // transmissions so far
	base     time.Time
	interval time.Duration
	retries  int
	timedOut bool
}

type soakStats struct {
	ops, events, connects, established, destroys, restarts, lapSent, aprRecv, sidr, sidrRep                                              int
	reqErr, repErr, dreqErr, sidrErr, rejRecv, staleREJ, silentDREQ, lapTimeout, mraRecv                                                 int
	retransmits, nested, nestedListenerDestroy, queuedREQRejected, invalidCalls, crossDREQ                                               int
	bothDestroy, destroyQueued, rxChecked, partitions, staleChecked, drained, lingering, releasedHook, mads, tw, autoMRA, reuseQPN, dups int
	evHist                                                                                                                               [18]int
	rejHist                                                                                                                              [40]int
	callHist                                                                                                                             [nCalls]int
	destroyIn                                                                                                                            [16]int
}

type soakOpts struct {
	epochs, ops int
	restarts    bool
	nested      bool
	knobs       func(r *rand.Rand) sim.Knobs
}

type soak struct {
	t      testing.TB
	seed   uint64
	rng    *rand.Rand
	n      *simNet
	nodes  []*soakNode
	mids   []*mid
	byID   map[*ID]*mid
	guids  map[uint64]*soakNode
	txs    map[txKey]*txState
	seq    uint64
	inTest bool // the test goroutine runs CM code: a handler may pump
	opts   soakOpts
	stats  soakStats
	knobs  sim.Knobs

	failed   bool
	failures []string
	ring     []string
	progress atomic.Int64
	stop     chan struct{}

	baseGoroutines     int
	nestListenerWindow bool
	forceNested        *mid
	nesting            int
	burstDestroyQueued bool
}

type soakAbort struct{}

func (s *soak) now() time.Duration { return s.n.clk.Now().Sub(time.Unix(2_000_000, 0)) }

func (s *soak) logf(format string, args ...any) {
	line := fmt.Sprintf("[%d %s] ", s.seq, s.now()) + fmt.Sprintf(format, args...)
	if len(s.ring) >= 600 {
		s.ring = s.ring[1:]
	}
	s.ring = append(s.ring, line)
}

// fail records a violation. It never panics (handlers and observers run on
// CM goroutines); the test goroutine aborts the seed at its next check.
func (s *soak) fail(m *mid, format string, args ...any) {
	msg := fmt.Sprintf("seed %d seq %d t=%s: ", s.seed, s.seq, s.now()) + fmt.Sprintf(format, args...)
	if m != nil {
		msg += fmt.Sprintf("\n  id %s (%s, inst %d, local %#x) model %v/%v events %v", m.name, m.kind, m.inst, m.localID, m.state, m.lap, m.events)
		for _, h := range m.hist[max(0, len(m.hist)-25):] {
			msg += "\n    " + h
		}
	}
	if !s.failed {
		s.logf("FAIL: %s", msg)
	}
	s.failed = true
	if len(s.failures) < 5 {
		s.failures = append(s.failures, msg)
	}
}

func (s *soak) check() {
	if s.failed {
		panic(soakAbort{})
	}
}

// ---------------------------------------------------------------- setup

func newSoak(t testing.TB, seed uint64, opts soakOpts) *soak {
	s := &soak{
		t: t, seed: seed, opts: opts,
		rng:   rand.New(rand.NewPCG(seed, 0x50a4)),
		byID:  make(map[*ID]*mid),
		guids: make(map[uint64]*soakNode),
		txs:   make(map[txKey]*txState),
		stop:  make(chan struct{}),
	}
	s.n = newSimNet(t, seed, sim.Knobs{})
	for i, name := range []string{"a", "b", "c"} {
		d, err := s.n.f.AddIB(name, 1)
		if err != nil {
			t.Fatal(err)
		}
		nd := &soakNode{s: s, idx: i, name: name, dev: d, nextQPN: uint32(i+1)<<16 | 0x100}
		nd.services = [][2]uint64{{0x5000 + uint64(i), 0}, {0x6000_0000 | uint64(i)<<8, 0xFFFF_FFFF_FFFF_FF00}}
		s.guids[d.NodeGUID()] = nd
		s.nodes = append(s.nodes, nd)
	}
	for _, nd := range s.nodes {
		s.startNode(nd)
	}
	return s
}

func (s *soak) startNode(nd *soakNode) {
	nd.inst++
	obs := &soakObs{s: s, node: nd, inst: nd.inst}
	pd := &pumpDev{Device: nd.dev, net: s.n}
	for _, p := range nd.dev.Ports() {
		pd.ports = append(pd.ports, &pumpPort{Port: p, sp: p.(*sim.Port), net: s.n})
	}
	var auto uint8
	if s.rng.IntN(3) == 0 {
		auto = uint8(10 + s.rng.IntN(6))
	}
	cm := New(pd, Options{Clock: s.n.clk, CommIDOperand: s.rng.Uint32() | 1, Observer: obs, AutoMRA: auto})
	cm.OnReleased(s.released)
	if err := cm.Start(); err != nil {
		s.t.Fatal(err)
	}
	obs.cm = cm
	obs.autoMRA = auto
	nd.cm, nd.obs = cm, obs
	nd.byComm = make(map[uint32]*mid)
	nd.listeners = nil
	s.logf("start %s inst %d autoMRA %d", nd.name, nd.inst, auto)
	for _, sv := range nd.services {
		s.newListener(nd, sv[0], sv[1])
	}
}

func (s *soak) newMid(nd *soakNode, kind midKind, id *ID) *mid {
	m := &mid{s: s, node: nd, inst: nd.inst, cm: nd.cm, id: id, kind: kind, prompt: s.rng.IntN(3) != 0}
	m.localID = id.Attr().LocalCommID
	m.name = fmt.Sprintf("%s%d.%x", nd.name, nd.inst, m.localID&0xffff)
	s.byID[id] = m
	nd.byComm[m.localID] = m
	s.mids = append(s.mids, m)
	return m
}

func (s *soak) newListener(nd *soakNode, sid, mask uint64) *mid {
	id := nd.cm.CreateID(s.handle)
	m := s.newMid(nd, kListener, id)
	id.SetContext(m)
	s.inTest = true
	err := id.Listen(sid, mask)
	s.inTest = false
	if err != nil {
		s.fail(m, "listen %#x/%#x: %v", sid, mask, err)
		return m
	}
	m.state = StateListen
	m.listenSID, m.listenMask = sid, mask
	nd.listeners = append(nd.listeners, m)
	m.logf("listen %#x/%#x", sid, mask)
	return m
}

// ---------------------------------------------------------------- pump

func (s *soak) settle() {
	s.progress.Add(1)
	was := s.inTest
	s.inTest = false
	s.n.settle()
	s.inTest = was
}

// step ends a top-level step: outcome destroys are complete now.
func (s *soak) finish() {
	s.seq++
	for _, m := range s.mids {
		if m.destroyed && m.destroySeq == 0 {
			m.destroySeq = s.seq
		}
	}
	s.check()
}

// advance runs the fabric and the clock for d, timer by timer.
func (s *soak) advance(d time.Duration) {
	clk := s.n.clk
	end := clk.Now().Add(d)
	for {
		s.settle()
		s.reconcile()
		s.finish()
		next, ok := clk.Next()
		if !ok || next.After(end) {
			s.inTest = true
			clk.Advance(end.Sub(clk.Now()))
			s.inTest = false
			s.settle()
			s.reconcile()
			s.finish()
			return
		}
		s.inTest = true
		clk.Advance(next.Sub(clk.Now()))
		s.inTest = false
		s.progress.Add(1)
	}
}

// ---------------------------------------------------------------- model

// soakAllowed is §3.2: whether a call is allowed in (st, lap), and the
// state it leads to.
type soakCall uint8

const (
	cREP soakCall = iota
	cRTU
	cDREQ
	cDREP
	cREJ
	cMRA
	cMRADelay
	cLAP
	cAPR
	cCommEst
	cSIDRREP
	cREQ
	cSIDRREQ
	nCalls
)

var callNames = [...]string{"REP", "RTU", "DREQ", "DREP", "REJ", "MRA", "MRA(delay)", "LAP", "APR", "COMM_EST", "SIDR_REP", "REQ", "SIDR_REQ"}

func (c soakCall) String() string { return callNames[c] }

func soakAllowed(c soakCall, st State, lap LAPState) (ok bool, next State, nlap LAPState, errno error) {
	next, nlap, errno = st, lap, unix.EINVAL
	switch c {
	case cREQ:
		ok, next = st == StateIdle, StateREQSent
	case cSIDRREQ:
		ok, next = st == StateIdle, StateSIDRREQSent
	case cREP:
		ok, next = st == StateREQRcvd || st == StateMRAREQSent, StateREPSent
	case cRTU:
		ok, next = st == StateREPRcvd || st == StateMRAREPSent, StateEstablished
	case cDREQ:
		ok, next = st == StateEstablished, StateDREQSent
	case cDREP:
		ok, next = st == StateDREQRcvd, StateTimewait
	case cREJ:
		switch st {
		case StateREQSent, StateMRAREQRcvd, StateREQRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent:
			ok, next = true, StateIdle
		case StateREPSent, StateMRAREPRcvd:
			ok, next = true, StateTimewait
		}
	case cMRA, cMRADelay:
		switch {
		case st == StateREQRcvd:
			ok, next = true, StateMRAREQSent
		case st == StateREPRcvd:
			ok, next = true, StateMRAREPSent
		case st == StateEstablished && lap == LAPRcvd:
			ok, nlap = true, LAPMRALAPSent
		}
	case cLAP:
		ok, nlap = st == StateEstablished && (lap == LAPUninit || lap == LAPIdle), LAPSent
	case cAPR:
		ok, nlap = st == StateEstablished && (lap == LAPRcvd || lap == LAPMRALAPSent), LAPIdle
	case cCommEst:
		switch st {
		case StateREPSent, StateMRAREPRcvd:
			ok, next = true, StateEstablished
		case StateEstablished:
			errno = unix.EISCONN
		}
	case cSIDRREP:
		ok, next = st == StateSIDRREQRcvd, StateIdle
	}
	if !ok {
		next, nlap = st, lap
	}
	return
}

// expectTimewait is how long a timewait entered now lasts: ms(av.timeout).
func (m *mid) enterTW() {
	m.inTW = true
	m.twEnter = m.s.n.clk.Now()
	m.twDur = msDuration(convertToMs(m.avTimeout))
	m.logf("enter TIMEWAIT for %v", m.twDur)
}

// applySilent performs the state changes that come without an event, if
// the MAD that proves them was seen.
func (m *mid) applySilent() bool {
	did := false
	if m.silentDREQ && m.state == StateEstablished {
		m.state = StateDREQSent
		m.silentDREQ = false
		m.s.stats.silentDREQ++
		m.logf("silent ESTABLISHED → DREQ_SENT (stale connection DREQ)")
		did = true
	}
	if m.lapTimedOut && m.state == StateEstablished && (m.lap == LAPSent || m.lap == LAPMRALAPRcvd) {
		m.lap = LAPIdle
		m.lapTimedOut = false
		m.s.stats.lapTimeout++
		m.logf("silent LAP timeout → LAP_IDLE")
		did = true
	}
	return did
}

// transition is §3.4 for an event on m, or an error.
func (m *mid) transition(ev *Event) error {
	st, lap := m.state, m.lap
	bad := func() error { return fmt.Errorf("event %v illegal in %v/%v", ev.Type, st, lap) }
	switch ev.Type {
	case EventMRAReceived:
		switch {
		case st == StateREQSent:
			m.state = StateMRAREQRcvd
		case st == StateREPSent:
			m.state = StateMRAREPRcvd
		case st == StateEstablished && lap == LAPSent:
			m.lap = LAPMRALAPRcvd
		default:
			return bad()
		}
	case EventREJReceived:
		switch st {
		case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREQRcvd, StateMRAREQSent:
			if ev.REJ.Reason == wire.REJStaleConn {
				m.state = StateTimewait
			} else {
				m.state = StateIdle
			}
		case StateDREQSent, StateREPRcvd, StateMRAREPSent:
			m.state = StateTimewait
		case StateEstablished:
			if lap != LAPUninit && lap != LAPSent {
				return bad()
			}
			m.state = StateTimewait
		default:
			return bad()
		}
	case EventREPReceived:
		if st != StateREQSent && st != StateMRAREQRcvd {
			return bad()
		}
		m.state = StateREPRcvd
	case EventRTUReceived:
		if st != StateREPSent && st != StateMRAREPRcvd {
			return bad()
		}
		m.state = StateEstablished
	case EventUserEstablished:
		if !m.userEstPending {
			return bad()
		}
		m.userEstPending = false
	case EventDREQReceived:
		switch st {
		case StateREPSent, StateMRAREPRcvd, StateEstablished, StateDREQSent:
			m.state = StateDREQRcvd
		default:
			return bad()
		}
	case EventDREPReceived:
		if st != StateDREQSent && st != StateDREQRcvd {
			return bad()
		}
		m.state = StateTimewait
	case EventTimewaitExit:
		if st != StateTimewait {
			return bad()
		}
		m.state = StateIdle
	case EventLAPReceived:
		if st != StateEstablished || (lap != LAPUninit && lap != LAPIdle) {
			return bad()
		}
		m.lap = LAPRcvd
	case EventAPRReceived:
		if st != StateEstablished || (lap != LAPSent && lap != LAPMRALAPRcvd) {
			return bad()
		}
		m.lap = LAPIdle
	case EventREQError:
		if st != StateREQSent && st != StateMRAREQRcvd {
			return bad()
		}
		m.state = StateIdle
	case EventREPError:
		if st != StateREPSent && st != StateMRAREPRcvd {
			return bad()
		}
		m.state = StateIdle
	case EventDREQError:
		if st != StateDREQSent {
			return bad()
		}
		m.state = StateTimewait
	case EventSIDRREPReceived, EventSIDRREQError:
		if st != StateSIDRREQSent {
			return bad()
		}
		m.state = StateIdle
	default:
		return bad()
	}
	return nil
}

// ---------------------------------------------------------------- handler

func (s *soak) handle(ev *Event) Outcome {
	s.stats.events++
	s.stats.evHist[ev.Type]++
	s.progress.Add(1)
	now := s.n.clk.Now()
	var m *mid
	switch ev.Type {
	case EventREQReceived, EventSIDRREQReceived:
		l := s.byID[ev.Listener]
		if l == nil || l.kind != kListener {
			s.fail(l, "%v for a non-listener", ev.Type)
			return Keep
		}
		if l.destroyed || l.dead {
			s.fail(l, "%v delivered for a destroyed/dead listener", ev.Type)
		}
		if s.byID[ev.ID] != nil {
			s.fail(s.byID[ev.ID], "%v for an id seen before", ev.Type)
			return Keep
		}
		kind := kPassive
		if ev.Type == EventSIDRREQReceived {
			kind = kSIDRRsp
		}
		m = s.newMid(l.node, kind, ev.ID)
		ev.ID.SetContext(m)
		m.listener = l
		m.events = append(m.events, ev.Type)
		if kind == kSIDRRsp {
			m.remoteID = ev.ID.Attr().RemoteCommID // the request ID; a reused id keeps it (as cm.c)
			m.state = StateSIDRREQRcvd
			s.stats.sidr++
			m.logf("SIDR_REQ_RECEIVED on %s", l.name)
			break
		}
		m.state = StateREQRcvd
		a := s.findComm(ev.REQ.RemoteCAGUID, ev.ID.Attr().RemoteCommID)
		m.logf("REQ_RECEIVED on %s from %v (qpn %#x)", l.name, a, ev.REQ.RemoteQPN)
		if a != nil && a.kind != kActive && a.reused {
			// An old REQ of an id reused since: the model cannot pair it.
			m.reused = true
			m.remoteID = a.localID
			m.retries = -1
			m.interval = msDuration(convertToMs(ev.REQ.RemoteCMResponseTimeout))
			m.avTimeout = ev.REQ.Primary.PacketLifeTime + 1
			break
		}
		if a == nil || a.kind != kActive {
			if a != nil {
				s.fail(a, "REQ_RECEIVED at %s from a %v", m.name, a.kind)
				return Keep
			}
			s.fail(m, "REQ_RECEIVED from unknown active %#x", ev.ID.Attr().RemoteCommID)
			return Keep
		}
		m.active = a
		m.remoteID = a.localID
		m.remoteQPN = ev.REQ.RemoteQPN
		a.children = append(a.children, m)
		if a.reused {
			m.reused = true // the id sent REQs with the same comm ID before: no pairing
			m.retries = -1  // nor knowing which REQ's retries and timeouts
		}
		if ev.REQ.RemoteQPN != a.qpn && !a.reused {
			s.fail(a, "REQ_RECEIVED at %s: remote QPN %#x, active sent %#x", m.name, ev.REQ.RemoteQPN, a.qpn)
		}
		m.interval = msDuration(convertToMs(ev.REQ.RemoteCMResponseTimeout))
		if !m.reused {
			m.retries = int(a.maxRetries8 & 0xF)
		}
		m.avTimeout = ev.REQ.Primary.PacketLifeTime + 1
		if want := ackTimeout(sim.DefaultLocalCAAckDelay, a.plt); m.avTimeout != want && !m.reused {
			s.fail(m, "passive av timeout %d, want %d", m.avTimeout, want)
		}
	default:
		m = s.byID[ev.ID]
		if m == nil {
			s.fail(nil, "%v for an unknown id %#x", ev.Type, ev.ID.Attr().LocalCommID)
			return Keep
		}
		if m.destroyed {
			s.fail(m, "%v delivered after Destroy", ev.Type)
			return Keep
		}
		if m.dead {
			s.fail(m, "%v delivered to an id of a closed CM", ev.Type)
			return Keep
		}
		m.events = append(m.events, ev.Type)
		prev := fmt.Sprintf("%v/%v", m.state, m.lap)
		err := m.transition(ev)
		if err != nil && m.applySilent() {
			err = m.transition(ev)
		}
		if err != nil {
			s.fail(m, "%v", err)
			return Keep
		}
		m.logf("%v (%s → %v/%v)%s", ev.Type, prev, m.state, m.lap, evDetail(ev))
		s.checkEvent(m, ev, now)
	}
	return s.react(m, ev)
}

func evDetail(ev *Event) string {
	switch ev.Type {
	case EventREJReceived:
		return fmt.Sprintf(" reason %d", ev.REJ.Reason)
	case EventMRAReceived:
		return fmt.Sprintf(" svc %d", ev.MRA.ServiceTimeout)
	case EventREQError, EventREPError, EventDREQError, EventSIDRREQError:
		return fmt.Sprintf(" status %d", ev.SendStatus)
	}
	return ""
}

// peerOf is the other end of m's connection as far as the model knows.
func (m *mid) peerOf() *mid {
	if m.kind == kPassive {
		return m.active
	}
	return m.peer
}

func (s *soak) checkEvent(m *mid, ev *Event, now time.Time) {
	bit := func(attr uint16) uint32 { return 1 << (attr - 0x10) }
	sentBy := func(p *mid, attr uint16) bool { return p == nil || p.sent&bit(attr) != 0 }
	switch ev.Type {
	case EventREPReceived:
		s.stats.established++
		r := ev.ID.Attr().RemoteCommID
		m.remoteID = r
		m.remoteQPN = ev.REP.RemoteQPN
		m.avTimeout = ackTimeout(ev.REP.TargetACKDelay, m.avTimeout-1)
		for _, c := range m.children {
			if c.localID == r {
				m.peer = c
			}
		}
		if m.peer == nil && !m.reused {
			s.fail(m, "REP_RECEIVED from %#x, no passive end of ours has that comm ID", r)
		} else if !sentBy(m.peer, wire.AttrREP) {
			s.fail(m, "REP_RECEIVED but %v never sent a REP", m.peer)
		}
	case EventRTUReceived:
		if a := m.active; a != nil && !a.reused && (!a.rtuSent || a.peer != m) {
			s.fail(m, "RTU_RECEIVED but the active %v sent no RTU to us (rtuSent %v, peer %v)", a, a.rtuSent, a.peer)
		}
	case EventDREQReceived:
		if !sentBy(m.peerOf(), wire.AttrDREQ) {
			s.fail(m, "DREQ_RECEIVED but %v never sent a DREQ", m.peerOf())
		}
	case EventLAPReceived:
		if !sentBy(m.peerOf(), wire.AttrLAP) {
			s.fail(m, "LAP_RECEIVED but %v never sent a LAP", m.peerOf())
		}
	case EventAPRReceived:
		s.stats.aprRecv++
		if !sentBy(m.peerOf(), wire.AttrAPR) {
			s.fail(m, "APR_RECEIVED but %v never sent an APR", m.peerOf())
		}
		s.txDone(m, wire.AttrLAP)
	case EventMRAReceived:
		s.stats.mraRecv++
		tx := s.currentTx(m)
		if m.retries < 0 {
			break
		}
		if tx == nil || tx.timedOut {
			s.fail(m, "MRA_RECEIVED with no message outstanding")
			return
		}
		tx.base = now
		tx.interval = msDuration(convertToMs(ev.MRA.ServiceTimeout) + convertToMs(m.avTimeout))
		m.logf("  %v wait now %v", wire.AttrName(tx.attr), tx.interval)
	case EventREQError, EventREPError, EventDREQError, EventSIDRREQError:
		if ev.SendStatus != WCRespTimeout {
			s.fail(m, "%v status %d", ev.Type, ev.SendStatus)
		}
		if m.retries < 0 {
			break
		}
		attr := map[EventType]uint16{EventREQError: wire.AttrREQ, EventREPError: wire.AttrREP, EventDREQError: wire.AttrDREQ, EventSIDRREQError: wire.AttrSIDRREQ}[ev.Type]
		tx := s.txs[txKey{m.node.obs, attr, m.localID}]
		switch {
		case tx == nil:
			s.fail(m, "%v without the message ever sent", ev.Type)
		case tx.n != 1+tx.retries:
			s.fail(m, "%v after %d transmissions, want 1+%d", ev.Type, tx.n, tx.retries)
		case !now.Equal(tx.base.Add(tx.interval)):
			s.fail(m, "%v at %v, want %v (+%v after the last transmission or MRA)", ev.Type, now.Sub(tx.base), tx.interval, tx.interval)
		}
		switch ev.Type {
		case EventREQError:
			s.stats.reqErr++
		case EventREPError:
			s.stats.repErr++
		case EventDREQError:
			s.stats.dreqErr++
		default:
			s.stats.sidrErr++
		}
	case EventREJReceived:
		s.stats.rejRecv++
		s.stats.rejHist[min(int(ev.REJ.Reason), 39)]++
		if ev.REJ.Reason == wire.REJConsumerDefined && m.kind == kActive && len(m.children) == 0 && !m.reused {
			s.stats.queuedREQRejected++ // rejected before any handler saw the REQ
		}
		if ev.REJ.Reason == wire.REJStaleConn {
			s.stats.staleREJ++
		}
	case EventTimewaitExit:
		s.stats.tw++
		if !m.inTW {
			s.fail(m, "TIMEWAIT_EXIT without a modelled timewait entry")
		} else if want := m.twEnter.Add(m.twDur); !now.Equal(want) {
			s.fail(m, "TIMEWAIT_EXIT after %v, want %v", now.Sub(m.twEnter), m.twDur)
		}
		m.inTW = false
	}
	if m.state == StateTimewait && !m.inTW {
		m.enterTW()
	}
	if m.state != StateTimewait {
		m.inTW = false
	}
}

// react is the application's answer inside the handler: mostly Keep,
// sometimes a destroying outcome, and on the test goroutine sometimes a
// nested pump (MADs received while this handler runs queue their events)
// followed by destroying a listener or another id.
func (s *soak) react(m *mid, ev *Event) Outcome {
	out := Keep
	r := s.rng.Float64()
	switch {
	case (ev.Type == EventREQReceived || ev.Type == EventSIDRREQReceived) && r < 0.04:
		out = Destroy
	case ev.Type == EventREQReceived && r < 0.07:
		out = DestroySilently
	case r < 0.015:
		out = Destroy
	}
	forced := s.forceNested == m
	if forced {
		s.forceNested = nil
	}
	if s.inTest && s.opts.nested && (forced || s.rng.Float64() < 0.25) {
		s.stats.nested++
		nd := m.node
		m.logf("  nested pump in %v handler", ev.Type)
		s.nesting++
		s.settle()
		s.nesting--
		x := s.rng.Float64()
		if forced {
			x = 0
			if s.burstDestroyQueued {
				x = 0.5
			}
		}
		switch {
		case x < 0.35 && len(nd.listeners) > 0:
			l := nd.listeners[s.rng.IntN(len(nd.listeners))]
			s.stats.nestedListenerDestroy++
			s.logf("nested: destroy listener %s", l.name)
			s.nestListenerWindow = true
			s.destroy(l, true)
			s.nestListenerWindow = false
			s.replaceListener(l)
		case x < 0.75:
			// Destroy an id that has events queued behind this handler:
			// they must never be delivered.
			cm := nd.cm
			var cands []*mid
			cm.mu.Lock()
			for _, q := range cm.events[cm.evHead:] {
				if o := s.byID[q.owner]; o != nil && o != m && !o.destroyed && !slices.Contains(cands, o) {
					cands = append(cands, o)
				}
			}
			cm.mu.Unlock()
			if len(cands) > 0 {
				s.stats.destroyQueued++
				s.destroy(cands[s.rng.IntN(len(cands))], true)
			} else if o := s.pickLive(func(o *mid) bool { return o != m && o.kind != kListener }); o != nil {
				s.destroy(o, true)
			}
		}
	}
	if out != Keep {
		m.destroyed, m.byOutcome = true, true
		s.stats.destroys++
		m.logf("handler outcome %v in %v", out, m.state)
		s.removeListener(m)
	}
	return out
}

func (s *soak) findComm(guid uint64, comm uint32) *mid {
	nd := s.guids[guid]
	if nd == nil {
		return nil
	}
	for i := len(s.mids) - 1; i >= 0; i-- {
		if o := s.mids[i]; o.node == nd && o.localID == comm {
			return o
		}
	}
	return nil
}

func (s *soak) currentTx(m *mid) *txState {
	var attr uint16
	switch {
	case m.state == StateMRAREQRcvd:
		attr = wire.AttrREQ
	case m.state == StateMRAREPRcvd:
		attr = wire.AttrREP
	case m.state == StateEstablished && m.lap == LAPMRALAPRcvd:
		attr = wire.AttrLAP
	default:
		return nil
	}
	return s.txs[txKey{m.node.obs, attr, m.localID}]
}

func (s *soak) txDone(m *mid, attr uint16) { delete(s.txs, txKey{m.node.obs, attr, m.localID}) }

// ---------------------------------------------------------------- observer

type soakObs struct {
	autoMRA uint8
	s       *soak
	node    *soakNode
	inst    int
	cm      *CM
	closed  bool
}

func (o *soakObs) ObserveMAD(ev *MADEvent) {
	s := o.s
	if ev.Dir == MADReceived || ev.Dir == MADDropped {
		o.received(ev)
		return
	}
	if ev.Dir != MADSent && ev.Dir != MADRetransmitted && ev.Dir != MADTimedOut {
		return
	}
	if o.closed {
		s.fail(nil, "%s inst %d: %v after Close", o.node.name, o.inst, ev.Dir)
		return
	}
	_, msg, err := wire.Decode(ev.MAD)
	if err != nil {
		s.fail(nil, "CM sent an undecodable MAD: %v", err)
		return
	}
	attr := msg.AttrID()
	var comm uint32
	switch m := msg.(type) {
	case *wire.REQ:
		comm = m.LocalCommID
	case *wire.REP:
		comm = m.LocalCommID
	case *wire.RTU:
		comm = m.LocalCommID
	case *wire.DREQ:
		comm = m.LocalCommID
	case *wire.DREP:
		comm = m.LocalCommID
	case *wire.MRA:
		comm = m.LocalCommID
	case *wire.REJ:
		comm = m.LocalCommID
	case *wire.LAP:
		comm = m.LocalCommID
	case *wire.APR:
		comm = m.LocalCommID
	case *wire.SIDRREQ:
		comm = m.RequestID
	case *wire.SIDRREP:
		return
	}
	if ev.Dir != MADTimedOut {
		s.stats.mads++
	}
	m := o.node.byComm[comm]
	if o.inst != o.node.inst {
		m = nil
	}
	if m != nil {
		m.logf("  mad %v %s", ev.Dir, wire.AttrName(attr))
	}
	if m != nil && ev.Dir != MADTimedOut {
		m.sent |= 1 << (attr - 0x10)
		if m.destroySeq != 0 && attr != wire.AttrDREP {
			s.fail(m, "%v %s sent by an id destroyed at seq %d", ev.Dir, wire.AttrName(attr), m.destroySeq)
		}
		// A DREQ the application did not ask for: the stale-connection DREQ.
		// (Under a nested pump the model may still be before ESTABLISHED.)
		if attr == wire.AttrDREQ && ev.Dir == MADSent && !m.destroyed && !m.inCall {
			m.silentDREQ = true
		}
		if ev.Dir == MADRetransmitted {
			s.stats.retransmits++
		}
	}
	retx := attr == wire.AttrREQ || attr == wire.AttrREP || attr == wire.AttrDREQ || attr == wire.AttrLAP || attr == wire.AttrSIDRREQ
	if !retx {
		return
	}
	key := txKey{o, attr, comm}
	now := ev.Time
	switch ev.Dir {
	case MADSent:
		if m == nil || m.retries < 0 {
			delete(s.txs, key)
			return
		}
		tx := &txState{m: m, attr: attr, n: 1, base: now, interval: m.interval, retries: m.retries}
		s.txs[key] = tx
	case MADRetransmitted, MADTimedOut:
		if ev.Dir == MADTimedOut && attr == wire.AttrLAP && m != nil && !m.destroyed {
			m.lapTimedOut = true
		}
		tx := s.txs[key]
		if tx == nil {
			if m != nil && m.retries >= 0 {
				s.fail(m, "%v of %s never sent", ev.Dir, wire.AttrName(attr))
			}
			return
		}
		if want := tx.base.Add(tx.interval); !now.Equal(want) {
			s.fail(tx.m, "%v of %s at +%v, want +%v", ev.Dir, wire.AttrName(attr), now.Sub(tx.base), tx.interval)
		}
		if ev.Dir == MADRetransmitted {
			tx.n++
			tx.base = now
			if tx.n > 1+tx.retries {
				s.fail(tx.m, "%s transmitted %d times, max_cm_retries %d", wire.AttrName(attr), tx.n, tx.retries)
			}
		} else {
			tx.timedOut = true
			if tx.n != 1+tx.retries {
				s.fail(tx.m, "%s timed out after %d transmissions, want 1+%d", wire.AttrName(attr), tx.n, tx.retries)
			}
		}
	}
}

// received checks §3.4's verdict on a received MAD: whether the CM had to
// act on it (an event or an answer) or ignore it, from the receiver's
// modelled state before the MAD.
func (o *soakObs) received(ev *MADEvent) {
	s := o.s
	if s.nesting > 0 || o.closed || o.inst != o.node.inst {
		return // the model may lag events queued behind a nested handler
	}
	if ev.Dir == MADDropped && ev.Reason != "ignored" {
		s.fail(nil, "%s dropped a MAD: %s", o.node.name, ev.Reason)
		return
	}
	acted := ev.Dir == MADReceived
	_, msg, err := wire.Decode(ev.MAD)
	if err != nil {
		return
	}
	want, target, why := o.expectAct(msg)
	if why == "" {
		return // not modelled
	}
	s.stats.rxChecked++
	if want != acted {
		s.fail(target, "%s received %s (%s): CM acted=%v, §3.4 says %v", o.node.name, wire.AttrName(msg.AttrID()), why, acted, want)
	}
}

// peerGUID is the CA GUID of m's peer, 0 when unknown.
func (m *mid) peerGUID() uint64 {
	switch {
	case m.kind == kPassive && m.active != nil:
		return m.active.node.dev.NodeGUID()
	case m.kind == kActive && m.dst != nil:
		return m.dst.dev.NodeGUID()
	}
	return 0
}

// inRemoteTables is whether m is in its CM's remote-ID and remote-QPN
// tables (§5.2): from the REQ (passive) or the REP (active) until
// TIMEWAIT, IDLE or Destroy.
func (m *mid) inRemoteTables() bool {
	return !m.destroyed && m.remoteID != 0 && m.state != StateIdle && m.state != StateTimewait &&
		(m.kind == kPassive || m.kind == kActive)
}

// staleOf is the connection of nd that a REQ or REP from (qpn, guid)
// makes stale (§4.6), if the model knows one; skip is the id the REP is for.
func (o *soakObs) staleOf(qpn uint32, guid uint64, skip *mid) *mid {
	for _, m := range o.s.mids {
		if m.node == o.node && m.inst == o.inst && m != skip && m.remoteQPN == qpn && m.peerGUID() == guid {
			m.applySilent()
			if m.inRemoteTables() {
				return m
			}
		}
	}
	return nil
}

// expectStaleDREQ records that old, ESTABLISHED, must send a DREQ now
// (cm.c: ib_send_cm_dreq on the old connection): checked at the end of
// the step.
func (o *soakObs) expectStaleDREQ(old *mid, why string) {
	if old.state == StateEstablished && !old.inCall {
		old.mustDREQ = why
		o.s.stats.staleChecked++
	}
}

// expectAct is §3.4: must the CM act on msg? why is "" when the model
// cannot tell (an id it does not know).
func (o *soakObs) expectAct(msg wire.Message) (want bool, target *mid, why string) {
	nd := o.node
	known := func(local uint32) (*mid, bool) {
		m, ok := nd.byComm[local]
		if !ok || m.inst != o.inst {
			return nil, false
		}
		if m.destroyed {
			return nil, true
		}
		m.applySilent()
		return m, true
	}
	find := func(local, remote uint32) (*mid, bool) {
		m, ok := known(local)
		if m != nil && m.remoteID != remote {
			m = nil
		}
		return m, ok
	}
	in := func(st State, states ...State) bool { return slices.Contains(states, st) }
	switch x := msg.(type) {
	case *wire.REQ:
		// §4.6: a REQ of a connection this CM already has (remote comm
		// ID and CA GUID) is answered only from MRA_REQ_SENT (the MRA
		// again), or from REQ_RCVD with AutoMRA; otherwise it is dropped.
		// Any other REQ makes a new id, a REJ 10 or a REJ 8.
		for _, m := range o.s.mids {
			if m.node != nd || m.inst != o.inst || m.destroyed || m.remoteID != x.LocalCommID || in(m.state, StateIdle, StateTimewait) {
				continue
			}
			var peerGUID uint64
			switch {
			case m.kind == kPassive && m.active != nil:
				peerGUID = m.active.node.dev.NodeGUID()
			case m.kind == kActive && m.dst != nil:
				peerGUID = m.dst.dev.NodeGUID()
			}
			if peerGUID != x.LocalCAGUID {
				continue
			}
			m.applySilent()
			return m.state == StateMRAREQSent || (m.state == StateREQRcvd && o.autoMRA != 0), m, "duplicate REQ in " + m.state.String()
		}
		if old := o.staleOf(x.LocalQPN, x.LocalCAGUID, nil); old != nil {
			o.expectStaleDREQ(old, fmt.Sprintf("stale REQ from QPN %#x", x.LocalQPN))
		}
		why = fmt.Sprintf("new REQ from %#x", x.LocalCommID)
		o.cm.mu.Lock()
		cur := o.cm.remoteIDs.get(idKey{x.LocalCommID, x.LocalCAGUID})
		o.cm.mu.Unlock()
		if cur != nil {
			target = o.s.byID[cur]
			why += fmt.Sprintf(" (the CM has %v for it, state %v)", target, cur.state)
		}
		return true, target, why
	case *wire.MRA:
		var m *mid
		var ok bool
		switch x.MessageMRAed {
		case wire.MessageREQ:
			m, ok = find(x.RemoteCommID, 0)
		case wire.MessageREP, wire.MessageOther:
			m, ok = find(x.RemoteCommID, x.LocalCommID)
		default:
			return false, nil, "MRAed 3"
		}
		if !ok {
			return
		}
		if m == nil {
			return false, nil, "MRA, no such id"
		}
		switch x.MessageMRAed {
		case wire.MessageREQ:
			return m.state == StateREQSent, m, "MRA(REQ) in " + m.state.String()
		case wire.MessageREP:
			return m.state == StateREPSent, m, "MRA(REP) in " + m.state.String()
		}
		return m.state == StateEstablished && m.lap == LAPSent, m, "MRA(other) in " + m.state.String() + "/" + m.lap.String()
	case *wire.REJ:
		if x.Reason == wire.REJTimeout {
			return
		}
		var m *mid
		var ok bool
		if x.MessageRejected == wire.MessageREQ {
			m, ok = find(x.RemoteCommID, 0)
		} else {
			m, ok = find(x.RemoteCommID, x.LocalCommID)
		}
		if !ok {
			return
		}
		if m == nil {
			return false, nil, "REJ, no such id"
		}
		w := in(m.state, StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREQRcvd, StateMRAREQSent, StateDREQSent, StateREPRcvd, StateMRAREPSent) ||
			(m.state == StateEstablished && (m.lap == LAPUninit || m.lap == LAPSent))
		return w, m, "REJ in " + m.state.String() + "/" + m.lap.String()
	case *wire.REP:
		m, ok := known(x.RemoteCommID)
		if !ok {
			return
		}
		if m != nil && m.remoteID == 0 {
			w := in(m.state, StateREQSent, StateMRAREQRcvd)
			if w {
				if old := o.staleOf(x.LocalQPN, x.LocalCAGUID, m); old != nil {
					o.expectStaleDREQ(old, fmt.Sprintf("stale REP from QPN %#x", x.LocalQPN))
				}
			}
			return w, m, "REP in " + m.state.String()
		}
		m, _ = find(x.RemoteCommID, x.LocalCommID)
		if m == nil {
			return false, nil, "duplicate REP, no such id"
		}
		return in(m.state, StateEstablished, StateMRAREPSent), m, "duplicate REP in " + m.state.String()
	case *wire.RTU:
		m, ok := find(x.RemoteCommID, x.LocalCommID)
		if !ok {
			return
		}
		if m == nil {
			return false, nil, "RTU, no such id"
		}
		return in(m.state, StateREPSent, StateMRAREPRcvd), m, "RTU in " + m.state.String()
	case *wire.DREQ:
		m, _ := find(x.RemoteCommID, x.LocalCommID)
		if m == nil {
			return true, nil, "DREQ for no id: DREP"
		}
		if x.RemoteQPN != m.qpn {
			return false, m, fmt.Sprintf("DREQ for QPN %#x, ours %#x", x.RemoteQPN, m.qpn)
		}
		return in(m.state, StateREPSent, StateDREQSent, StateMRAREPRcvd, StateEstablished, StateTimewait), m, "DREQ in " + m.state.String()
	case *wire.DREP:
		m, ok := find(x.RemoteCommID, x.LocalCommID)
		if !ok {
			return
		}
		if m == nil {
			return false, nil, "DREP, no such id"
		}
		return in(m.state, StateDREQSent, StateDREQRcvd), m, "DREP in " + m.state.String()
	case *wire.LAP:
		m, ok := find(x.RemoteCommID, x.LocalCommID)
		if !ok {
			return
		}
		if m == nil {
			return false, nil, "LAP, no such id"
		}
		return m.state == StateEstablished && (m.lap == LAPUninit || m.lap == LAPIdle || m.lap == LAPMRALAPSent), m, "LAP in " + m.state.String() + "/" + m.lap.String()
	case *wire.APR:
		m, ok := find(x.RemoteCommID, x.LocalCommID)
		if !ok {
			return
		}
		if m == nil {
			return false, nil, "APR, no such id"
		}
		return m.state == StateEstablished && (m.lap == LAPSent || m.lap == LAPMRALAPRcvd), m, "APR in " + m.state.String() + "/" + m.lap.String()
	case *wire.SIDRREP:
		m, ok := find(x.RequestID, 0)
		if !ok {
			return
		}
		if m == nil {
			return false, nil, "SIDR_REP, no such id"
		}
		return m.state == StateSIDRREQSent, m, "SIDR_REP in " + m.state.String()
	}
	return
}

// released is the OnReleased hook.
func (s *soak) released(ctx any) {
	m, _ := ctx.(*mid)
	if m == nil {
		s.fail(nil, "released hook with context %v", ctx)
		return
	}
	s.stats.releasedHook++
	m.released++
	m.logf("released hook")
	switch {
	case !m.lingers:
		s.fail(m, "released hook for an id whose Destroy did not linger")
	case m.released > 1:
		s.fail(m, "released hook called %d times", m.released)
	case m.closeReleased:
	case !s.n.clk.Now().Equal(m.relDeadline) && !m.destroyNested:
		s.fail(m, "released at %v, want %v", s.n.clk.Now().Sub(m.relDeadline.Add(-m.twDur)), m.twDur)
	}
}

// ---------------------------------------------------------------- reconcile

// reconcile compares the model with the CMs at a quiescent point.
func (s *soak) reconcile() {
	now := s.n.clk.Now()
	for _, nd := range s.nodes {
		cm := nd.cm
		cm.mu.Lock()
		if b := cm.backlog(); b != 0 {
			s.fail(nil, "%s: %d events undelivered at a quiescent point", nd.name, b)
		}
		cm.mu.Unlock()
	}
	for _, m := range s.mids {
		if m.dead || m.inst != m.node.inst {
			continue
		}
		cm := m.cm
		if m.destroyed {
			cm.mu.Lock()
			inIDs := cm.ids.lookup(m.localID) == m.id
			inRemote := m.id.inRemote || cm.remoteIDs.get(keyRemoteID.of(m.id)) == m.id
			inSIDR := m.id.sidrEntry != nil
			inListen := slices.Contains(cm.listen.ids, m.id)
			msg := m.id.msg != nil
			cm.mu.Unlock()
			switch {
			case inRemote || inSIDR || inListen:
				s.fail(m, "destroyed id still in a table (remote %v sidr %v listen %v)", inRemote, inSIDR, inListen)
			case msg:
				s.fail(m, "destroyed id still has an outstanding message")
			case inIDs && !m.lingers && !m.byOutcome && !m.destroyNested:
				s.fail(m, "destroyed id that did not linger still holds its comm ID")
			case inIDs && m.lingers && !now.Before(m.relDeadline):
				s.fail(m, "destroyed id holds its comm ID past its timewait (%v)", m.relDeadline.Sub(now))
			}
			continue
		}
		if m.mustDREQ != "" {
			if !m.silentDREQ && m.state == StateEstablished {
				s.fail(m, "%s: the old connection, ESTABLISHED, sent no DREQ (cm.c sends one)", m.mustDREQ)
			}
			m.mustDREQ = ""
		}
		st, lap := m.id.State()
		if st != m.state || lap != m.lap {
			m.applySilent()
		}
		if st != m.state || lap != m.lap {
			s.fail(m, "state drift: CM says %v/%v, model %v/%v", st, lap, m.state, m.lap)
			m.state, m.lap = st, lap
		}
	}
}

// ---------------------------------------------------------------- ops

func (s *soak) pickLive(ok func(*mid) bool) *mid {
	var c []*mid
	for _, m := range s.mids {
		if !m.destroyed && !m.dead && ok(m) {
			c = append(c, m)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.rng.IntN(len(c))]
}

func (s *soak) path(src, dst *soakNode, plt uint8) *PathRecord {
	p := simPath(src.dev, dst.dev)
	p.PacketLifeTime = plt
	return p
}

func (s *soak) allocQPN(nd *soakNode) uint32 {
	if len(nd.qpnPool) > 0 && s.rng.IntN(2) == 0 {
		q := nd.qpnPool[len(nd.qpnPool)-1]
		nd.qpnPool = nd.qpnPool[:len(nd.qpnPool)-1]
		s.stats.reuseQPN++
		return q
	}
	if s.rng.Float64() < 0.03 {
		// A QPN still used by a live connection of this node: the peer
		// sees a stale connection.
		if o := s.pickLive(func(o *mid) bool {
			return o.node == nd && o.qpn != 0 && o.state == StateEstablished
		}); o != nil {
			s.stats.reuseQPN++
			return o.qpn
		}
	}
	nd.nextQPN++
	return nd.nextQPN & 0xFFFFFF
}

func (s *soak) connect(src, dst *soakNode, sid uint64) *mid {
	id := src.cm.CreateID(s.handle)
	m := s.newMid(src, kActive, id)
	id.SetContext(m)
	m.dst = dst
	m.plt = uint8(8 + s.rng.IntN(7))
	rcm := uint8(12 + s.rng.IntN(7))
	if s.rng.IntN(5) == 0 {
		rcm = uint8(8 + s.rng.IntN(4))
	}
	m.maxRetries8 = uint8(1 + s.rng.IntN(5))
	switch s.rng.IntN(20) {
	case 0, 1, 2:
		m.maxRetries8 = 0
	case 3:
		m.maxRetries8 = 17 // the REQ carries 4 bits: the passive side retries once
	}
	lcm := uint8(12 + s.rng.IntN(7))
	if s.rng.IntN(5) == 0 {
		lcm = uint8(8 + s.rng.IntN(4))
	}
	m.qpn = s.allocQPN(src)
	p := &REQParams{
		Primary: s.path(src, dst, m.plt), ServiceID: sid, QPN: m.qpn, QPType: QPTypeRC,
		StartingPSN: s.rng.Uint32() & 0xFFFFFF, ResponderResources: 4, InitiatorDepth: 4,
		RemoteCMResponseTimeout: rcm, LocalCMResponseTimeout: lcm,
		RetryCount: 7, RNRRetryCount: 7, MaxCMRetries: m.maxRetries8,
	}
	m.interval = msDuration(2*convertToMs(m.plt) + convertToMs(rcm))
	m.retries = int(m.maxRetries8)
	m.avTimeout = min(m.plt+1, 31)
	m.state = StateREQSent
	m.logf("SendREQ to %s sid %#x qpn %#x plt %d interval %v retries %d", dst.name, sid, m.qpn, m.plt, m.interval, m.retries)
	s.stats.connects++
	m.inCall = true
	s.inTest = true
	err := id.SendREQ(p)
	s.inTest = false
	m.inCall = false
	if err != nil {
		s.fail(m, "SendREQ: %v", err)
	}
	return m
}

func (s *soak) opConnect() {
	src := s.nodes[s.rng.IntN(len(s.nodes))]
	dst := s.nodes[s.rng.IntN(len(s.nodes))]
	sv := dst.services[s.rng.IntN(len(dst.services))]
	sid := sv[0]
	if sv[1] != 0 {
		sid |= uint64(s.rng.IntN(256)) &^ sv[1]
	}
	if s.rng.IntN(12) == 0 {
		sid = 0x7777 // nobody listens: REJ 8
	}
	s.connect(src, dst, sid)
}

// call performs an API call on m, checking it against §3.2.
func (s *soak) call(m *mid, c soakCall) {
	ok, next, nlap, errno := soakAllowed(c, m.state, m.lap)
	prevSt, prevLap := m.state, m.lap
	if ok {
		m.state, m.lap = next, nlap
		switch c {
		case cCommEst:
			m.userEstPending = true
		case cRTU:
			m.rtuSent = true
		case cREP:
			m.qpn = s.allocQPN(m.node)
		}
		if m.state == StateTimewait {
			m.enterTW()
		}
	} else {
		s.stats.invalidCalls++
	}
	m.logf("call %v in %v/%v (allowed %v)", c, prevSt, prevLap, ok)
	if ok {
		s.stats.callHist[c]++
	}
	id := m.id
	var err error
	m.inCall = true
	s.inTest = true
	switch c {
	case cREP:
		err = id.SendREP(&REPParams{QPN: m.qpn, StartingPSN: s.rng.Uint32(), ResponderResources: 4, InitiatorDepth: 4, RNRRetryCount: 7})
	case cRTU:
		err = id.SendRTU([]byte("rtu"))
	case cDREQ:
		err = id.SendDREQ(nil)
	case cDREP:
		err = id.SendDREP([]byte("drep"))
	case cREJ:
		err = id.SendREJ(wire.REJConsumerDefined, nil, nil)
	case cMRA:
		err = id.SendMRA(uint8(8+s.rng.IntN(11)), nil)
	case cMRADelay:
		err = id.SendMRA(MRAFlagDelay|uint8(8+s.rng.IntN(11)), nil)
	case cLAP:
		dst := s.otherNode(m)
		p := s.path(m.node, dst, m.plt)
		err = id.SendLAP(p, nil)
		if err == nil {
			s.stats.lapSent++
		}
	case cAPR:
		err = id.SendAPR(wire.APRSuccess, nil, nil)
	case cCommEst:
		err = id.Notify(NotifyCommEst)
	case cSIDRREP:
		err = id.SendSIDRREP(&SIDRREPParams{Status: uint8(s.rng.IntN(3)), QPN: 0x42, QKey: 0x1111})
		if err == nil {
			s.stats.sidrRep++
		}
	case cREQ, cSIDRREQ:
		dst := s.nodes[s.rng.IntN(len(s.nodes))]
		m.reused = true
		if c == cREQ {
			qpn := s.allocQPN(m.node)
			if ok {
				m.kind, m.plt, m.maxRetries8, m.retries, m.avTimeout, m.dst, m.qpn = kActive, 10, 2, 2, 11, dst, qpn
				m.interval = msDuration(2*convertToMs(10) + convertToMs(10))
				m.peer, m.rtuSent, m.remoteID, m.remoteQPN = nil, false, 0, 0
			}
			err = id.SendREQ(&REQParams{Primary: s.path(m.node, dst, 10), ServiceID: dst.services[0][0], QPN: qpn,
				QPType: QPTypeRC, RemoteCMResponseTimeout: 10, LocalCMResponseTimeout: 10, MaxCMRetries: 2})
		} else {
			if ok {
				m.kind, m.interval, m.retries = kSIDRReq, 20*time.Millisecond, 2
			}
			err = id.SendSIDRREQ(&SIDRREQParams{Path: s.path(m.node, dst, 10), ServiceID: dst.services[0][0], TimeoutMs: 20, MaxCMRetries: 2})
		}
	}
	s.inTest = false
	m.inCall = false
	switch {
	case ok && err != nil:
		s.fail(m, "%v in %v/%v: allowed by §3.2 but failed: %v", c, prevSt, prevLap, err)
	case !ok && err == nil:
		s.fail(m, "%v in %v/%v: not allowed by §3.2 but succeeded", c, prevSt, prevLap)
	case !ok && !errors.Is(err, errno):
		s.fail(m, "%v in %v/%v: error %v, want %v", c, prevSt, prevLap, err, errno)
	}
}

func (s *soak) otherNode(m *mid) *soakNode {
	if m.kind == kPassive && m.active != nil {
		return m.active.node
	}
	if m.dst != nil {
		return m.dst
	}
	return m.node
}

// validCalls are the calls an application would make in a state.
func validCalls(st State, lap LAPState) []soakCall {
	switch st {
	case StateREQSent, StateMRAREQRcvd:
		return []soakCall{cREJ}
	case StateREQRcvd:
		return []soakCall{cREP, cREP, cREP, cREJ, cMRA, cMRADelay}
	case StateMRAREQSent:
		return []soakCall{cREP, cREP, cREJ}
	case StateREPSent, StateMRAREPRcvd:
		return []soakCall{cCommEst, cREJ}
	case StateREPRcvd:
		return []soakCall{cRTU, cRTU, cRTU, cMRA, cMRADelay, cREJ}
	case StateMRAREPSent:
		return []soakCall{cRTU, cRTU, cREJ}
	case StateEstablished:
		switch lap {
		case LAPRcvd:
			return []soakCall{cAPR, cAPR, cMRA, cDREQ}
		case LAPMRALAPSent:
			return []soakCall{cAPR, cDREQ}
		case LAPUninit, LAPIdle:
			return []soakCall{cDREQ, cLAP, cCommEst}
		}
		return []soakCall{cDREQ}
	case StateDREQRcvd:
		return []soakCall{cDREP, cDREP, cDREP, cDREQ}
	case StateSIDRREQRcvd:
		return []soakCall{cSIDRREP}
	}
	return nil
}

func (s *soak) opAct() {
	var m *mid
	if s.rng.Float64() < 0.7 {
		// A responsive application answers what waits for it.
		m = s.pickLive(func(m *mid) bool {
			switch m.state {
			case StateREQRcvd, StateREPRcvd, StateDREQRcvd, StateSIDRREQRcvd, StateMRAREQSent, StateMRAREPSent:
				return true
			}
			return m.state == StateEstablished && m.lap == LAPRcvd
		})
	}
	if m == nil {
		m = s.pickLive(func(m *mid) bool { return m.kind != kListener })
	}
	if m == nil {
		return
	}
	if s.rng.Float64() < 0.12 {
		c := soakCall(s.rng.IntN(int(nCalls)))
		if (c == cREQ || c == cSIDRREQ) && s.rng.IntN(4) != 0 {
			c = cDREQ // reuse of an id: rare
		}
		s.call(m, c)
		return
	}
	cs := validCalls(m.state, m.lap)
	if len(cs) == 0 {
		return
	}
	s.call(m, cs[s.rng.IntN(len(cs))])
}

// expectLinger is whether Destroy in m's state keeps the id for a timewait,
// and until when.
func (m *mid) expectLinger() (bool, time.Time) {
	now := m.s.n.clk.Now()
	tw := now.Add(msDuration(convertToMs(m.avTimeout)))
	switch m.state {
	case StateEstablished, StateDREQSent, StateDREQRcvd, StateREPSent, StateMRAREPRcvd:
		return true, tw
	case StateTimewait:
		return true, m.twEnter.Add(m.twDur)
	}
	return false, time.Time{}
}

// destroy destroys m through ID.Destroy. nested: called from a handler
// after a nested pump, when the model may lag the CM.
func (s *soak) destroy(m *mid, nested bool) {
	if m.destroyed {
		return
	}
	want, deadline := m.expectLinger()
	m.destroyed, m.destroyNested = true, nested
	m.logf("Destroy in %v/%v (nested %v)", m.state, m.lap, nested)
	s.stats.destroyIn[m.state]++
	s.stats.destroys++
	s.removeListener(m)
	m.inCall = true
	was := s.inTest
	s.inTest = true
	lingers := m.id.Destroy()
	s.inTest = was
	m.inCall = false
	m.lingers = lingers
	if lingers {
		s.stats.lingering++
		m.relDeadline = deadline
		if m.state == StateTimewait {
			m.twDur = m.twEnter.Add(m.twDur).Sub(s.n.clk.Now())
		} else {
			m.twDur = deadline.Sub(s.n.clk.Now())
		}
	}
	if !nested && lingers != want {
		s.fail(m, "Destroy in %v lingers=%v, want %v", m.state, lingers, want)
	}
	if !nested {
		m.destroySeq = s.seq + 1
	}
	if m.lingers && nested {
		// The model state may lag: accept any deadline up to ms(31).
		m.relDeadline = s.n.clk.Now().Add(msDuration(convertToMs(31)))
	}
}

func (s *soak) removeListener(m *mid) {
	if m.kind != kListener {
		return
	}
	nd := m.node
	nd.listeners = slices.DeleteFunc(nd.listeners, func(o *mid) bool { return o == m })
}

func (s *soak) replaceListener(l *mid) {
	if l.inst != l.node.inst {
		return
	}
	s.newListener(l.node, l.listenSID, l.listenMask)
}

func (s *soak) opDestroy() {
	var m *mid
	if s.rng.IntN(5) != 0 {
		m = s.pickLive(func(m *mid) bool { return m.kind != kListener && m.state != StateIdle })
	}
	if m == nil {
		m = s.pickLive(func(m *mid) bool { return m.kind != kListener })
	}
	if m != nil {
		s.destroy(m, false)
	}
}

// opBoth acts on both ends of a connection in one step: crossing DREQs,
// or both destroyed at once, or one destroys while the other DREQs.
func (s *soak) opBoth() {
	c := s.pickLive(func(m *mid) bool {
		return m.kind == kPassive && m.active != nil && !m.active.destroyed && !m.active.dead && m.active.peer == m
	})
	if c == nil {
		return
	}
	a := c.active
	switch s.rng.IntN(3) {
	case 0:
		if a.state == StateEstablished && c.state == StateEstablished {
			s.stats.crossDREQ++
			s.call(a, cDREQ)
			s.call(c, cDREQ)
		}
	case 1:
		s.stats.bothDestroy++
		s.destroy(a, false)
		s.destroy(c, false)
	case 2:
		if a.state == StateEstablished && c.state == StateEstablished {
			s.call(c, cDREQ)
			s.destroy(a, false)
		}
	}
}

func (s *soak) opSIDR() {
	src := s.nodes[s.rng.IntN(len(s.nodes))]
	dst := s.nodes[s.rng.IntN(len(s.nodes))]
	id := src.cm.CreateID(s.handle)
	m := s.newMid(src, kSIDRReq, id)
	id.SetContext(m)
	sid := dst.services[s.rng.IntN(len(dst.services))][0]
	if s.rng.IntN(8) == 0 {
		sid = 0x7777
	}
	m.interval = time.Duration(1+s.rng.IntN(50)) * time.Millisecond
	m.retries = s.rng.IntN(4)
	m.state = StateSIDRREQSent
	m.logf("SendSIDRREQ to %s sid %#x interval %v retries %d", dst.name, sid, m.interval, m.retries)
	m.inCall = true
	s.inTest = true
	err := id.SendSIDRREQ(&SIDRREQParams{Path: s.path(src, dst, 10), ServiceID: sid, TimeoutMs: uint32(m.interval / time.Millisecond), MaxCMRetries: uint8(m.retries)})
	s.inTest = false
	m.inCall = false
	if err != nil {
		s.fail(m, "SendSIDRREQ: %v", err)
	}
}

func (s *soak) opListener() {
	nd := s.nodes[s.rng.IntN(len(s.nodes))]
	if len(nd.listeners) == 0 {
		return
	}
	l := nd.listeners[s.rng.IntN(len(nd.listeners))]
	s.destroy(l, false)
	s.replaceListener(l)
}

// opBurst sends several REQs to one node at once and then destroys one of
// its listeners before they are handled: the REQs already received are
// rejected, the later ones find the new listener (or none).
//
// Half the time the REQs arrive while one of dst's handlers runs on the
// test goroutine (a SIDR_REQ of dst's times out at once): that handler
// pumps, so the REQs' events queue up behind it, and then it destroys a
// listener, whose queued new connections must be rejected.
func (s *soak) opBurst() {
	dst := s.nodes[s.rng.IntN(len(s.nodes))]
	var trig *mid
	if s.rng.IntN(2) == 0 {
		other := s.nodes[(dst.idx+1)%len(s.nodes)]
		s.n.f.Partition(dst.dev.Port(1), other.dev.Port(1))
		id := dst.cm.CreateID(s.handle)
		trig = s.newMid(dst, kSIDRReq, id)
		id.SetContext(trig)
		trig.interval, trig.retries, trig.state = time.Millisecond, 0, StateSIDRREQSent
		trig.logf("burst trigger SIDR_REQ to partitioned %s", other.name)
		s.inTest = true
		if err := id.SendSIDRREQ(&SIDRREQParams{Path: s.path(dst, other, 10), ServiceID: 0x5000, TimeoutMs: 1}); err != nil {
			s.fail(trig, "SendSIDRREQ: %v", err)
		}
		s.inTest = false
		s.n.f.Heal(dst.dev.Port(1), other.dev.Port(1))
	}
	for range 2 + s.rng.IntN(5) {
		src := s.nodes[s.rng.IntN(len(s.nodes))]
		sv := dst.services[s.rng.IntN(len(dst.services))]
		s.connect(src, dst, sv[0])
	}
	// And disconnects of connections with an end on dst, so that events of
	// dst's existing ids queue up too.
	for range s.rng.IntN(4) {
		if p := s.pickLive(func(p *mid) bool {
			q := p.peerOf()
			return p.state == StateEstablished && q != nil && q.node == dst && q.inst == dst.inst && !q.destroyed
		}); p != nil {
			s.call(p, cDREQ)
		}
	}
	s.burstDestroyQueued = s.rng.IntN(2) == 0
	switch {
	case trig != nil:
		// Fire the trigger's timeout before the REQs are pumped.
		s.forceNested = trig
		s.inTest = true
		s.n.clk.Advance(time.Millisecond)
		s.inTest = false
		s.forceNested = nil
	case s.rng.IntN(2) == 0 && len(dst.listeners) > 0:
		s.settle()
		l := dst.listeners[s.rng.IntN(len(dst.listeners))]
		s.destroy(l, false)
		s.replaceListener(l)
	}
}

// opPartition cuts two ports apart for a while (every MAD between them
// lost), or heals every partition.
func (s *soak) opPartition() {
	if s.rng.IntN(2) == 0 {
		s.n.f.HealAll()
		s.logf("heal all")
		return
	}
	a := s.nodes[s.rng.IntN(len(s.nodes))]
	b := s.nodes[s.rng.IntN(len(s.nodes))]
	if a != b {
		s.n.f.Partition(a.dev.Port(1), b.dev.Port(1))
		s.stats.partitions++
		s.logf("partition %s-%s", a.name, b.name)
	}
}

// opRestart closes a CM and starts a new one on the same port: its peers
// keep connections to ids that no longer exist.
func (s *soak) opRestart() {
	nd := s.nodes[s.rng.IntN(len(s.nodes))]
	s.stats.restarts++
	s.logf("restart %s inst %d", nd.name, nd.inst)
	var pool []uint32
	for _, m := range s.mids {
		if m.node == nd && m.inst == nd.inst {
			if m.qpn != 0 && !m.destroyed {
				pool = append(pool, m.qpn)
			}
			if m.destroyed && m.lingers && m.released == 0 {
				m.closeReleased = true
			}
			if !m.destroyed {
				m.dead = true
				m.logf("its CM closed in %v", m.state)
			}
		}
	}
	nd.obs.closed = true
	old := nd.cm
	if err := old.Close(); err != nil {
		s.fail(nil, "close: %v", err)
	}
	for _, m := range s.mids {
		if m.node == nd && m.inst == nd.inst && m.destroyed && m.lingers && m.released != 1 {
			s.fail(m, "lingering id not released at Close (%d calls)", m.released)
		}
	}
	nd.qpnPool = pool
	s.startNode(nd)
}

// ---------------------------------------------------------------- epochs

// prompt lets the prompt applications (most ids) answer what waits for
// them before the next random step.
func (s *soak) prompt() {
	for _, m := range slices.Clone(s.mids) {
		if m.destroyed || m.dead || !m.prompt || s.rng.IntN(4) == 0 {
			continue
		}
		switch {
		case m.state == StateREQRcvd, m.state == StateMRAREQSent:
			if s.rng.IntN(8) == 0 {
				s.call(m, cREJ)
			} else {
				s.call(m, cREP)
			}
		case m.state == StateREPRcvd, m.state == StateMRAREPSent:
			s.call(m, cRTU)
		case m.state == StateDREQRcvd:
			s.call(m, cDREP)
		case m.state == StateSIDRREQRcvd:
			s.call(m, cSIDRREP)
		case m.state == StateEstablished && m.lap == LAPRcvd:
			s.call(m, cAPR)
		}
	}
}

func (s *soak) randomOp() {
	s.prompt()
	s.stats.ops++
	s.progress.Add(1)
	r := s.rng.Float64()
	switch {
	case r < 0.18:
		s.opConnect()
	case r < 0.63:
		s.opAct()
	case r < 0.67:
		s.opDestroy()
	case r < 0.71:
		s.opSIDR()
	case r < 0.75:
		s.opBoth()
	case r < 0.765:
		s.opListener()
	case r < 0.78:
		s.opBurst()
	case r < 0.783 && s.opts.restarts:
		s.opRestart()
	case r < 0.79:
		s.opPartition()
	default:
		s.advance(time.Duration(s.rng.IntN(100)) * time.Millisecond)
		return
	}
	if s.rng.IntN(2) == 0 {
		s.advance(time.Duration(s.rng.IntN(20)) * time.Millisecond)
	} else {
		s.advance(0)
	}
}

// drain lets every application finish what it has: each live id is
// answered or disconnected, until all are IDLE and no timer is pending.
func (s *soak) drain() {
	s.n.f.HealAll()
	for round := 0; ; round++ {
		busy := false
		for _, m := range slices.Clone(s.mids) {
			if m.destroyed || m.dead || m.kind == kListener {
				continue
			}
			var c soakCall = 255
			switch m.state {
			case StateIdle:
				continue
			case StateREQRcvd, StateMRAREQSent:
				c = cREJ
				if round%2 == 0 {
					c = cREP
				}
			case StateREPRcvd, StateMRAREPSent:
				c = cRTU
			case StateEstablished:
				c = cDREQ
				if m.lap == LAPRcvd || m.lap == LAPMRALAPSent {
					c = cAPR
				}
			case StateDREQRcvd:
				c = cDREP
			case StateSIDRREQRcvd:
				c = cSIDRREP
			}
			busy = true
			if c != 255 {
				s.call(m, c)
			}
		}
		s.advance(time.Second)
		if !busy && s.n.clk.Pending() == 0 {
			break
		}
		if round > 400 {
			for _, m := range s.mids {
				if !m.destroyed && !m.dead && m.kind != kListener && m.state != StateIdle {
					s.fail(m, "did not converge: %v/%v after %d rounds, %d timers pending", m.state, m.lap, round, s.n.clk.Pending())
				}
			}
			s.check()
			return
		}
	}
	s.stats.drained++
}

// teardown destroys every id but the listeners and checks that nothing is
// left behind.
func (s *soak) teardown() {
	for _, m := range s.mids {
		if !m.destroyed && !m.dead && m.kind != kListener {
			s.destroy(m, false)
		}
	}
	for s.n.clk.Pending() > 0 {
		s.advance(10 * time.Second)
	}
	s.advance(0)
	for _, nd := range s.nodes {
		cm := nd.cm
		cm.mu.Lock()
		ids, rid, rqpn, sidr, lis, evs := cm.ids.byID.len(), cm.remoteIDs.len(), cm.remoteQPNs.len(), len(cm.sidr), len(cm.listen.ids), cm.backlog()
		cm.mu.Unlock()
		if ids != len(nd.listeners) || rid != 0 || rqpn != 0 || sidr != 0 || lis != len(nd.listeners) || evs != 0 {
			s.fail(nil, "%s after teardown: %d ids (%d listeners), remote ids %d, remote QPNs %d, SIDR %d, listen %d, events %d",
				nd.name, ids, len(nd.listeners), rid, rqpn, sidr, lis, evs)
		}
	}
	for _, m := range s.mids {
		if m.destroyed && m.lingers && m.released != 1 {
			s.fail(m, "lingering id released %d times", m.released)
		}
	}
	if p := s.n.clk.Pending(); p != 0 {
		s.fail(nil, "%d timers pending after teardown", p)
	}
	if len(s.txs) > 20000 {
		clear(s.txs)
	}
	// Keep only the listeners in the model.
	s.mids = slices.DeleteFunc(s.mids, func(m *mid) bool {
		if m.kind == kListener && !m.destroyed && !m.dead {
			return false
		}
		delete(s.byID, m.id)
		if m.inst == m.node.inst {
			delete(m.node.byComm, m.localID)
		}
		return true
	})
	clear(s.txs)
	s.check()
	runtime.GC()
	if g := runtime.NumGoroutine(); s.baseGoroutines != 0 && g > s.baseGoroutines {
		s.fail(nil, "goroutines grew: %d, baseline %d", g, s.baseGoroutines)
	}
}

func randomKnobs(r *rand.Rand) sim.Knobs {
	var k sim.Knobs
	switch r.IntN(5) {
	case 0: // perfect fabric
	case 1:
		k.Loss = 0.05 + 0.25*r.Float64()
	case 2:
		k.Duplicate = 0.3 * r.Float64()
		k.Reorder = 0.3 * r.Float64()
	case 3:
		k.Delay = time.Duration(r.IntN(3)) * time.Millisecond
		k.Jitter = time.Duration(1+r.IntN(5)) * time.Millisecond
		k.Duplicate = 0.1 * r.Float64()
	default:
		k.Loss = 0.2 * r.Float64()
		k.Duplicate = 0.2 * r.Float64()
		k.Reorder = 0.2 * r.Float64()
		k.Jitter = time.Duration(r.IntN(4)) * time.Millisecond
	}
	return k
}

func (s *soak) run() (err error) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(soakAbort); !ok {
				panic(r)
			}
			err = errors.New(strings.Join(s.failures, "\n"))
		}
	}()
	go s.watchdog()
	defer close(s.stop)
	s.advance(0)
	s.baseGoroutines = runtime.NumGoroutine()
	for e := range s.opts.epochs {
		s.knobs = s.opts.knobs(s.rng)
		s.n.f.SetKnobs(s.knobs)
		s.logf("epoch %d knobs %+v", e, s.knobs)
		for range s.opts.ops {
			s.randomOp()
		}
		s.drain()
		s.teardown()
	}
	return nil
}

func (s *soak) watchdog() {
	last := s.progress.Load()
	idle := 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		if p := s.progress.Load(); p != last {
			last, idle = p, 0
			continue
		}
		if idle++; idle < 60 {
			continue
		}
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("soak seed %d: no progress for 60 s (deadlock?); goroutines:\n%s", s.seed, buf))
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func defaultSoakOpts() soakOpts {
	return soakOpts{
		epochs: envInt("SOAK_EPOCHS", 6), ops: envInt("SOAK_OPS", 400),
		restarts: true, nested: true, knobs: randomKnobs,
	}
}

func runSoakSeed(t *testing.T, seed uint64, opts soakOpts) *soak {
	t.Helper()
	s := newSoak(t, seed, opts)
	err := s.run()
	if os.Getenv("SOAK_VERBOSE") != "" || err != nil {
		tail := s.ring[max(0, len(s.ring)-80):]
		t.Logf("seed %d trace tail:\n%s", seed, strings.Join(tail, "\n"))
	}
	if err != nil {
		t.Errorf("seed %d: %v", seed, err)
	}
	for _, nd := range s.nodes {
		nd.obs.closed = true
		nd.cm.Close()
	}
	return s
}

// TestSoak runs SOAK_SEEDS seeds from SOAK_SEED.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	first := uint64(envInt("SOAK_SEED", 1))
	n := envInt("SOAK_SEEDS", 4)
	var total soakStats
	failed := 0
	for seed := first; seed < first+uint64(n); seed++ {
		s := runSoakSeed(t, seed, defaultSoakOpts())
		if s.failed {
			failed++
		}
		addStats(&total, &s.stats)
	}
	t.Logf("%d seeds (%d failed): %+v", n, failed, total)
	var b strings.Builder
	for i, c := range total.evHist {
		fmt.Fprintf(&b, " %v=%d", EventType(i), c)
	}
	b.WriteString("\ncalls:")
	for i, c := range total.callHist {
		fmt.Fprintf(&b, " %v=%d", soakCall(i), c)
	}
	b.WriteString("\ndestroyed in:")
	for i, c := range total.destroyIn {
		fmt.Fprintf(&b, " %v=%d", State(i), c)
	}
	b.WriteString("\nREJ reasons:")
	for i, c := range total.rejHist {
		if c != 0 {
			fmt.Fprintf(&b, " %d=%d", i, c)
		}
	}
	t.Logf("events:%s", b.String())
}

func addStats(a, b *soakStats) {
	pa := []*int{&a.ops, &a.events, &a.connects, &a.established, &a.destroys, &a.restarts, &a.lapSent, &a.aprRecv, &a.sidr, &a.sidrRep, &a.reqErr, &a.repErr, &a.dreqErr, &a.sidrErr, &a.rejRecv, &a.staleREJ, &a.silentDREQ, &a.lapTimeout, &a.mraRecv, &a.retransmits, &a.nested, &a.nestedListenerDestroy, &a.queuedREQRejected, &a.invalidCalls, &a.crossDREQ, &a.bothDestroy, &a.destroyQueued, &a.rxChecked, &a.partitions, &a.staleChecked, &a.drained, &a.lingering, &a.releasedHook, &a.mads, &a.tw, &a.autoMRA, &a.reuseQPN, &a.dups}
	pb := []*int{&b.ops, &b.events, &b.connects, &b.established, &b.destroys, &b.restarts, &b.lapSent, &b.aprRecv, &b.sidr, &b.sidrRep, &b.reqErr, &b.repErr, &b.dreqErr, &b.sidrErr, &b.rejRecv, &b.staleREJ, &b.silentDREQ, &b.lapTimeout, &b.mraRecv, &b.retransmits, &b.nested, &b.nestedListenerDestroy, &b.queuedREQRejected, &b.invalidCalls, &b.crossDREQ, &b.bothDestroy, &b.destroyQueued, &b.rxChecked, &b.partitions, &b.staleChecked, &b.drained, &b.lingering, &b.releasedHook, &b.mads, &b.tw, &b.autoMRA, &b.reuseQPN, &b.dups}
	for i := range pa {
		*pa[i] += *pb[i]
	}
	for i := range a.evHist {
		a.evHist[i] += b.evHist[i]
	}
	for i := range a.callHist {
		a.callHist[i] += b.callHist[i]
	}
	for i := range a.rejHist {
		a.rejHist[i] += b.rejHist[i]
	}
	for i := range a.destroyIn {
		a.destroyIn[i] += b.destroyIn[i]
	}
}
