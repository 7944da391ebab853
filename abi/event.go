package abi

import (
	"fmt"
	"strings"
)

// Sizes of ib_ucm_event_resp and its union members.
const (
	EventRespSize        = 192
	EventUnionOffset     = 24 // offsetof(struct ib_ucm_event_resp, u)
	EventUnionSize       = 168
	REQEventRespSize     = 168
	REPEventRespSize     = 32
	REJEventRespSize     = 4
	MRAEventRespSize     = 4
	LAPEventRespSize     = 64
	APREventRespSize     = 4
	SIDRREQEventRespSize = 4
	SIDRREPEventRespSize = 12
)

// CMEvent is enum ib_cm_event_type, the event field of an EventResp.
// ucm passed the CM's numbers straight through.
type CMEvent uint32

const (
	CMREQError        CMEvent = 0  // IB_CM_REQ_ERROR
	CMREQReceived     CMEvent = 1  // IB_CM_REQ_RECEIVED
	CMREPError        CMEvent = 2  // IB_CM_REP_ERROR
	CMREPReceived     CMEvent = 3  // IB_CM_REP_RECEIVED
	CMRTUReceived     CMEvent = 4  // IB_CM_RTU_RECEIVED
	CMUserEstablished CMEvent = 5  // IB_CM_USER_ESTABLISHED
	CMDREQError       CMEvent = 6  // IB_CM_DREQ_ERROR
	CMDREQReceived    CMEvent = 7  // IB_CM_DREQ_RECEIVED
	CMDREPReceived    CMEvent = 8  // IB_CM_DREP_RECEIVED
	CMTimewaitExit    CMEvent = 9  // IB_CM_TIMEWAIT_EXIT
	CMMRAReceived     CMEvent = 10 // IB_CM_MRA_RECEIVED
	CMREJReceived     CMEvent = 11 // IB_CM_REJ_RECEIVED
	CMLAPError        CMEvent = 12 // IB_CM_LAP_ERROR
	CMLAPReceived     CMEvent = 13 // IB_CM_LAP_RECEIVED
	CMAPRReceived     CMEvent = 14 // IB_CM_APR_RECEIVED
	CMSIDRREQError    CMEvent = 15 // IB_CM_SIDR_REQ_ERROR
	CMSIDRREQReceived CMEvent = 16 // IB_CM_SIDR_REQ_RECEIVED
	CMSIDRREPReceived CMEvent = 17 // IB_CM_SIDR_REP_RECEIVED

	// NumCMEvents is the number of event types.
	NumCMEvents = 18
)

var cmEventInfo = [NumCMEvents]struct {
	name string
	data int // private data bytes delivered (the CM message's whole area)
	info int // maximum info bytes delivered
}{
	CMREQError:        {"REQ_ERROR", 0, 0},
	CMREQReceived:     {"REQ_RECEIVED", MaxREQPrivateData, 0},
	CMREPError:        {"REP_ERROR", 0, 0},
	CMREPReceived:     {"REP_RECEIVED", MaxREPPrivateData, 0},
	CMRTUReceived:     {"RTU_RECEIVED", MaxRTUPrivateData, 0},
	CMUserEstablished: {"USER_ESTABLISHED", 0, 0},
	CMDREQError:       {"DREQ_ERROR", 0, 0},
	CMDREQReceived:    {"DREQ_RECEIVED", MaxDREQPrivateData, 0},
	CMDREPReceived:    {"DREP_RECEIVED", MaxDREPPrivateData, 0},
	CMTimewaitExit:    {"TIMEWAIT_EXIT", 0, 0},
	CMMRAReceived:     {"MRA_RECEIVED", MaxMRAPrivateData, 0},
	CMREJReceived:     {"REJ_RECEIVED", MaxREJPrivateData, MaxREJARI},
	CMLAPError:        {"LAP_ERROR", 0, 0},
	CMLAPReceived:     {"LAP_RECEIVED", MaxLAPPrivateData, 0},
	CMAPRReceived:     {"APR_RECEIVED", MaxAPRPrivateData, MaxAPRInfo},
	CMSIDRREQError:    {"SIDR_REQ_ERROR", 0, 0},
	CMSIDRREQReceived: {"SIDR_REQ_RECEIVED", MaxSIDRREQPrivateData, 0},
	CMSIDRREPReceived: {"SIDR_REP_RECEIVED", MaxSIDRREPPrivateData, MaxSIDRREPInfo},
}

