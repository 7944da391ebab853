package wire

import "github.com/ucmd/ucmd/hw"

// Message is one decoded CM message: *REQ, *MRA, *REJ, *REP, *RTU, *DREQ,
// *DREP, *LAP, *APR, *SIDRREQ or *SIDRREP.
//
// Fields narrower than their Go type (24-bit QPNs and PSNs, 20-bit flow
// labels, 5-bit timeouts, ...) must fit their wire width: Encode refuses
// values that would be truncated. PrivateData and the ARI/info areas may be
// shorter than their wire area (Encode zero-pads) but never longer.
type Message interface {
	AttrID() uint16
}

// Path is one path of a REQ (primary or alternate) or the alternate path of
// a LAP. The two messages lay these fields out differently.
type Path struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        hw.GID
	RemoteGID       hw.GID
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits, SA PathRecord rate enum
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits, 4.096 µs * 2^t
}

// REQ is a Connection Request (IBTA table 106).
type REQ struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64 // node GUID of the sender's CA
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits: how long the passive side may take
	TransportType           uint8  // 2 bits: TransportRC, TransportUC, ...
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits: the PSN the passive side sends with
	LocalCMResponseTimeout  uint8  // 5 bits: how long the active side may take
	RetryCount              uint8  // 3 bits
	PartitionKey            uint16
	PathMTU                 uint8 // 4 bits, IB MTU enum
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransport       uint8 // 3 bits: ExtendedTransportXRC with TransportExtended
	Primary                 Path
	// Alternate is present only if Alternate.LocalLID != 0: that is how
	// Linux tells, so an alternate path with LID 0 (RoCE) is never seen.
	Alternate    Path
	SAPSupported bool
	PrivateData  []byte // at most REQPrivateDataSize
}

// MRA is a Message Receipt Acknowledgement (IBTA table 107).
type MRA struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   uint8 // 2 bits: MessageREQ, MessageREP or MessageOther (LAP)
	ServiceTimeout uint8 // 5 bits
	PrivateData    []byte
}

// REJ is a Reject (IBTA table 108).
type REJ struct {
	LocalCommID     uint32
	RemoteCommID    uint32
	MessageRejected uint8 // 2 bits: MessageREQ, MessageREP or MessageOther
	Reason          uint16
	// ARI is the Additional Rejection Information; its length is the
	// 7-bit ARI length field, at most REJARISize.
	ARI         []byte
	PrivateData []byte
}

// REP is a Reply to a REQ (IBTA table 110).
type REP struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32 // 24 bits
	LocalEECN           uint32 // 24 bits; the QPN for XRC targets
	StartingPSN         uint32 // 24 bits: the PSN the active side sends with
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         []byte
}

// RTU is Ready To Use (IBTA table 111).
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte
}

// DREQ is a Disconnection Request (IBTA table 112).
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits: the receiver's QPN (or EECN)
	PrivateData  []byte
}

// DREP is a Disconnection Reply (IBTA table 113).
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte
}

// LAP is a Load Alternate Path (IBTA table 115).
type LAP struct {
	LocalCommID             uint32
	RemoteCommID            uint32
	RemoteQPN               uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	Alternate               Path
	PrivateData             []byte
}

// APR is an Alternate Path Response (IBTA table 116).
type APR struct {
	LocalCommID  uint32
	RemoteCommID uint32
	APStatus     uint8
	// Info is the Additional Information; its length is the Additional
	// Information Length field, at most APRInfoSize.
	Info        []byte
	PrivateData []byte
}

// SIDRREQ is a Service ID Resolution Request (IBTA table 119).
type SIDRREQ struct {
	RequestID    uint32
	PartitionKey uint16
	ServiceID    uint64
	PrivateData  []byte
}

// SIDRREP is a Service ID Resolution Response (IBTA table 120).
type SIDRREP struct {
	RequestID uint32
	Status    uint8
	QPN       uint32 // 24 bits
	ServiceID uint64
	QKey      uint32
	// Info is the Additional Information, at most SIDRREPInfoSize.
	Info        []byte
	PrivateData []byte
}

func (*REQ) AttrID() uint16     { return AttrREQ }
func (*MRA) AttrID() uint16     { return AttrMRA }
func (*REJ) AttrID() uint16     { return AttrREJ }
func (*REP) AttrID() uint16     { return AttrREP }
func (*RTU) AttrID() uint16     { return AttrRTU }
func (*DREQ) AttrID() uint16    { return AttrDREQ }
func (*DREP) AttrID() uint16    { return AttrDREP }
func (*LAP) AttrID() uint16     { return AttrLAP }
func (*APR) AttrID() uint16     { return AttrAPR }
func (*SIDRREQ) AttrID() uint16 { return AttrSIDRREQ }
func (*SIDRREP) AttrID() uint16 { return AttrSIDRREP }
