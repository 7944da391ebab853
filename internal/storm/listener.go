package storm

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/ucm"
)

// MRAMode is how the listening application answers REQs it cannot accept
// at once.
type MRAMode string

const (
	// MRAOff: no MRA, as a libibcm application that never calls
	// ib_cm_send_mra (the kernel's ib_cm never sent one on its own).
	MRAOff MRAMode = "off"
	// MRADelayed: every REQ not accepted in its handler gets a delayed
	// MRA (IB_CM_MRA_FLAG_DELAY), sent only if the REQ is retransmitted:
	// rdma_cm's behaviour (CMA_CM_MRA_SETTING).
	MRADelayed MRAMode = "delayed"
	// MRAImmediate: a REQ that finds MRAQueue or more new connections
	// waiting gets an MRA at once.
	MRAImmediate MRAMode = "immediate"
	// MRACM: the application sends none, the listener's CM answers a
	// REQ retransmitted while its connection waits (cmcore.Options.AutoMRA
	// with MRAServiceTimeout).
	MRACM MRAMode = "cm"
)

// ListenerConfig is a storm of REQs at one listening id.
type ListenerConfig struct {
	Requests int           // REQs in the storm (default 10,000)
	Within   time.Duration // sent evenly within this time (default 10 ms)
	Senders  int           // active nodes sending them (default 100)
	// AcceptRate is how many new connections per second the application
	// accepts (REP), one at a time from the queue; 0 accepts in the
	// handler.
	AcceptRate float64
	MRA        MRAMode
	// MRAServiceTimeout is the MRA's 5-bit service timeout (default 24,
	// rdma_cm's: 4.096 µs · 2^24 ≈ 69 s; cmcore waits ms(24) + ms(ack
	// timeout) after it).
	MRAServiceTimeout uint8
	// MRAQueue is MRAImmediate's threshold (default 1).
	MRAQueue int

	Latency  time.Duration
	Jitter   time.Duration
	Loss     float64
	Seed     uint64
	QueueLen int // the listener port's receive queue (default Requests)
	Timeouts Timeouts
	Deadline time.Duration // simulated (default 30 minutes)
	// Limits are the listener's ucm limits (zero: ucm's defaults, what
	// the storm is run with).
	Limits ucm.Limits
}

// ListenerResult is what a listener storm measured.
type ListenerResult struct {
	Config      ListenerConfig
	Established int           // on both sides
	Timeouts    int           // REQ_ERROR at the active side (REQ out of retries)
	Failed      int           // timed out, rejected, or REP out of retries
	LastEst     time.Duration // simulated, from the first REQ
	WallTime    time.Duration
	// MaxQueue is the most new connections waiting for the application
	// at once: REQ events queued in ucm's file (off, cm: the application
	// reads a REQ only when it accepts it) plus those it has read and
	// holds (delayed, immediate: it reads each at once to send its MRA).
	MaxQueue int
	MaxWait  time.Duration // longest from a connection's first REQ to its REP

	REQs, REQRetransmits uint64
	MRAs, MRAsReceived   uint64 // MADs sent; MRA_RECEIVED events at the senders
	REPs, REJs           uint64
	Lost, Overflow       uint64

	// HeapPerQueued is the live heap per waiting connection (both ends,
	// as both run here, and the established ones' share), measured when
	// the storm's last REQ has arrived.
	HeapPerQueued float64

	// What ucm held at the listener, from its per-user Budget (the
	// listening application's uid) at its default limits: the most
	// events queued and ids held, and the daemon's memory charge.
	UCMPeakEvents int
	UCMPeakIDs    int
	UCMPeakBytes  int64
	UCMRejected   int        // new connections ucm rejected (a limit reached)
	UCMLimits     ucm.Limits // the limits in force (ucm's defaults)
	UCMMaxEvents  int        // ucm's per-file queue limit

	LeakedIDs, LeakedEvents, LeakedTimers, LeakedAfterClose int
}

type lstorm struct {
	cfg     ListenerConfig
	net     *simNet
	t0      time.Time
	lnode   *stack
	senders []*stack
	conns   []*conn
	paced   bool // the application reads a REQ when it accepts it

	backlog  []*conn // read, not yet accepted (listener's mu)
	head     int
	maxQueue int
	maxWait  time.Duration
	peak     struct {
		events, ids int
		bytes       int64
	}
	measure  bool // take the heap now: the last REQ has arrived
	measured int  // connections waiting then

	tally
	timeouts, mraRecv atomic.Int64
}