// String returns the kernel's name without the IB_CM_ prefix.
func (e CMEvent) String() string {
	if e >= NumCMEvents {
		return fmt.Sprintf("CMEvent(%d)", uint32(e))
	}
	return cmEventInfo[e].name
}

// PrivateDataLen is the number of private-data bytes an event of this type
// delivers to the data buffer: always the whole private-data area of the CM
// message (what the peer meant to send is not known), 0 for events without.
func (e CMEvent) PrivateDataLen() int {
	if e >= NumCMEvents {
		return 0
	}
	return cmEventInfo[e].data
}

// MaxInfoLen is the most info bytes (REJ ARI, APR or SIDR_REP additional
// info) an event of this type can deliver; the actual length varies and the
// ABI never reports it.
func (e CMEvent) MaxInfoLen() int {
	if e >= NumCMEvents {
		return 0
	}
	return cmEventInfo[e].info
}

// IBEvent is enum ib_event_type, of which NOTIFY accepts two values.
type IBEvent uint32

const (
	IBEventCommEst IBEvent = 4 // IB_EVENT_COMM_EST
	IBEventPathMig IBEvent = 6 // IB_EVENT_PATH_MIG
)

func (e IBEvent) String() string {
	switch e {
	case IBEventCommEst:
		return "COMM_EST"
	case IBEventPathMig:
		return "PATH_MIG"
	}
	return fmt.Sprintf("IBEvent(%d)", uint32(e))
}

// Present is the IB_UCM_PRES_* bit set of an EventResp.
type Present uint32

const (
	PresData      Present = 0x01 // IB_UCM_PRES_DATA: private data copied to data
	PresInfo      Present = 0x02 // IB_UCM_PRES_INFO: ARI/info copied to info
	PresPrimary   Present = 0x04 // IB_UCM_PRES_PRIMARY: primary path in the union
	PresAlternate Present = 0x08 // IB_UCM_PRES_ALTERNATE: alternate path in the union
)

func (p Present) String() string {
	if p == 0 {
		return "0"
	}
	var parts []string
	for _, f := range []struct {
		bit  Present
		name string
	}{{PresData, "DATA"}, {PresInfo, "INFO"}, {PresPrimary, "PRIMARY"}, {PresAlternate, "ALTERNATE"}} {
		if p&f.bit != 0 {
			parts = append(parts, f.name)
			p &^= f.bit
		}
	}
	if p != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(p)))
	}
	return strings.Join(parts, "|")
}

// EventResp is struct ib_ucm_event_resp, the GET_EVENT response.
type EventResp struct {
	UID     uint64     // @0 cookie of the id the event is queued on (the listener for REQ)
	ID      uint32     // @8 that id; for REQ/SIDR_REQ the new connection's id
	Event   CMEvent    // @12
	Present Present    // @16
	U       EventUnion // @24 the member Event selects
}

func (*EventResp) Size() int { return EventRespSize }

func (r *EventResp) Encode(b []byte) {
	b = fit(b, EventRespSize)
	ne.PutUint64(b[0:], r.UID)
	ne.PutUint32(b[8:], r.ID)
	ne.PutUint32(b[12:], uint32(r.Event))
	ne.PutUint32(b[16:], uint32(r.Present))
	ne.PutUint32(b[20:], 0)
	copy(b[EventUnionOffset:], r.U[:])
}

func (r *EventResp) Decode(b []byte) {
	var w [EventRespSize]byte
	copy(w[:], b)
	r.UID = ne.Uint64(w[0:])
	r.ID = ne.Uint32(w[8:])
	r.Event = CMEvent(ne.Uint32(w[12:]))
	r.Present = Present(ne.Uint32(w[16:]))
	copy(r.U[:], w[EventUnionOffset:])
}

