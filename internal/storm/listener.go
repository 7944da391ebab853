package storm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ucmd/ucmd/cmcore"
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
}

// ListenerResult is what a listener storm measured.
type ListenerResult struct {
	Config      ListenerConfig
	Established int           // on both sides
	Timeouts    int           // REQ_ERROR at the active side (REQ out of retries)
	Failed      int           // timed out, rejected, or REP out of retries
	LastEst     time.Duration // simulated, from the first REQ
	WallTime    time.Duration
	MaxQueue    int           // new connections waiting for the application at most
	MaxWait     time.Duration // longest a connection waited in the queue

	REQs, REQRetransmits uint64
	MRAs, MRAsReceived   uint64 // MADs sent; MRA_RECEIVED events at the senders
	REPs, REJs           uint64
	Lost, Overflow       uint64

	// HeapPerQueued is the live heap per waiting connection (both ends,
	// as both run here, and the established ones' share), measured when
	// the storm's last REQ is queued.
	HeapPerQueued float64
	// UCMMaxEvents is ucm's per-file queue limit (the listener's file
	// would queue MaxQueue REQ events in it).
	UCMMaxEvents int

	LeakedIDs, LeakedEvents, LeakedTimers int
}

type lconn struct {
	idx    int
	act    *cmcore.ID
	pas    *cmcore.ID // one goroutine at a time (the pump)
	queued time.Time
	out    outcome
}

type lstorm struct {
	cfg     ListenerConfig
	net     *simNet
	t0      time.Time
	lnode   *node
	senders []*node
	conns   []*lconn

	mu       sync.Mutex // the application's accept queue
	queue    []*lconn
	head     int
	maxQueue int
	maxWait  time.Duration
	measure  bool // take the heap now: the last REQ is queued
	measured int  // connections waiting then

	tally
	timeouts, mraRecv, errs atomic.Int64
}

