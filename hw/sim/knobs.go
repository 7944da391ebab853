package sim

import (
	"cmp"
	"time"

	"github.com/ucmd/ucmd/hw"
)

// Knobs are the fabric's fault-injection settings. The zero value is a
// perfect fabric: no loss, no copies, no delay, in-order delivery.
type Knobs struct {
	// Loss is the probability that a MAD is dropped in flight.
	Loss float64
	// Duplicate is the probability that a MAD not lost is delivered twice.
	// The second copy draws its own delay.
	Duplicate float64
	// Delay is the fixed one-way latency. With Delay and Jitter both zero,
	// delivery happens inside Send, on the sender's goroutine.
	Delay time.Duration
	// Jitter adds a uniform extra latency in [0, Jitter) per copy. Copies
	// whose latencies overlap may arrive out of order.
	Jitter time.Duration
	// Reorder is the probability that a MAD, sent while nothing is held on
	// its link (source port to destination port), is held back until the
	// next MAD on that link has left, so that it is overtaken. Over a
	// stream this overtakes Reorder/(1+Reorder) of the MADs.
	Reorder float64
	// HoldMax bounds how long a held MAD waits for a successor; then it
	// leaves anyway. Zero means DefaultHoldMax.
	HoldMax time.Duration
	// SendBlock makes every Send block this long (on the fabric's clock)
	// before the MAD leaves, like a RoCE umad write() while the kernel
	// resolves the peer's MAC.
	SendBlock time.Duration
	// Resolve is how long the first Send from a RoCE port to a GID blocks
	// while the "kernel" resolves the peer's MAC (about 1 s on rxe); a GID
	// no port owns fails with ETIMEDOUT after it. Resolved peers are
	// remembered per port until Fabric.FlushNeighbours.
	Resolve time.Duration
}

// DefaultHoldMax is how long a reordered MAD waits for a successor.
const DefaultHoldMax = 10 * time.Millisecond

// Verdict is a filter's decision about one MAD.
type Verdict uint8

const (
	// Pass lets the MAD continue to the random knobs.
	Pass Verdict = iota
	// Drop discards the MAD (counted as Filtered on the source port).
	Drop
	// Deliver delivers the MAD, bypassing loss, duplication and reordering
	// (delay still applies).
	Deliver
)

// Filter inspects every routed MAD before the random knobs. It runs with
// the fabric locked, so it must not call Fabric or Port methods; it may
// modify the MAD (the copy about to be delivered) to inject corruption.
type Filter func(src, dst hw.Port, mad *hw.MAD) Verdict

// Counters count MADs per port. Send-side outcomes (Sent, Duplicated,
// Reordered, Lost, Partitioned, Filtered, Unroutable) count on the source
// port; arrival outcomes (Received, NoAgent, Overflow) on the destination.
type Counters struct {
	Sent        uint64 // accepted by Send
	Received    uint64 // queued to an endpoint
	Duplicated  uint64 // extra copies made
	Reordered   uint64 // held back to be overtaken
	Lost        uint64 // dropped by the Loss knob
	Partitioned uint64 // dropped by a partition
	Filtered    uint64 // dropped by the filter
	Unroutable  uint64 // no such LID/GID/type, P_Key not in the destination table, or port not active
	NoAgent     uint64 // arrived, but no endpoint registered for its class/version/method (or the port went down)
	Overflow    uint64 // arrived, but the endpoint's receive queue was full
}

// Dropped is the number of MADs this port lost for any reason.
func (c Counters) Dropped() uint64 {
	return c.Lost + c.Partitioned + c.Filtered + c.Unroutable + c.NoAgent + c.Overflow
}

// PortID names a port in traces.
type PortID struct {
	Device string
	Port   int
}

func (a PortID) compare(b PortID) int {
	return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Port, b.Port))
}

// EventKind is what happened to a MAD in a trace.
type EventKind uint8

const (
	EventSend EventKind = iota + 1
	EventLost
	EventPartitioned
	EventFiltered
	EventUnroutable
	EventDuplicated
	EventHeld
	EventNoAgent
	EventOverflow
	EventDelivered
)

func (k EventKind) String() string {
	switch k {
	case EventSend:
		return "send"
	case EventLost:
		return "lost"
	case EventPartitioned:
		return "partitioned"
	case EventFiltered:
		return "filtered"
	case EventUnroutable:
		return "unroutable"
	case EventDuplicated:
		return "duplicated"
	case EventHeld:
		return "held"
	case EventNoAgent:
		return "no-agent"
	case EventOverflow:
		return "overflow"
	case EventDelivered:
		return "delivered"
	}
	return "EventKind(?)"
}

// Event is one step of a MAD through the fabric, reported to the trace
// hook. Events are comparable, so two runs' traces can be compared.
type Event struct {
	Kind   EventKind
	Time   time.Time
	Src    PortID
	Dst    PortID // zero when unroutable
	TID    uint64
	AttrID uint16
}