// RunListener runs one listener storm.
func RunListener(ctx context.Context, cfg ListenerConfig) (*ListenerResult, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Requests <= 0 {
		cfg.Requests = 10_000
	}
	if cfg.Within <= 0 {
		cfg.Within = 10 * time.Millisecond
	}
	if cfg.Senders <= 0 {
		cfg.Senders = 100
	}
	if cfg.Senders+1 > MaxNodes {
		return nil, settings("at most %d senders (one unicast LID each, and one for the listener), not %d", MaxNodes-1, cfg.Senders)
	}
	if err := checkMemory(fmt.Sprintf("%d REQs at one listener", cfg.Requests), uint64(cfg.Requests), memAvailable()); err != nil {
		return nil, err
	}
	if cfg.MRA == "" {
		cfg.MRA = MRAOff
	}
	switch cfg.MRA {
	case MRAOff, MRADelayed, MRAImmediate, MRACM:
	default:
		return nil, settings("unknown MRA mode %q (want off, delayed, immediate or cm)", cfg.MRA)
	}
	if cfg.MRAServiceTimeout == 0 {
		cfg.MRAServiceTimeout = 24
	}
	if cfg.MRAQueue <= 0 {
		cfg.MRAQueue = 1
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = max(cfg.Requests, sim.DefaultQueueLen)
	}
	if cfg.Timeouts == (Timeouts{}) {
		cfg.Timeouts = DefaultTimeouts
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = 30 * time.Minute
	}
	s := &lstorm{cfg: cfg}
	s.paced = cfg.AcceptRate > 0 && (cfg.MRA == MRAOff || cfg.MRA == MRACM)
	s.net = newSimNet(cfg.Seed, sim.Knobs{Delay: cfg.Latency, Jitter: cfg.Jitter, Loss: cfg.Loss}, cfg.QueueLen)
	var all []*stack
	defer func() {
		for _, nd := range all {
			nd.cm.Close()
		}
	}()
	mem := callermem.NewFake()
	for i := range cfg.Senders + 1 {
		var auto uint8
		if i == 0 && cfg.MRA == MRACM {
			auto = cfg.MRAServiceTimeout
		}
		var lim ucm.Limits
		if i == 0 {
			lim = cfg.Limits
		}
		st, err := s.net.addStack(i, mem, auto, lim)
		if err != nil {
			return nil, err
		}
		st.onEv = s.onSender
		all = append(all, st)
		if i == 0 {
			// QueueLen is the listener's; a sender gets room for a few
			// MADs of each of its connections. (Every port had the
			// listener's: 280 bytes a slot made up front, 28 GB for
			// --requests 1000000.)
			s.net.f.SetQueueLen(max(sim.DefaultQueueLen, 4*((cfg.Requests+cfg.Senders-1)/cfg.Senders)))
		}
	}
	s.lnode, s.senders = all[0], all[1:]
	s.lnode.onEv = s.onListener
	s.lnode.paced = s.paced
	s.lnode.onWake = s.sample
	for i := range cfg.Requests {
		s.conns = append(s.conns, &conn{idx: i, a: 1 + i%cfg.Senders, b: 0, act: -1, pas: -1})
	}
	s.t0 = s.net.clk.Now()
	res := &ListenerResult{Config: cfg, UCMMaxEvents: ucm.DefaultMaxEvents}
	res.UCMLimits = cfg.Limits
	def := ucm.Limits{
		MaxIDs: ucm.DefaultMaxIDs, MaxEvents: ucm.DefaultMaxEvents, UserIDs: ucm.DefaultUserIDs,
		UserEvents: ucm.DefaultUserEvents, UserFiles: ucm.DefaultUserFiles, MemoryBudget: ucm.DefaultMemoryBudget,
	}
	for _, f := range []struct{ v, d *int }{
		{&res.UCMLimits.MaxIDs, &def.MaxIDs}, {&res.UCMLimits.MaxEvents, &def.MaxEvents}, {&res.UCMLimits.UserIDs, &def.UserIDs},
		{&res.UCMLimits.UserEvents, &def.UserEvents}, {&res.UCMLimits.UserFiles, &def.UserFiles},
	} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	if res.UCMLimits.MemoryBudget <= 0 {
		res.UCMLimits.MemoryBudget = def.MemoryBudget
	}
	res.UCMMaxEvents = res.UCMLimits.MaxEvents
	base := liveHeap()
	var peakHeap uint64

	wall := time.Now()
	step := cfg.Within / time.Duration(cfg.Requests)
	for i, c := range s.conns {
		s.net.clk.AfterFunc(time.Duration(i)*step, func() { s.connect(c) })
	}
	// The last REQ has reached the listener: the queue is about its
	// longest.
	s.net.clk.AfterFunc(cfg.Within+2*cfg.Latency+cfg.Jitter, func() {
		s.measure, s.measured = true, s.waiting()
	})
	if cfg.AcceptRate > 0 {
		every := time.Duration(float64(time.Second) / cfg.AcceptRate)
		var tick func()
		tick = func() {
			s.accept()
			if !s.done() {
				s.net.clk.AfterFunc(every, tick)
			}
		}
		s.net.clk.AfterFunc(every, tick)
	}
	_, err := s.net.runUntil(ctx, s.t0.Add(cfg.Deadline), func() bool {
		if s.measure {
			s.measure = false
			peakHeap = liveHeap()
		}
		return s.done()
	})
	res.WallTime = time.Since(wall)
	if err != nil {
		return res, err
	}
	res.Established = int(s.established.Load())
	res.Failed = int(s.failed.Load())
	res.Timeouts = int(s.timeouts.Load())
	res.MRAsReceived = uint64(s.mraRecv.Load())
	res.LastEst = time.Duration(s.lastEst.Load())
	res.MaxQueue, res.MaxWait = s.maxQueue, s.maxWait
	res.UCMPeakEvents, res.UCMPeakIDs, res.UCMPeakBytes = s.peak.events, s.peak.ids, s.peak.bytes
	res.UCMRejected = int(s.lnode.rejected.Load())
	if peakHeap > base && s.measured > 0 {
		res.HeapPerQueued = float64(peakHeap-base) / float64(s.measured)
	}
	n := s.net
	res.REQs = n.sent(attrREQ)
	if res.REQs > uint64(cfg.Requests) {
		res.REQRetransmits = res.REQs - uint64(cfg.Requests)
	}
	res.MRAs, res.REPs, res.REJs = n.sent(attrMRA), n.sent(attrREP), n.sent(attrREJ)
	for _, nd := range all {
		c := nd.dev.Port(1).Counters()
		res.Lost += c.Lost
		res.Overflow += c.Overflow
	}

	// Tear down: destroy every id (DESTROY_ID), run the clock dry,
	// nothing may remain but the listener; then close every file.
	var r Result
	err = destroyAll(ctx, s.net, all, cfg.Deadline, &r)
	res.LeakedIDs, res.LeakedEvents, res.LeakedTimers, res.LeakedAfterClose = r.LeakedIDs, r.LeakedEvents, r.LeakedTimers, r.LeakedAfterClose
	if err != nil {
		return res, err
	}
	if e := s.net.errs.Load(); e > 0 {
		return res, fmt.Errorf("storm: %d ucm commands failed", e)
	}
	return res, nil
}

