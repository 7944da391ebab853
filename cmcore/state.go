package cmcore

import "fmt"

// State is a CM id's connection state (enum ib_cm_state). The numbers are
// ABI-visible through ucm and must not change.
type State uint8

const (
	StateIdle        State = 0
	StateListen      State = 1
	StateREQSent     State = 2
	StateREQRcvd     State = 3
	StateMRAREQSent  State = 4
	StateMRAREQRcvd  State = 5
	StateREPSent     State = 6
	StateREPRcvd     State = 7
	StateMRAREPSent  State = 8
	StateMRAREPRcvd  State = 9
	StateEstablished State = 10
	StateDREQSent    State = 11
	StateDREQRcvd    State = 12
	StateTimewait    State = 13
	StateSIDRREQSent State = 14
	StateSIDRREQRcvd State = 15
)

var stateNames = [...]string{
	"IDLE", "LISTEN", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD",
	"REP_SENT", "REP_RCVD", "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED",
	"DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "SIDR_REQ_SENT", "SIDR_REQ_RCVD",
}

// States lists every state, in number order.
func States() []State {
	out := make([]State, len(stateNames))
	for i := range out {
		out[i] = State(i)
	}
	return out
}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// LAPState is the alternate-path sub-state of an ESTABLISHED id
// (enum ib_cm_lap_state).
type LAPState uint8

const (
	LAPUninit     LAPState = 0
	LAPIdle       LAPState = 1
	LAPSent       LAPState = 2
	LAPRcvd       LAPState = 3
	LAPMRALAPSent LAPState = 4
	LAPMRALAPRcvd LAPState = 5
)

var lapNames = [...]string{"LAP_UNINIT", "LAP_IDLE", "LAP_SENT", "LAP_RCVD", "MRA_LAP_SENT", "MRA_LAP_RCVD"}

func (s LAPState) String() string {
	if int(s) < len(lapNames) {
		return lapNames[s]
	}
	return fmt.Sprintf("LAPState(%d)", uint8(s))
}

// EventType is enum ib_cm_event_type; ucm passes the numbers straight to
// userspace.
type EventType uint8

const (
	EventREQError        EventType = 0
	EventREQReceived     EventType = 1
	EventREPError        EventType = 2
	EventREPReceived     EventType = 3
	EventRTUReceived     EventType = 4
	EventUserEstablished EventType = 5
	EventDREQError       EventType = 6
	EventDREQReceived    EventType = 7
	EventDREPReceived    EventType = 8
	EventTimewaitExit    EventType = 9
	EventMRAReceived     EventType = 10
	EventREJReceived     EventType = 11
	EventLAPError        EventType = 12
	EventLAPReceived     EventType = 13
	EventAPRReceived     EventType = 14
	EventSIDRREQError    EventType = 15
	EventSIDRREQReceived EventType = 16
	EventSIDRREPReceived EventType = 17
)

var eventNames = [...]string{
	"REQ_ERROR", "REQ_RECEIVED", "REP_ERROR", "REP_RECEIVED", "RTU_RECEIVED",
	"USER_ESTABLISHED", "DREQ_ERROR", "DREQ_RECEIVED", "DREP_RECEIVED",
	"TIMEWAIT_EXIT", "MRA_RECEIVED", "REJ_RECEIVED", "LAP_ERROR", "LAP_RECEIVED",
	"APR_RECEIVED", "SIDR_REQ_ERROR", "SIDR_REQ_RECEIVED", "SIDR_REP_RECEIVED",
}

func (e EventType) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("EventType(%d)", uint8(e))
}

// QPType is enum ib_qp_type, as ucm clients pass it.
type QPType uint8

const (
	QPTypeRC     QPType = 2
	QPTypeUC     QPType = 3
	QPTypeXRCIni QPType = 9
	QPTypeXRCTgt QPType = 10
)

// WCStatus is the enum ib_wc_status reported in *_ERROR events.
type WCStatus uint32

const (
	// WCRespTimeout (IB_WC_RESP_TIMEOUT_ERR) is what a final retransmission
	// timeout reports.
	WCRespTimeout WCStatus = 20
	// WCGeneralErr (IB_WC_GENERAL_ERR) reports a send the endpoint refused.
	WCGeneralErr WCStatus = 21
)

// NotifyEvent is the event argument of Notify (enum ib_event_type values).
type NotifyEvent uint32

const (
	NotifyCommEst NotifyEvent = 4 // IB_EVENT_COMM_EST
	NotifyPathMig NotifyEvent = 6 // IB_EVENT_PATH_MIG
)

// Service ID constants (ib_cm.h).
const (
	ServiceIDAgnMask uint64 = 0xFF00000000000000 // IB_SERVICE_ID_AGN_MASK
	AssignServiceID  uint64 = 0x0200000000000000 // IB_CM_ASSIGN_SERVICE_ID
	MRAFlagDelay     uint8  = 0x80               // IB_CM_MRA_FLAG_DELAY
	remoteCMQPN             = 1
	cmQKey           uint32 = 0x80010000 // IB_QP1_QKEY
)
