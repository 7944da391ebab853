package cmcore

import (
	"sync"
	"time"

	"github.com/ucmd/ucmd/hw"
)

// MADDirection says what happened to the MAD of a MADEvent.
type MADDirection uint8

const (
	// MADSent: a first transmission the endpoint accepted.
	MADSent MADDirection = iota + 1
	// MADReceived: a received MAD the CM decoded and acted on (answered
	// or raised an event for).
	MADReceived
	// MADRetransmitted: a retransmission after a timeout (identical bytes
	// to the first send), accepted by the endpoint.
	MADRetransmitted
	// MADDropped: a received MAD the CM dropped. Reason starts with
	// "undecodable: " for one that is not a CM message cmcore decodes
	// (these are what Stats.Dropped counts), or is "ignored" for a CM
	// message that the CM neither answered nor raised an event for (no
	// id in a state that takes it: a late duplicate, a stale comm id, LAP
	// on RoCE); Stats counts those as received only.
	MADDropped
	// MADSendFailed: the endpoint refused the send (Reason: its error).
	// The MAD counts as lost: retransmission or the peer repairs it.
	// Retransmission tells a refused retransmission from a first send.
	MADSendFailed
	// MADTimedOut: a retransmitted message (REQ, REP, DREQ, LAP,
	// SIDR_REQ) ran out of retries; MAD is its last transmission and Peer
	// where it went. The id's *_ERROR event follows if the id is still in
	// the state the message belonged to. Nothing goes on the wire.
	MADTimedOut
)

var madDirNames = [...]string{
	MADSent:          "sent",
	MADReceived:      "received",
	MADRetransmitted: "retransmitted",
	MADDropped:       "dropped",
	MADSendFailed:    "send-failed",
	MADTimedOut:      "timed-out",
}

func (d MADDirection) String() string {
	if int(d) < len(madDirNames) && madDirNames[d] != "" {
		return madDirNames[d]
	}
	return "MADDirection(" + itoa(int(d)) + ")"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

// MADEvent is one CM MAD seen by the CM, given to an Observer. It, its MAD
// and Peer.GRH are valid only during the ObserveMAD call: copy what must
// outlive it.
type MADEvent struct {
	// Time is the CM's clock (Options.Clock) when the MAD was handed to
	// the endpoint, when the receive loop got it, or when the message
	// timed out; zero while the Observer is a TimeObserver that wants
	// none.
	Time   time.Time
	Device hw.Device // the CM's device
	Port   int       // port number, from 1
	Dir    MADDirection
	// MAD is the whole datagram in wire order: wire.Decode reads it.
	MAD *hw.MAD
	// Peer is the remote end: the destination of a sent, retransmitted,
	// refused or timed-out MAD, the source of a received or dropped one
	// (hw.Address: LID, remote QPN, GRH with the remote GID and the local
	// SGIDIndex).
	Peer hw.Address
	// Retransmission is set for MADRetransmitted and for a MADSendFailed
	// of a retransmission.
	Retransmission bool
	// Reason is the short cause of MADDropped and MADSendFailed.
	Reason string
}

// Observer sees every CM MAD the CM sends, receives, retransmits, drops
// or fails to send, and every final timeout (Options.Observer). ObserveMAD
// runs synchronously on the CM's send and receive paths with none of the
// CM's locks held, on whichever goroutine sends or receives (concurrently
// for different ports and ids), so it must be safe for concurrent use and
// must not block: copy what it needs and return. It may call CM and ID
// methods. A received MAD is observed before the MADs the CM sends in
// answer to it. A send is observed once the endpoint has taken it, so when
// both ends are CMs of one process, its receipt may be observed first:
// Time (taken before the send) orders them.
type Observer interface {
	ObserveMAD(ev *MADEvent)
}

// TimeObserver is an Observer that says whether it reads MADEvent.Time at
// the moment. While WantsTime is false the CM does not read its clock for
// the events, and their Time is zero: a clock read per MAD is one of the
// costs of a connection where the clock is slow (docs/perf.md), and an
// observer idle most of the time (a trace nobody runs) needs none. An
// Observer that is not a TimeObserver always gets Time.
type TimeObserver interface {
	Observer
	WantsTime() bool
}

// wantsTime reports whether o needs MADEvent.Time now.
func wantsTime(o Observer) bool {
	t, ok := o.(TimeObserver)
	return !ok || t.WantsTime()
}

// Observers is an Observer that hands each event to every element in
// order: how the daemon attaches several (trace, metrics).
type Observers []Observer

// ObserveMAD implements Observer.
func (obs Observers) ObserveMAD(ev *MADEvent) {
	for _, o := range obs {
		o.ObserveMAD(ev)
	}
}

// WantsTime implements TimeObserver: whether any element wants Time.
func (obs Observers) WantsTime() bool {
	for _, o := range obs {
		if wantsTime(o) {
			return true
		}
	}
	return false
}

// obsNow is the Time of an event observed now: the CM's clock, or zero
// while the observer reads none.
func (cm *CM) obsNow() time.Time {
	if !wantsTime(cm.obs) {
		return time.Time{}
	}
	return cm.clk.Now()
}

var madEventPool = sync.Pool{New: func() any { return new(MADEvent) }}

// observe hands one event to the observer. Callers check cm.obs != nil
// first, so with no observer a MAD costs one nil check.
func (cm *CM) observe(at time.Time, p *port, dir MADDirection, mad *hw.MAD, peer hw.Address, retx bool, reason string) {
	ev := madEventPool.Get().(*MADEvent)
	*ev = MADEvent{
		Time: at, Device: cm.dev, Port: p.num, Dir: dir,
		MAD: mad, Peer: peer, Retransmission: retx, Reason: reason,
	}
	cm.obs.ObserveMAD(ev)
	*ev = MADEvent{}
	madEventPool.Put(ev)
}

// observeRx observes a received MAD: dropped when reason says why.
func (cm *CM) observeRx(at time.Time, p *port, r *hw.Received, reason string) {
	if reason != "" {
		cm.observeReceived(at, p, MADDropped, r, reason)
		return
	}
	cm.observeReceived(at, p, MADReceived, r, "")
}

// observeReceived observes a received MAD through a pooled copy: were the
// receive loop's buffer handed out, it would escape to the heap and cost
// an allocation per MAD with no observer too.
func (cm *CM) observeReceived(at time.Time, p *port, dir MADDirection, r *hw.Received, reason string) {
	mad := madPool.Get().(*hw.MAD)
	*mad = r.MAD
	cm.observe(at, p, dir, mad, r.Src, false, reason)
	madPool.Put(mad)
}