func (s *lstorm) done() bool {
	return s.established.Load()+s.failed.Load() == int64(len(s.conns))
}

// sample records what ucm holds for the listening application; it runs
// whenever ucm queues an event on its file (the file's Waker).
func (s *lstorm) sample() {
	u := s.lnode.ucm.Budget().User(stormUID)
	s.peak.events = max(s.peak.events, u.Events)
	s.peak.ids = max(s.peak.ids, u.IDs)
	s.peak.bytes = max(s.peak.bytes, s.lnode.ucm.Budget().Usage().Bytes)
	s.maxQueue = max(s.maxQueue, s.waiting())
}

// waiting is how many new connections wait for the application: events
// queued in ucm (REQs, and the few others behind them) and its backlog.
func (s *lstorm) waiting() int {
	return s.lnode.ucm.Budget().User(stormUID).Events + len(s.backlog) - s.head
}

// connect sends connection c's REQ from its sender (CREATE_ID, SEND_REQ).
func (s *lstorm) connect(c *conn) {
	st := s.senders[c.a-1]
	st.mu.Lock()
	defer st.mu.Unlock()
	id, err := st.createID(uint64(c.idx))
	if err != nil {
		s.net.errs.Add(1)
		s.fail(c)
		return
	}
	c.act = int64(id)
	c.sent = s.net.clk.Now()
	st.setEnd(id, end{c: c, active: true})
	if err := st.sendREQ(id, s.lnode, c.idx, s.cfg.Timeouts); err != nil {
		s.net.errs.Add(1)
		s.fail(c)
	}
}