// RunListener runs one listener storm.
func RunListener(ctx context.Context, cfg ListenerConfig) (*ListenerResult, error) {
	if cfg.Requests <= 0 {
		cfg.Requests = 10_000
	}
	if cfg.Within <= 0 {
		cfg.Within = 10 * time.Millisecond
	}
	if cfg.Senders <= 0 {
		cfg.Senders = 100
	}
	if cfg.MRA == "" {
		cfg.MRA = MRAOff
	}
	switch cfg.MRA {
	case MRAOff, MRADelayed, MRAImmediate, MRACM:
	default:
		return nil, fmt.Errorf("storm: unknown MRA mode %q (want off, delayed, immediate or cm)", cfg.MRA)
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
	s.net = newSimNet(cfg.Seed, sim.Knobs{Delay: cfg.Latency, Jitter: cfg.Jitter, Loss: cfg.Loss}, cfg.QueueLen)
	var all []*node
	defer func() {
		for _, nd := range all {
			nd.cm.Close()
		}
	}()
	for i := range cfg.Senders + 1 {
		s.net.autoMRA = 0
		if i == 0 && cfg.MRA == MRACM {
			s.net.autoMRA = cfg.MRAServiceTimeout
		}
		cm, dev, err := s.net.addCM(fmt.Sprintf("n%d", i))
		if err != nil {
			return nil, err
		}
		a, err := dev.Port(1).Attr()
		if err != nil {
			return nil, err
		}
		nd := &node{i: i, dev: dev, cm: cm, gid: a.GIDs[0].GID, lid: a.LID}
		all = append(all, nd)
	}
	s.lnode, s.senders = all[0], all[1:]
	l := s.lnode.cm.CreateID(s.handle)
	if err := l.Listen(serviceID, 0); err != nil {
		return nil, err
	}
	for i := range cfg.Requests {
		s.conns = append(s.conns, &lconn{idx: i})
	}
	s.t0 = s.net.clk.Now()
	res := &ListenerResult{Config: cfg, UCMMaxEvents: ucm.DefaultMaxEvents}
	base := liveHeap()
	var peakHeap uint64

	wall := time.Now()
	step := cfg.Within / time.Duration(cfg.Requests)
	for i, c := range s.conns {
		s.net.clk.AfterFunc(time.Duration(i)*step, func() { s.connect(c) })
	}
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
		s.mu.Lock()
		measure := s.measure
		s.measure = false
		s.mu.Unlock()
		if measure {
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

	// Tear down: destroy every id, run the clock dry, nothing may remain
	// but the listener.
	for _, c := range s.conns {
		for _, id := range []*cmcore.ID{c.act, c.pas} {
			if id != nil {
				id.Destroy()
			}
		}
	}
	if _, err := s.net.runUntil(ctx, s.net.clk.Now().Add(cfg.Deadline), nil); err != nil {
		return res, err
	}
	for i, nd := range all {
		ids, evs := nd.cm.Count()
		if i == 0 {
			ids-- // the listener
		}
		res.LeakedIDs += ids
		res.LeakedEvents += evs
	}
	res.LeakedTimers = s.net.pending()
	if e := s.errs.Load(); e > 0 {
		return res, fmt.Errorf("storm: %d CM calls failed", e)
	}
	if res.LeakedIDs != 0 || res.LeakedEvents != 0 || res.LeakedTimers != 0 {
		return res, fmt.Errorf("storm: leaked %d ids, %d events, %d timers", res.LeakedIDs, res.LeakedEvents, res.LeakedTimers)
	}
	return res, nil
}

func (s *lstorm) done() bool {
	return s.established.Load()+s.failed.Load() == int64(len(s.conns))
}

// connect sends connection c's REQ from its sender. Driver goroutine.
func (s *lstorm) connect(c *lconn) {
	nd := s.senders[c.idx%len(s.senders)]
	to := s.cfg.Timeouts
	c.act = nd.cm.CreateID(s.handle)
	c.act.SetContext(c)
	var pd [4]byte
	binary.BigEndian.PutUint32(pd[:], uint32(c.idx))
	err := c.act.SendREQ(&cmcore.REQParams{
		Primary: &cmcore.PathRecord{
			SGID: nd.gid, DGID: s.lnode.gid, SLID: nd.lid, DLID: s.lnode.lid,
			PKey: 0xffff, MTU: 4, Rate: 3, PacketLifeTime: to.PacketLifeTime, Reversible: true,
		},
		ServiceID: serviceID, QPType: cmcore.QPTypeRC, QPN: nd.qpn.Add(1), StartingPSN: 1,
		RemoteCMResponseTimeout: to.RemoteCMResponseTimeout, LocalCMResponseTimeout: to.LocalCMResponseTimeout,
		MaxCMRetries: to.MaxCMRetries, RetryCount: 7, RNRRetryCount: 7, PrivateData: pd[:],
	})
	if err != nil {
		s.errs.Add(1)
		s.fail(c)
	}
}

// accept takes the oldest waiting connection and sends its REP, as an
// application's accept after GET_EVENT. Driver goroutine (a timer).
func (s *lstorm) accept() {
	for {
		s.mu.Lock()
		if s.head == len(s.queue) {
			s.queue, s.head = s.queue[:0], 0
			s.mu.Unlock()
			return
		}
		c := s.queue[s.head]
		s.queue[s.head] = nil
		s.head++
		if w := s.net.clk.Now().Sub(c.queued); w > s.maxWait {
			s.maxWait = w
		}
		s.mu.Unlock()
		if s.rep(c) {
			return
		}
		// Its peer gave up and it is gone: the next one.
	}
}

func (s *lstorm) rep(c *lconn) bool {
	err := c.pas.SendREP(&cmcore.REPParams{QPN: s.lnode.qpn.Add(1), StartingPSN: 1})
	return err == nil
}

func (s *lstorm) fail(c *lconn) { c.out.fail(&s.tally) }

func (s *lstorm) mark(c *lconn, active bool) {
	c.out.established(&s.tally, active, s.net.clk.Now().Sub(s.t0))
}

func (s *lstorm) handle(ev *cmcore.Event) cmcore.Outcome {
	c, _ := ev.ID.Context().(*lconn)
	switch ev.Type {
	case evREQReceived:
		i, ok := connIndex(ev.PrivateData, len(s.conns))
		if !ok {
			return cmcore.Destroy
		}
		c = s.conns[i]
		ev.ID.SetContext(c)
		if c.pas != nil {
			// A retransmitted REQ after our REP ran out of retries:
			// the old end (IDLE, maybe still queued) goes.
			c.pas.Destroy()
			c.out.revive(&s.tally)
		}
		c.pas = ev.ID
		if s.cfg.AcceptRate <= 0 {
			if !s.rep(c) {
				s.errs.Add(1)
			}
			return cmcore.Keep
		}
		s.mu.Lock()
		waiting := len(s.queue) - s.head
		c.queued = s.net.clk.Now()
		s.queue = append(s.queue, c)
		s.maxQueue = max(s.maxQueue, waiting+1)
		if c.idx == len(s.conns)-1 {
			// The storm's last REQ: the queue is about its longest.
			s.measure, s.measured = true, waiting+1
		}
		s.mu.Unlock()
		var err error
		switch {
		case s.cfg.MRA == MRADelayed:
			err = ev.ID.SendMRA(cmcore.MRAFlagDelay|s.cfg.MRAServiceTimeout, nil)
		case s.cfg.MRA == MRAImmediate && waiting+1 >= s.cfg.MRAQueue:
			err = ev.ID.SendMRA(s.cfg.MRAServiceTimeout, nil)
		}
		if err != nil {
			s.errs.Add(1)
		}
	case evREPReceived:
		if err := ev.ID.SendRTU(nil); err != nil {
			s.errs.Add(1)
			return cmcore.Keep
		}
		s.mark(c, true)
	case evRTUReceived:
		s.mark(c, false)
	case evMRAReceived:
		s.mraRecv.Add(1)
	case evREQError:
		s.timeouts.Add(1)
		s.fail(c)
	case evREPError, evREJReceived:
		if c != nil {
			s.fail(c)
		}
	}
	return cmcore.Keep
}
