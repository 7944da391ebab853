package abi

// Sizes of the command structs (sizeof, identical on i386 and x86_64).
const (
	CreateIDSize    = 16
	DestroyIDSize   = 16
	AttrIDSize      = 16
	InitQPAttrSize  = 16
	ListenSize      = 24
	NotifySize      = 8
	EstablishSize   = 4 // ABI 4's struct ib_ucm_establish {u32 id}
	PrivateDataSize = 16
	REQSize         = 64
	REPSize         = 40
	InfoSize        = 32
	MRASize         = 16
	LAPSize         = 24
	SIDRREQSize     = 40
	SIDRREPSize     = 40
	EventGetSize    = 32
)

// CreateID is struct ib_ucm_create_id (CREATE_ID).
type CreateID struct {
	UID      uint64 // @0 opaque user cookie, echoed in every event of the id
	Response uint64 // @8 -> CreateIDResp
}

func (*CreateID) Size() int { return CreateIDSize }

func (c *CreateID) Encode(b []byte) {
	b = fit(b, CreateIDSize)
	ne.PutUint64(b[0:], c.UID)
	ne.PutUint64(b[8:], c.Response)
}

func (c *CreateID) Decode(b []byte) {
	var w [CreateIDSize]byte
	copy(w[:], b)
	c.UID = ne.Uint64(w[0:])
	c.Response = ne.Uint64(w[8:])
}

// DestroyID is struct ib_ucm_destroy_id (DESTROY_ID).
type DestroyID struct {
	Response uint64 // @0 -> DestroyIDResp
	ID       uint32 // @8
}

func (*DestroyID) Size() int { return DestroyIDSize }

func (c *DestroyID) Encode(b []byte) {
	b = fit(b, DestroyIDSize)
	ne.PutUint64(b[0:], c.Response)
	ne.PutUint32(b[8:], c.ID)
	ne.PutUint32(b[12:], 0)
}

func (c *DestroyID) Decode(b []byte) {
	var w [DestroyIDSize]byte
	copy(w[:], b)
	c.Response = ne.Uint64(w[0:])
	c.ID = ne.Uint32(w[8:])
}

// AttrID is struct ib_ucm_attr_id (ATTR_ID).
type AttrID struct {
	Response uint64 // @0 -> AttrIDResp
	ID       uint32 // @8
}

func (*AttrID) Size() int { return AttrIDSize }

func (c *AttrID) Encode(b []byte) {
	b = fit(b, AttrIDSize)
	ne.PutUint64(b[0:], c.Response)
	ne.PutUint32(b[8:], c.ID)
	ne.PutUint32(b[12:], 0)
}

func (c *AttrID) Decode(b []byte) {
	var w [AttrIDSize]byte
	copy(w[:], b)
	c.Response = ne.Uint64(w[0:])
	c.ID = ne.Uint32(w[8:])
}

// InitQPAttr is struct ib_ucm_init_qp_attr (INIT_QP_ATTR).
type InitQPAttr struct {
	Response uint64  // @0 -> QPAttr
	ID       uint32  // @8
	QPState  QPState // @12 the state the caller wants attributes for
}

func (*InitQPAttr) Size() int { return InitQPAttrSize }

func (c *InitQPAttr) Encode(b []byte) {
	b = fit(b, InitQPAttrSize)
	ne.PutUint64(b[0:], c.Response)
	ne.PutUint32(b[8:], c.ID)
	ne.PutUint32(b[12:], uint32(c.QPState))
}

func (c *InitQPAttr) Decode(b []byte) {
	var w [InitQPAttrSize]byte
	copy(w[:], b)
	c.Response = ne.Uint64(w[0:])
	c.ID = ne.Uint32(w[8:])
	c.QPState = QPState(ne.Uint32(w[12:]))
}

// Listen is struct ib_ucm_listen (LISTEN).
type Listen struct {
	ServiceID   uint64 // @0 __be64
	ServiceMask uint64 // @8 __be64; 0 means an exact match
	ID          uint32 // @16
}

func (*Listen) Size() int { return ListenSize }

func (c *Listen) Encode(b []byte) {
	b = fit(b, ListenSize)
	be.PutUint64(b[0:], c.ServiceID)
	be.PutUint64(b[8:], c.ServiceMask)
	ne.PutUint32(b[16:], c.ID)
	ne.PutUint32(b[20:], 0)
}

func (c *Listen) Decode(b []byte) {
	var w [ListenSize]byte
	copy(w[:], b)
	c.ServiceID = be.Uint64(w[0:])
	c.ServiceMask = be.Uint64(w[8:])
	c.ID = ne.Uint32(w[16:])
}