// accept is the application's accept loop, one connection per tick. Paced
// (no MRA, or the CM's): GET_EVENT until a REQ is read and accepted (the
// other events on the way are handled too). Otherwise the oldest
// connection of its backlog. A connection whose peer gave up (its REP
// fails) does not count: the next one.
func (s *lstorm) accept() {
	st := s.lnode
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.paced {
		var ev abi.EventResp
		for st.readable() {
			pd, ok, err := st.getEvent(&ev)
			if err != nil {
				s.net.errs.Add(1)
				return
			}
			if !ok {
				return
			}
			if c := s.onListenerEvent(st, &ev, pd); c != nil && s.rep(st, c) {
				return
			}
		}
		return
	}
	for s.head < len(s.backlog) {
		c := s.backlog[s.head]
		s.backlog[s.head] = nil
		s.head++
		if s.head == len(s.backlog) {
			s.backlog, s.head = s.backlog[:0], 0
		}
		if c.pas >= 0 && s.rep(st, c) {
			return
		}
	}
}

// rep accepts c (SEND_REP); false if its end is gone meanwhile.
func (s *lstorm) rep(st *stack, c *conn) bool {
	if w := s.net.clk.Now().Sub(c.sent); w > s.maxWait {
		s.maxWait = w
	}
	return st.sendREP(uint32(c.pas), uint64(c.idx)) == nil
}

func (s *lstorm) fail(c *conn) { c.out.fail(&s.tally) }

func (s *lstorm) mark(c *conn, active bool) {
	c.out.established(&s.tally, active, s.net.clk.Now().Sub(s.t0))
}

// onListener is the listening application's event handling when it reads
// its events as they come (no accept rate, or an MRA of its own to send).
func (s *lstorm) onListener(st *stack, ev *abi.EventResp, pd []byte) {
	c := s.onListenerEvent(st, ev, pd)
	if c == nil {
		return
	}
	if s.cfg.AcceptRate <= 0 {
		if !s.rep(st, c) {
			s.net.errs.Add(1)
		}
		return
	}
	waiting := len(s.backlog) - s.head
	s.backlog = append(s.backlog, c)
	s.maxQueue = max(s.maxQueue, s.waiting())
	var err error
	switch {
	case s.cfg.MRA == MRADelayed:
		err = st.sendMRA(uint32(c.pas), cmcore.MRAFlagDelay|s.cfg.MRAServiceTimeout)
	case s.cfg.MRA == MRAImmediate && waiting+1 >= s.cfg.MRAQueue:
		err = st.sendMRA(uint32(c.pas), s.cfg.MRAServiceTimeout)
	}
	if err != nil {
		s.net.errs.Add(1)
	}
}

// onListenerEvent handles one event of the listening application; for a
// REQ it returns the new connection, to accept.
func (s *lstorm) onListenerEvent(st *stack, ev *abi.EventResp, pd []byte) *conn {
	c := st.endOf(ev.ID).c
	switch ev.Event {
	case abi.CMREQReceived:
		i, ok := connIndex(pd, len(s.conns))
		if !ok {
			drop(st, ev.ID)
			return nil
		}
		c = s.conns[i]
		if c.pas >= 0 {
			// A retransmitted REQ after our REP ran out of retries:
			// the old end (IDLE, maybe still in the backlog) goes.
			drop(st, uint32(c.pas))
			c.out.revive(&s.tally)
		}
		c.pas = int64(ev.ID)
		st.setEnd(ev.ID, end{c: c})
		return c
	case abi.CMRTUReceived:
		if c != nil {
			s.mark(c, false)
		}
	case abi.CMREPError, abi.CMREJReceived:
		if c != nil {
			s.fail(c)
		}
	}
	return nil
}

// onSender is a sending application: RTU on REP.
func (s *lstorm) onSender(st *stack, ev *abi.EventResp, _ []byte) {
	c := st.endOf(ev.ID).c
	if c == nil {
		return
	}
	switch ev.Event {
	case abi.CMREPReceived:
		if err := st.send(abi.CmdSendRTU, ev.ID); err != nil {
			s.net.errs.Add(1)
			return
		}
		c.actEst = true
		s.mark(c, true)
	case abi.CMMRAReceived:
		s.mraRecv.Add(1)
	case abi.CMREQError:
		s.timeouts.Add(1)
		s.fail(c)
	case abi.CMREPError, abi.CMREJReceived:
		s.fail(c)
	}
}
