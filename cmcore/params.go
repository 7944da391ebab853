package cmcore

import "github.com/ucmd/ucmd/cmcore/wire"

// REQParams is ib_cm_req_param.
type REQParams struct {
	Primary   *PathRecord // required
	Alternate *PathRecord // optional; same P_Key and MTU as Primary

	ServiceID               uint64
	QPN                     uint32
	QPType                  QPType // RC, UC or XRC_INI
	StartingPSN             uint32 // the PSN the passive side sends with
	ResponderResources      uint8
	InitiatorDepth          uint8
	RemoteCMResponseTimeout uint8 // 5-bit IBTA time
	LocalCMResponseTimeout  uint8 // 5-bit IBTA time
	FlowControl             bool
	RetryCount              uint8 // 3 bits in the REQ; the RTS attributes take all 8
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits in the REQ; the REQ and DREQ are retried this often
	SRQ                     bool
	PeerToPeer              bool // unsupported: EINVAL, like v5.x
	PrivateData             []byte
}

// REPParams is ib_cm_rep_param. The Target ACK Delay is always the local
// device's (ucm ignored the caller's).
type REPParams struct {
	QPN                uint32
	StartingPSN        uint32 // the PSN the active side sends with
	ResponderResources uint8
	InitiatorDepth     uint8
	FailoverAccepted   uint8
	FlowControl        bool
	RNRRetryCount      uint8
	SRQ                bool
	PrivateData        []byte
}

// SIDRREQParams is ib_cm_sidr_req_param.
type SIDRREQParams struct {
	Path         *PathRecord // required
	ServiceID    uint64
	TimeoutMs    uint32 // retransmission interval, verbatim
	MaxCMRetries uint8
	PrivateData  []byte
}

// SIDRREPParams is ib_cm_sidr_rep_param.
type SIDRREPParams struct {
	Status      uint8
	QPN         uint32
	QKey        uint32
	Info        []byte
	PrivateData []byte
}

// Short names for the wire codes the state machine uses (ib-cm.md §9).
const (
	rejTimeout          = wire.REJTimeout
	rejInvalidServiceID = wire.REJInvalidServiceID
	rejStaleConn        = wire.REJStaleConn
	rejInvalidGID       = wire.REJInvalidGID
	rejInvalidAltGID    = wire.REJInvalidAltGID
	rejConsumerDefined  = wire.REJConsumerDefined

	sidrUnsupported = wire.SIDRUnsupported
	sidrReject      = wire.SIDRReject

	msgREQ   = wire.MessageREQ
	msgREP   = wire.MessageREP
	msgOther = wire.MessageOther

	permissiveLID = 0xFFFF
)