// Notify is struct ib_ucm_notify (NOTIFY). ParseCommand also returns the
// ABI-4 ESTABLISH form ({u32 id}, in == 4) as a Notify with IBEventCommEst.
type Notify struct {
	ID    uint32  // @0
	Event IBEvent // @4 IBEventCommEst or IBEventPathMig
}

func (*Notify) Size() int { return NotifySize }

func (c *Notify) Encode(b []byte) {
	b = fit(b, NotifySize)
	ne.PutUint32(b[0:], c.ID)
	ne.PutUint32(b[4:], uint32(c.Event))
}

func (c *Notify) Decode(b []byte) {
	var w [NotifySize]byte
	copy(w[:], b)
	c.ID = ne.Uint32(w[0:])
	c.Event = IBEvent(ne.Uint32(w[4:]))
}

// PrivateData is struct ib_ucm_private_data (SEND_RTU, SEND_DREQ, SEND_DREP).
type PrivateData struct {
	Data uint64 // @0 -> Len bytes of private data
	ID   uint32 // @8
	Len  uint8  // @12
}

func (*PrivateData) Size() int { return PrivateDataSize }

func (c *PrivateData) Encode(b []byte) {
	b = fit(b, PrivateDataSize)
	clear(b)
	ne.PutUint64(b[0:], c.Data)
	ne.PutUint32(b[8:], c.ID)
	b[12] = c.Len
}

func (c *PrivateData) Decode(b []byte) {
	var w [PrivateDataSize]byte
	copy(w[:], b)
	c.Data = ne.Uint64(w[0:])
	c.ID = ne.Uint32(w[8:])
	c.Len = w[12]
}

// REQ is struct ib_ucm_req (SEND_REQ).
type REQ struct {
	ID                      uint32 // @0
	QPN                     uint32 // @4
	QPType                  QPType // @8
	PSN                     uint32 // @12
	SID                     uint64 // @16 __be64 service id
	Data                    uint64 // @24 -> Len bytes of private data
	PrimaryPath             uint64 // @32 -> PathRec (required by the CM)
	AlternatePath           uint64 // @40 -> PathRec, 0 if none
	Len                     uint8  // @48
	PeerToPeer              uint8  // @49
	ResponderResources      uint8  // @50
	InitiatorDepth          uint8  // @51
	RemoteCMResponseTimeout uint8  // @52
	FlowControl             uint8  // @53
	LocalCMResponseTimeout  uint8  // @54
	RetryCount              uint8  // @55
	RNRRetryCount           uint8  // @56
	MaxCMRetries            uint8  // @57
	SRQ                     uint8  // @58
}

func (*REQ) Size() int { return REQSize }

func (c *REQ) Encode(b []byte) {
	b = fit(b, REQSize)
	clear(b)
	ne.PutUint32(b[0:], c.ID)
	ne.PutUint32(b[4:], c.QPN)
	ne.PutUint32(b[8:], uint32(c.QPType))
	ne.PutUint32(b[12:], c.PSN)
	be.PutUint64(b[16:], c.SID)
	ne.PutUint64(b[24:], c.Data)
	ne.PutUint64(b[32:], c.PrimaryPath)
	ne.PutUint64(b[40:], c.AlternatePath)
	b[48] = c.Len
	b[49] = c.PeerToPeer
	b[50] = c.ResponderResources
	b[51] = c.InitiatorDepth
	b[52] = c.RemoteCMResponseTimeout
	b[53] = c.FlowControl
	b[54] = c.LocalCMResponseTimeout
	b[55] = c.RetryCount
	b[56] = c.RNRRetryCount
	b[57] = c.MaxCMRetries
	b[58] = c.SRQ
}

func (c *REQ) Decode(b []byte) {
	var w [REQSize]byte
	copy(w[:], b)
	c.ID = ne.Uint32(w[0:])
	c.QPN = ne.Uint32(w[4:])
	c.QPType = QPType(ne.Uint32(w[8:]))
	c.PSN = ne.Uint32(w[12:])
	c.SID = be.Uint64(w[16:])
	c.Data = ne.Uint64(w[24:])
	c.PrimaryPath = ne.Uint64(w[32:])
	c.AlternatePath = ne.Uint64(w[40:])
	c.Len = w[48]
	c.PeerToPeer = w[49]
	c.ResponderResources = w[50]
	c.InitiatorDepth = w[51]
	c.RemoteCMResponseTimeout = w[52]
	c.FlowControl = w[53]
	c.LocalCMResponseTimeout = w[54]
	c.RetryCount = w[55]
	c.RNRRetryCount = w[56]
	c.MaxCMRetries = w[57]
	c.SRQ = w[58]
}

