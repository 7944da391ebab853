package cmcore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
)

// Options configure a CM. The zero value is valid.
type Options struct {
	// Clock drives retransmission and timewait timers; nil means the real
	// clock.
	Clock clock.Clock
	// CommIDOperand is XORed into every local comm ID (cm.c's
	// random_id_operand); zero picks a random one.
	CommIDOperand uint32
	// Logger receives debug logs of dropped MADs; nil discards them.
	Logger *slog.Logger
	// AutoMRA, when non-zero, is the service timeout (5-bit IBTA time) of
	// an MRA the CM sends by itself for a duplicate REQ whose connection
	// still waits for its application (REQ_RCVD): rdma_cm's delayed MRA,
	// which keeps a slow acceptor's peers from timing out. The id stays
	// in REQ_RCVD, so SendMRA, SendREP and SendREJ behave as without it.
	// Zero, the default, sends no MRA the application did not ask for,
	// as the kernel's ib_cm.
	AutoMRA uint8
	// Observer, when non-nil, sees every CM MAD sent, received,
	// retransmitted, dropped or refused and every final timeout (see
	// Observer; Observers attaches several). Nil, the default, costs a
	// nil check per MAD.
	Observer Observer
	// OnReceiveError, when non-nil, is called on a port's receive
	// goroutine once that port has stopped for an error (ReceiveError):
	// what a removed device does, which its owner may act on at once.
	// It must not block.
	OnReceiveError func(port int, err error)
}

// CM is the communication manager of one device: it owns the CM MAD agent
// of every port, the comm-ID and listen tables, and all ids created on it.
type CM struct {
	dev       hw.Device
	clk       clock.Clock
	log       *slog.Logger
	nodeGUID  uint64
	ackDelay  uint8
	autoMRA   uint8
	obs       Observer
	onRecvErr func(port int, err error)
	ports     []*port // index: port number - 1

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	started    bool
	closed     bool
	ids        commIDs
	listen     listenTable
	remoteIDs  index // keyRemoteID
	remoteQPNs index // keyRemoteQPN
	sidr       map[sidrKey]*ID
	events     []queuedEvent // undelivered from evHead on
	evHead     int
	delivering bool          // some goroutine is draining events
	waiting    int           // receivers held by throttle
	room       sync.Cond     // wakes them; L is &mu
	released   func(ctx any) // OnReleased

	stats counters
}

type port struct {
	num int
	hw  hw.Port
	ep  hw.Endpoint
	// recvErr is why the port stopped receiving (nil while it receives):
	// a removed device fails its reads, and operators need to see it.
	recvErr atomic.Pointer[error]
}

type sidrKey struct {
	reqID uint32
	lid   uint16
	gid   hw.GID
}

// New creates the CM for dev. Nothing is sent or received until Start.
func New(dev hw.Device, opts Options) *CM {
	cm := &CM{
		dev:        dev,
		clk:        opts.Clock,
		log:        opts.Logger,
		autoMRA:    opts.AutoMRA & 0x1F,
		obs:        opts.Observer,
		onRecvErr:  opts.OnReceiveError,
		nodeGUID:   dev.NodeGUID(),
		ackDelay:   dev.LocalCAAckDelay(),
		remoteIDs:  newIndex(keyRemoteID),
		remoteQPNs: newIndex(keyRemoteQPN),
		sidr:       make(map[sidrKey]*ID),
	}
	cm.room.L = &cm.mu
	if cm.clk == nil {
		cm.clk = clock.Real{}
	}
	if cm.log == nil {
		cm.log = slog.New(slog.DiscardHandler)
	}
	op := opts.CommIDOperand
	if op == 0 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		op = binary.LittleEndian.Uint32(b[:])
	}
	cm.ids = newCommIDs(op)
	for _, p := range dev.Ports() {
		cm.ports = append(cm.ports, &port{num: p.Num(), hw: p})
	}
	return cm
}