// EventUnion is the union u of ib_ucm_event_resp in wire form. Each setter
// zeroes the whole union before writing its member, as the kernel's zeroed
// event allocation did, so no bytes of an earlier member leak out.
type EventUnion [EventUnionSize]byte

// REQ reads req_resp (REQ_RECEIVED).
func (u *EventUnion) REQ() (m REQEventResp) { m.Decode(u[:]); return m }

// SetREQ writes req_resp.
func (u *EventUnion) SetREQ(m REQEventResp) { clear(u[:]); m.Encode(u[:]) }

// REP reads rep_resp (REP_RECEIVED).
func (u *EventUnion) REP() (m REPEventResp) { m.Decode(u[:]); return m }

// SetREP writes rep_resp.
func (u *EventUnion) SetREP(m REPEventResp) { clear(u[:]); m.Encode(u[:]) }

// REJ reads rej_resp (REJ_RECEIVED).
func (u *EventUnion) REJ() (m REJEventResp) { m.Decode(u[:]); return m }

// SetREJ writes rej_resp.
func (u *EventUnion) SetREJ(m REJEventResp) { clear(u[:]); m.Encode(u[:]) }

// MRA reads mra_resp (MRA_RECEIVED).
func (u *EventUnion) MRA() (m MRAEventResp) { m.Decode(u[:]); return m }

// SetMRA writes mra_resp.
func (u *EventUnion) SetMRA(m MRAEventResp) { clear(u[:]); m.Encode(u[:]) }

// LAP reads lap_resp (LAP_RECEIVED).
func (u *EventUnion) LAP() (m LAPEventResp) { m.Decode(u[:]); return m }

// SetLAP writes lap_resp.
func (u *EventUnion) SetLAP(m LAPEventResp) { clear(u[:]); m.Encode(u[:]) }

// APR reads apr_resp (APR_RECEIVED).
func (u *EventUnion) APR() (m APREventResp) { m.Decode(u[:]); return m }

// SetAPR writes apr_resp.
func (u *EventUnion) SetAPR(m APREventResp) { clear(u[:]); m.Encode(u[:]) }

// SIDRREQ reads sidr_req_resp (SIDR_REQ_RECEIVED).
func (u *EventUnion) SIDRREQ() (m SIDRREQEventResp) { m.Decode(u[:]); return m }

// SetSIDRREQ writes sidr_req_resp.
func (u *EventUnion) SetSIDRREQ(m SIDRREQEventResp) { clear(u[:]); m.Encode(u[:]) }

// SIDRREP reads sidr_rep_resp (SIDR_REP_RECEIVED).
func (u *EventUnion) SIDRREP() (m SIDRREPEventResp) { m.Decode(u[:]); return m }

// SetSIDRREP writes sidr_rep_resp.
func (u *EventUnion) SetSIDRREP(m SIDRREPEventResp) { clear(u[:]); m.Encode(u[:]) }

// SendStatus reads send_status (enum ib_wc_status), the member of every
// event without a payload of its own (the *_ERROR events, RTU, DREQ, …).
func (u *EventUnion) SendStatus() uint32 { return ne.Uint32(u[0:]) }

// SetSendStatus writes send_status.
func (u *EventUnion) SetSendStatus(s uint32) { clear(u[:]); ne.PutUint32(u[0:], s) }

// REQEventResp is struct ib_ucm_req_event_resp. The kernel has already
// turned ResponderResources and InitiatorDepth to the local point of view.
type REQEventResp struct {
	PrimaryPath             PathRec // @0
	AlternatePath           PathRec // @64, valid with PresAlternate
	RemoteCAGUID            uint64  // @128 __be64
	RemoteQKey              uint32  // @136
	RemoteQPN               uint32  // @140
	QPType                  QPType  // @144
	StartingPSN             uint32  // @148
	ResponderResources      uint8   // @152
	InitiatorDepth          uint8   // @153
	LocalCMResponseTimeout  uint8   // @154
	FlowControl             uint8   // @155
	RemoteCMResponseTimeout uint8   // @156
	RetryCount              uint8   // @157
	RNRRetryCount           uint8   // @158
	SRQ                     uint8   // @159
	Port                    uint8   // @160
}