// REP is struct ib_ucm_rep (SEND_REP).
type REP struct {
	UID                uint64 // @0 becomes the id's cookie (how a REQ child gets one)
	Data               uint64 // @8 -> Len bytes of private data
	ID                 uint32 // @16
	QPN                uint32 // @20
	PSN                uint32 // @24
	Len                uint8  // @28
	ResponderResources uint8  // @29
	InitiatorDepth     uint8  // @30
	TargetAckDelay     uint8  // @31 ignored by the kernel (it used the HCA's)
	FailoverAccepted   uint8  // @32
	FlowControl        uint8  // @33
	RNRRetryCount      uint8  // @34
	SRQ                uint8  // @35
}

func (*REP) Size() int { return REPSize }

func (c *REP) Encode(b []byte) {
	b = fit(b, REPSize)
	clear(b)
	ne.PutUint64(b[0:], c.UID)
	ne.PutUint64(b[8:], c.Data)
	ne.PutUint32(b[16:], c.ID)
	ne.PutUint32(b[20:], c.QPN)
	ne.PutUint32(b[24:], c.PSN)
	b[28] = c.Len
	b[29] = c.ResponderResources
	b[30] = c.InitiatorDepth
	b[31] = c.TargetAckDelay
	b[32] = c.FailoverAccepted
	b[33] = c.FlowControl
	b[34] = c.RNRRetryCount
	b[35] = c.SRQ
}

func (c *REP) Decode(b []byte) {
	var w [REPSize]byte
	copy(w[:], b)
	c.UID = ne.Uint64(w[0:])
	c.Data = ne.Uint64(w[8:])
	c.ID = ne.Uint32(w[16:])
	c.QPN = ne.Uint32(w[20:])
	c.PSN = ne.Uint32(w[24:])
	c.Len = w[28]
	c.ResponderResources = w[29]
	c.InitiatorDepth = w[30]
	c.TargetAckDelay = w[31]
	c.FailoverAccepted = w[32]
	c.FlowControl = w[33]
	c.RNRRetryCount = w[34]
	c.SRQ = w[35]
}

// Info is struct ib_ucm_info (SEND_REJ, SEND_APR).
type Info struct {
	ID      uint32 // @0
	Status  uint32 // @4 REJ reason or APR status
	Info    uint64 // @8 -> InfoLen bytes: REJ ARI or APR additional info
	Data    uint64 // @16 -> DataLen bytes of private data
	InfoLen uint8  // @24
	DataLen uint8  // @25
}

func (*Info) Size() int { return InfoSize }

func (c *Info) Encode(b []byte) {
	b = fit(b, InfoSize)
	clear(b)
	ne.PutUint32(b[0:], c.ID)
	ne.PutUint32(b[4:], c.Status)
	ne.PutUint64(b[8:], c.Info)
	ne.PutUint64(b[16:], c.Data)
	b[24] = c.InfoLen
	b[25] = c.DataLen
}

func (c *Info) Decode(b []byte) {
	var w [InfoSize]byte
	copy(w[:], b)
	c.ID = ne.Uint32(w[0:])
	c.Status = ne.Uint32(w[4:])
	c.Info = ne.Uint64(w[8:])
	c.Data = ne.Uint64(w[16:])
	c.InfoLen = w[24]
	c.DataLen = w[25]
}

// MRA is struct ib_ucm_mra (SEND_MRA).
type MRA struct {
	Data    uint64 // @0 -> Len bytes of private data
	ID      uint32 // @8
	Len     uint8  // @12
	Timeout uint8  // @13 service timeout; bit 7 is IB_CM_MRA_FLAG_DELAY
}

func (*MRA) Size() int { return MRASize }

func (c *MRA) Encode(b []byte) {
	b = fit(b, MRASize)
	clear(b)
	ne.PutUint64(b[0:], c.Data)
	ne.PutUint32(b[8:], c.ID)
	b[12] = c.Len
	b[13] = c.Timeout
}

func (c *MRA) Decode(b []byte) {
	var w [MRASize]byte
	copy(w[:], b)
	c.Data = ne.Uint64(w[0:])
	c.ID = ne.Uint32(w[8:])
	c.Len = w[12]
	c.Timeout = w[13]
}

// LAP is struct ib_ucm_lap (SEND_LAP).
type LAP struct {
	Path uint64 // @0 -> PathRec, the new alternate path
	Data uint64 // @8 -> Len bytes of private data
	ID   uint32 // @16
	Len  uint8  // @20
}

func (*LAP) Size() int { return LAPSize }

func (c *LAP) Encode(b []byte) {
	b = fit(b, LAPSize)
	clear(b)
	ne.PutUint64(b[0:], c.Path)
	ne.PutUint64(b[8:], c.Data)
	ne.PutUint32(b[16:], c.ID)
	b[20] = c.Len
}