// Start registers the CM agent (class 0x07 version 2, method SEND) on every
// port and starts receiving. It fails if any port refuses, typically
// because the kernel's ib_cm owns the class (hw.ErrCMClassInUse).
func (cm *CM) Start() error {
	cm.mu.Lock()
	if cm.started || cm.closed {
		cm.mu.Unlock()
		return errors.New("cmcore: Start called twice or after Close")
	}
	cm.started = true
	cm.mu.Unlock()
	reg := hw.Registration{MgmtClass: wire.MgmtClassCM, ClassVersion: wire.ClassVersion, Methods: []uint8{wire.MethodSend}}
	for i, p := range cm.ports {
		ep, err := p.hw.OpenMAD(reg)
		if err != nil {
			for _, q := range cm.ports[:i] {
				q.ep.Close()
			}
			return fmt.Errorf("cmcore: %s port %d: open CM agent: %w", cm.dev.Name(), p.num, err)
		}
		p.ep = ep
	}
	ctx, cancel := context.WithCancel(context.Background())
	cm.cancel = cancel
	for _, p := range cm.ports {
		cm.wg.Add(1)
		go cm.recvLoop(ctx, p)
	}
	return nil
}

// Close stops the CM: it closes the endpoints, waits for the receivers,
// and stops every timer. Ids stay usable as objects but send nothing and
// get no more events; Destroy on them is still safe. Close waits for the
// receive goroutines, so it must not be called from a Handler.
func (cm *CM) Close() error {
	cm.mu.Lock()
	if cm.closed {
		cm.mu.Unlock()
		return nil
	}
	cm.closed = true
	var lingering []any // contexts owed a released call
	for id := range cm.ids.byID.all() {
		id.cancelMsg()
		if id.twTimer != nil {
			id.twTimer.Stop()
			id.twTimer = nil
			if id.destroyed && id.lingers && cm.released != nil {
				lingering = append(lingering, id.context)
			}
		}
	}
	cm.events, cm.evHead = nil, 0
	cm.room.Broadcast()
	released := cm.released
	cm.mu.Unlock()
	for _, ctx := range lingering {
		released(ctx)
	}
	if cm.cancel != nil {
		cm.cancel()
	}
	var errs []error
	for _, p := range cm.ports {
		if p.ep != nil {
			if err := p.ep.Close(); err != nil && !errors.Is(err, hw.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	cm.wg.Wait()
	return errors.Join(errs...)
}

// Device returns the device the CM runs on.
func (cm *CM) Device() hw.Device { return cm.dev }

// Count returns how many ids exist (including destroyed ones whose comm ID
// is held until their timewait ends) and how many events are queued.
// Tests use it to check for leaks.
func (cm *CM) Count() (ids, events int) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return cm.ids.byID.len(), cm.backlog()
}

func (cm *CM) recvLoop(ctx context.Context, p *port) {
	defer cm.wg.Done()
	if d, ok := p.ep.(hw.Deliverer); ok {
		// MADs are handled on the endpoint's reading goroutine; this loop
		// takes what was queued before, then waits for the end.
		d.Deliver(func(r *hw.Received) { cm.handleMAD(p, r) })
	}
	for {
		r, err := p.ep.Recv(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, hw.ErrClosed) {
				// A copy declared here: &err itself would move the
				// loop's err to the heap, one allocation per MAD.
				stopped := err
				p.recvErr.Store(&stopped)
				cm.log.Warn("cmcore: receive failed, port stops", "port", p.num, "err", err)
				if cm.onRecvErr != nil {
					cm.onRecvErr(p.num, err)
				}
			}
			return
		}
		cm.handleMAD(p, &r)
	}
}

// ReceiveError reports why port num stopped receiving MADs: nil while it
// receives, after a shutdown, and for a port the CM does not have. A
// stopped port neither answers nor completes anything, so its ids time out.
func (cm *CM) ReceiveError(num uint8) error {
	p := cm.portByNum(num)
	if p == nil {
		return nil
	}
	if e := p.recvErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Endpoint is the MAD endpoint of port num (nil if there is no such
// port), for its backend's own counters.
func (cm *CM) Endpoint(num uint8) hw.Endpoint {
	if p := cm.portByNum(num); p != nil {
		return p.ep
	}
	return nil
}

// Stopped reports whether every port has stopped receiving (see
// ReceiveError): what a device's removal does to its CM.
func (cm *CM) Stopped() bool {
	for _, p := range cm.ports {
		if p.recvErr.Load() == nil {
			return false
		}
	}
	return len(cm.ports) > 0
}

func (cm *CM) portByNum(n uint8) *port {
	if n == 0 || int(n) > len(cm.ports) {
		return nil
	}
	return cm.ports[n-1]
}

// outMAD is one MAD to send once the CM lock is released. pooled MADs go
// back to madPool after the send (endpoints do not keep them); retx marks
// a retransmission (for the Observer).
type outMAD struct {
	p      *port
	dst    hw.Address
	mad    *hw.MAD
	pooled bool
	retx   bool
	msg    *outMsg // the retransmitted message this sends, whose wait starts when the send returns
}

// txn collects what a locked section decided to send, so the sends (which
// may block on RoCE) and event delivery happen without the lock. It lives
// on the caller's stack: at most a few MADs per step.
type txn struct {
	n    int
	out  [3]outMAD
	more []outMAD
}

func (t *txn) send(o outMAD) {
	if t.n < len(t.out) {
		t.out[t.n] = o
		t.n++
		return
	}
	t.more = append(t.more, o)
}

var madPool = sync.Pool{New: func() any { return new(hw.MAD) }}

// transmit sends what t collected. Called without cm.mu.
func (cm *CM) transmit(t *txn) {
	for i := range t.n {
		cm.transmit1(&t.out[i])
	}
	for i := range t.more {
		cm.transmit1(&t.more[i])
	}
}

func (cm *CM) transmit1(o *outMAD) {
	if o.p.ep != nil {
		cm.stats.sent.Add(1)
		var at time.Time
		if cm.obs != nil {
			at = cm.obsNow() // when the MAD was handed over
		}
		err := o.p.ep.Send(bgctx, o.dst, o.mad)
		if err != nil {
			cm.stats.sendErrors.Add(1)
			// Lost like any MAD on the fabric: retransmission or the
			// peer's retry repairs it, final timeouts report it.
			cm.log.Debug("cmcore: send failed", "port", o.p.num, "err", err)
		}
		if cm.obs != nil {
			switch {
			case err != nil:
				cm.observe(at, o.p, MADSendFailed, o.mad, o.dst, o.retx, err.Error())
			case o.retx:
				cm.observe(at, o.p, MADRetransmitted, o.mad, o.dst, true, "")
			default:
				cm.observe(at, o.p, MADSent, o.mad, o.dst, false, "")
			}
		}
	}
	if o.msg != nil {
		cm.sendReturned(o.msg)
	}
	if o.pooled {
		madPool.Put(o.mad)
	}
	o.mad = nil
}

// unlock releases cm.mu, then sends and delivers what t collected.
func (cm *CM) unlock(t *txn) {
	deliver, closed := cm.release()
	if !closed {
		cm.transmit(t)
	}
	if deliver {
		cm.deliver()
	}
}

// release releases cm.mu and says whether this goroutine is to deliver
// the queued events and whether the CM is closed (nothing to send).
func (cm *CM) release() (deliver, closed bool) {
	deliver = cm.evHead < len(cm.events) && !cm.delivering
	closed = cm.closed
	cm.mu.Unlock()
	return deliver, closed
}

// encode builds a MAD, from the pool unless it is kept for retransmission.
// Encoding failures mean a cmcore bug (user input is validated first), so
// they are logged and the MAD dropped.
func (cm *CM) encode(tid uint64, m wire.Message, keep bool) *hw.MAD {
	var mad *hw.MAD
	if keep {
		mad = new(hw.MAD)
	} else {
		mad = madPool.Get().(*hw.MAD)
	}
	if err := wire.Encode(mad, tid, m); err != nil {
		cm.log.Error("cmcore: encode failed", "attr", m.AttrID(), "err", err)
		return nil
	}
	return mad
}

// sendMsg queues a one-shot (not retransmitted) message.
func (cm *CM) sendMsg(t *txn, p *port, dst hw.Address, tid uint64, m wire.Message) {
	if mad := cm.encode(tid, m, false); mad != nil && p != nil {
		t.send(outMAD{p: p, dst: dst, mad: mad, pooled: true})
	}
}