func (*REQEventResp) Size() int { return REQEventRespSize }

func (m *REQEventResp) Encode(b []byte) {
	b = fit(b, REQEventRespSize)
	m.PrimaryPath.Encode(b[0:64])
	m.AlternatePath.Encode(b[64:128])
	be.PutUint64(b[128:], m.RemoteCAGUID)
	ne.PutUint32(b[136:], m.RemoteQKey)
	ne.PutUint32(b[140:], m.RemoteQPN)
	ne.PutUint32(b[144:], uint32(m.QPType))
	ne.PutUint32(b[148:], m.StartingPSN)
	b[152] = m.ResponderResources
	b[153] = m.InitiatorDepth
	b[154] = m.LocalCMResponseTimeout
	b[155] = m.FlowControl
	b[156] = m.RemoteCMResponseTimeout
	b[157] = m.RetryCount
	b[158] = m.RNRRetryCount
	b[159] = m.SRQ
	b[160] = m.Port
	clear(b[161:REQEventRespSize])
}

func (m *REQEventResp) Decode(b []byte) {
	var w [REQEventRespSize]byte
	copy(w[:], b)
	m.PrimaryPath.Decode(w[0:64])
	m.AlternatePath.Decode(w[64:128])
	m.RemoteCAGUID = be.Uint64(w[128:])
	m.RemoteQKey = ne.Uint32(w[136:])
	m.RemoteQPN = ne.Uint32(w[140:])
	m.QPType = QPType(ne.Uint32(w[144:]))
	m.StartingPSN = ne.Uint32(w[148:])
	m.ResponderResources = w[152]
	m.InitiatorDepth = w[153]
	m.LocalCMResponseTimeout = w[154]
	m.FlowControl = w[155]
	m.RemoteCMResponseTimeout = w[156]
	m.RetryCount = w[157]
	m.RNRRetryCount = w[158]
	m.SRQ = w[159]
	m.Port = w[160]
}

// REPEventResp is struct ib_ucm_rep_event_resp.
type REPEventResp struct {
	RemoteCAGUID       uint64 // @0 __be64
	RemoteQKey         uint32 // @8
	RemoteQPN          uint32 // @12
	StartingPSN        uint32 // @16
	ResponderResources uint8  // @20
	InitiatorDepth     uint8  // @21
	TargetAckDelay     uint8  // @22
	FailoverAccepted   uint8  // @23
	FlowControl        uint8  // @24
	RNRRetryCount      uint8  // @25
	SRQ                uint8  // @26
}

func (*REPEventResp) Size() int { return REPEventRespSize }

func (m *REPEventResp) Encode(b []byte) {
	b = fit(b, REPEventRespSize)
	be.PutUint64(b[0:], m.RemoteCAGUID)
	ne.PutUint32(b[8:], m.RemoteQKey)
	ne.PutUint32(b[12:], m.RemoteQPN)
	ne.PutUint32(b[16:], m.StartingPSN)
	b[20] = m.ResponderResources
	b[21] = m.InitiatorDepth
	b[22] = m.TargetAckDelay
	b[23] = m.FailoverAccepted
	b[24] = m.FlowControl
	b[25] = m.RNRRetryCount
	b[26] = m.SRQ
	clear(b[27:REPEventRespSize])
}

func (m *REPEventResp) Decode(b []byte) {
	var w [REPEventRespSize]byte
	copy(w[:], b)
	m.RemoteCAGUID = be.Uint64(w[0:])
	m.RemoteQKey = ne.Uint32(w[8:])
	m.RemoteQPN = ne.Uint32(w[12:])
	m.StartingPSN = ne.Uint32(w[16:])
	m.ResponderResources = w[20]
	m.InitiatorDepth = w[21]
	m.TargetAckDelay = w[22]
	m.FailoverAccepted = w[23]
	m.FlowControl = w[24]
	m.RNRRetryCount = w[25]
	m.SRQ = w[26]
}