func (c *LAP) Decode(b []byte) {
	var w [LAPSize]byte
	copy(w[:], b)
	c.Path = ne.Uint64(w[0:])
	c.Data = ne.Uint64(w[8:])
	c.ID = ne.Uint32(w[16:])
	c.Len = w[20]
}

// SIDRREQ is struct ib_ucm_sidr_req (SEND_SIDR_REQ).
type SIDRREQ struct {
	ID           uint32 // @0
	Timeout      uint32 // @4 milliseconds
	SID          uint64 // @8 __be64 service id
	Data         uint64 // @16 -> Len bytes of private data
	Path         uint64 // @24 -> PathRec (required by the CM)
	ReservedPKey uint16 // @32 ignored since 2006: the P_Key comes from the path
	Len          uint8  // @34
	MaxCMRetries uint8  // @35
}

func (*SIDRREQ) Size() int { return SIDRREQSize }

func (c *SIDRREQ) Encode(b []byte) {
	b = fit(b, SIDRREQSize)
	clear(b)
	ne.PutUint32(b[0:], c.ID)
	ne.PutUint32(b[4:], c.Timeout)
	be.PutUint64(b[8:], c.SID)
	ne.PutUint64(b[16:], c.Data)
	ne.PutUint64(b[24:], c.Path)
	ne.PutUint16(b[32:], c.ReservedPKey)
	b[34] = c.Len
	b[35] = c.MaxCMRetries
}

func (c *SIDRREQ) Decode(b []byte) {
	var w [SIDRREQSize]byte
	copy(w[:], b)
	c.ID = ne.Uint32(w[0:])
	c.Timeout = ne.Uint32(w[4:])
	c.SID = be.Uint64(w[8:])
	c.Data = ne.Uint64(w[16:])
	c.Path = ne.Uint64(w[24:])
	c.ReservedPKey = ne.Uint16(w[32:])
	c.Len = w[34]
	c.MaxCMRetries = w[35]
}

// SIDRREP is struct ib_ucm_sidr_rep (SEND_SIDR_REP).
type SIDRREP struct {
	ID      uint32 // @0
	QPN     uint32 // @4
	QKey    uint32 // @8
	Status  uint32 // @12 enum ib_cm_sidr_status
	Info    uint64 // @16 -> InfoLen bytes of additional info
	Data    uint64 // @24 -> DataLen bytes of private data
	InfoLen uint8  // @32
	DataLen uint8  // @33
}

func (*SIDRREP) Size() int { return SIDRREPSize }

func (c *SIDRREP) Encode(b []byte) {
	b = fit(b, SIDRREPSize)
	clear(b)
	ne.PutUint32(b[0:], c.ID)
	ne.PutUint32(b[4:], c.QPN)
	ne.PutUint32(b[8:], c.QKey)
	ne.PutUint32(b[12:], c.Status)
	ne.PutUint64(b[16:], c.Info)
	ne.PutUint64(b[24:], c.Data)
	b[32] = c.InfoLen
	b[33] = c.DataLen
}

func (c *SIDRREP) Decode(b []byte) {
	var w [SIDRREPSize]byte
	copy(w[:], b)
	c.ID = ne.Uint32(w[0:])
	c.QPN = ne.Uint32(w[4:])
	c.QKey = ne.Uint32(w[8:])
	c.Status = ne.Uint32(w[12:])
	c.Info = ne.Uint64(w[16:])
	c.Data = ne.Uint64(w[24:])
	c.InfoLen = w[32]
	c.DataLen = w[33]
}

// EventGet is struct ib_ucm_event_get (EVENT, i.e. GET_EVENT).
type EventGet struct {
	Response uint64 // @0 -> EventResp
	Data     uint64 // @8 -> DataLen-byte buffer for private data
	Info     uint64 // @16 -> InfoLen-byte buffer for ARI/info
	DataLen  uint8  // @24 size of the data buffer
	InfoLen  uint8  // @25 size of the info buffer
}

func (*EventGet) Size() int { return EventGetSize }

func (c *EventGet) Encode(b []byte) {
	b = fit(b, EventGetSize)
	clear(b)
	ne.PutUint64(b[0:], c.Response)
	ne.PutUint64(b[8:], c.Data)
	ne.PutUint64(b[16:], c.Info)
	b[24] = c.DataLen
	b[25] = c.InfoLen
}

func (c *EventGet) Decode(b []byte) {
	var w [EventGetSize]byte
	copy(w[:], b)
	c.Response = ne.Uint64(w[0:])
	c.Data = ne.Uint64(w[8:])
	c.Info = ne.Uint64(w[16:])
	c.DataLen = w[24]
	c.InfoLen = w[25]
}
