package cmcore

import "strconv"

// Handler receives the events of an id. It runs with no cmcore lock held,
// one event at a time per CM, in the order the CM generated them, and must
// not block. It may call any ID method, Destroy included, even on the id
// the event is for. What it returns decides the fate of ev.ID.
type Handler func(ev *Event) Outcome

// Outcome is a Handler's verdict on ev.ID: the kernel cm_handler's return
// value, with its one errno-dependent case (-ENOMEM on a REQ) named instead
// of encoded in an error. A value other than the three below is Destroy,
// as any non-zero return was.
type Outcome uint8

const (
	// Keep leaves the id as the handler left it (a kernel handler's 0).
	Keep Outcome = iota
	// Destroy destroys ev.ID once the handler has returned, exactly as
	// ID.Destroy would (a kernel handler's non-zero return). For
	// REQ_RECEIVED that rejects the new connection with REJ 28 (consumer
	// defined), for SIDR_REQ_RECEIVED with a SIDR_REP REJECT.
	Destroy
	// DestroySilently is Destroy, except that a REQ_RECEIVED's new
	// connection, still in REQ_RCVD, goes without a REJ (a kernel handler
	// returning -ENOMEM), so that the peer's retransmitted REQ is a new
	// request that may succeed later. For any other event it is Destroy.
	DestroySilently
)

func (o Outcome) String() string {
	switch o {
	case Keep:
		return "Keep"
	case Destroy:
		return "Destroy"
	case DestroySilently:
		return "DestroySilently"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Event is one CM event. It and the slices it holds are valid only during
// the Handler call; copy what must outlive it.
type Event struct {
	Type EventType
	// ID is the id the event is about. For REQ_RECEIVED and
	// SIDR_REQ_RECEIVED it is the new id created for the request; it
	// inherited the listener's handler and context.
	ID *ID
	// Listener is the listening id for REQ_RECEIVED and SIDR_REQ_RECEIVED.
	Listener *ID
	// PrivateData is the message's whole private data area (the receiver
	// cannot know how much the sender meant).
	PrivateData []byte
	// Info is the REJ ARI, APR additional information or SIDR_REP
	// additional information, as long as the message's length field says.
	Info []byte
	// SendStatus is the ib_wc_status of *_ERROR events.
	SendStatus WCStatus

	REQ     REQEventParam     // REQ_RECEIVED
	REP     REPEventParam     // REP_RECEIVED
	REJ     REJEventParam     // REJ_RECEIVED
	MRA     MRAEventParam     // MRA_RECEIVED
	LAP     LAPEventParam     // LAP_RECEIVED
	APR     APREventParam     // APR_RECEIVED
	SIDRREQ SIDRREQEventParam // SIDR_REQ_RECEIVED
	SIDRREP SIDRREPEventParam // SIDR_REP_RECEIVED
}

// REQEventParam is ib_cm_req_event_param, already seen from the receiver's
// side: ResponderResources is the REQ's Initiator Depth and vice versa, and
// the local/remote CM response timeouts are swapped likewise.
type REQEventParam struct {
	Primary                 PathRecord
	Alternate               *PathRecord // nil when the REQ had none
	RemoteCAGUID            uint64
	RemoteQKey              uint32
	RemoteQPN               uint32
	QPType                  QPType // 0 when the transport type is unknown
	StartingPSN             uint32
	ResponderResources      uint8
	InitiatorDepth          uint8
	LocalCMResponseTimeout  uint8
	FlowControl             bool
	RemoteCMResponseTimeout uint8
	RetryCount              uint8
	RNRRetryCount           uint8
	SRQ                     bool
	Port                    uint8
	BTHPKey                 uint16 // P_Key the REQ arrived with
}

// REPEventParam is ib_cm_rep_event_param (perspective already swapped).
type REPEventParam struct {
	RemoteCAGUID       uint64
	RemoteQKey         uint32
	RemoteQPN          uint32
	StartingPSN        uint32
	ResponderResources uint8
	InitiatorDepth     uint8
	TargetACKDelay     uint8
	FailoverAccepted   uint8
	FlowControl        bool
	RNRRetryCount      uint8
	SRQ                bool
}

// REJEventParam carries the reject reason; the ARI is Event.Info.
type REJEventParam struct {
	Reason uint16
}

// MRAEventParam carries the peer's service timeout (5-bit IBTA time).
type MRAEventParam struct {
	ServiceTimeout uint8
}

// LAPEventParam carries the proposed alternate path.
type LAPEventParam struct {
	Alternate PathRecord
}

// APREventParam carries the AP status; the additional info is Event.Info.
type APREventParam struct {
	Status uint8
}

// SIDRREQEventParam is ib_cm_sidr_req_event_param.
type SIDRREQEventParam struct {
	ServiceID uint64
	PKey      uint16
	Port      uint8
	BTHPKey   uint16
}

// SIDRREPEventParam is ib_cm_sidr_rep_event_param; the info is Event.Info.
type SIDRREPEventParam struct {
	Status uint8
	QKey   uint32
	QPN    uint32
}

// queuedEvent is an event waiting for delivery. owner is whose handler
// receives it and whose destruction discards it: the listener for new
// requests (as ucm attributed them), ev.ID otherwise.
type queuedEvent struct {
	ev    *Event
	owner *ID
}