// REJEventResp is struct ib_ucm_rej_event_resp; the ARI goes to the info buffer.
type REJEventResp struct {
	Reason uint32 // @0 REJ reason code
}

func (*REJEventResp) Size() int { return REJEventRespSize }

func (m *REJEventResp) Encode(b []byte) {
	ne.PutUint32(fit(b, REJEventRespSize), m.Reason)
}

func (m *REJEventResp) Decode(b []byte) {
	var w [REJEventRespSize]byte
	copy(w[:], b)
	m.Reason = ne.Uint32(w[:])
}

// MRAEventResp is struct ib_ucm_mra_event_resp.
type MRAEventResp struct {
	Timeout uint8 // @0 service timeout
}

func (*MRAEventResp) Size() int { return MRAEventRespSize }

func (m *MRAEventResp) Encode(b []byte) {
	b = fit(b, MRAEventRespSize)
	clear(b)
	b[0] = m.Timeout
}

func (m *MRAEventResp) Decode(b []byte) {
	var w [MRAEventRespSize]byte
	copy(w[:], b)
	m.Timeout = w[0]
}

// LAPEventResp is struct ib_ucm_lap_event_resp.
type LAPEventResp struct {
	Path PathRec // @0 the proposed alternate path
}

func (*LAPEventResp) Size() int { return LAPEventRespSize }

func (m *LAPEventResp) Encode(b []byte) { m.Path.Encode(fit(b, LAPEventRespSize)) }

func (m *LAPEventResp) Decode(b []byte) { m.Path.Decode(b) }

// APREventResp is struct ib_ucm_apr_event_resp; the info goes to the info buffer.
type APREventResp struct {
	Status uint32 // @0 APR status
}

func (*APREventResp) Size() int { return APREventRespSize }

func (m *APREventResp) Encode(b []byte) {
	ne.PutUint32(fit(b, APREventRespSize), m.Status)
}

func (m *APREventResp) Decode(b []byte) {
	var w [APREventRespSize]byte
	copy(w[:], b)
	m.Status = ne.Uint32(w[:])
}

// SIDRREQEventResp is struct ib_ucm_sidr_req_event_resp.
type SIDRREQEventResp struct {
	PKey uint16 // @0 host order, unlike PathRec.PKey
	Port uint8  // @2
}

func (*SIDRREQEventResp) Size() int { return SIDRREQEventRespSize }

func (m *SIDRREQEventResp) Encode(b []byte) {
	b = fit(b, SIDRREQEventRespSize)
	ne.PutUint16(b[0:], m.PKey)
	b[2] = m.Port
	b[3] = 0
}

func (m *SIDRREQEventResp) Decode(b []byte) {
	var w [SIDRREQEventRespSize]byte
	copy(w[:], b)
	m.PKey = ne.Uint16(w[0:])
	m.Port = w[2]
}

// SIDRREPEventResp is struct ib_ucm_sidr_rep_event_resp; the additional
// info goes to the info buffer.
type SIDRREPEventResp struct {
	Status uint32 // @0 enum ib_cm_sidr_status
	QKey   uint32 // @4
	QPN    uint32 // @8
}

func (*SIDRREPEventResp) Size() int { return SIDRREPEventRespSize }

func (m *SIDRREPEventResp) Encode(b []byte) {
	b = fit(b, SIDRREPEventRespSize)
	ne.PutUint32(b[0:], m.Status)
	ne.PutUint32(b[4:], m.QKey)
	ne.PutUint32(b[8:], m.QPN)
}

func (m *SIDRREPEventResp) Decode(b []byte) {
	var w [SIDRREPEventRespSize]byte
	copy(w[:], b)
	m.Status = ne.Uint32(w[0:])
	m.QKey = ne.Uint32(w[4:])
	m.QPN = ne.Uint32(w[8:])
}
