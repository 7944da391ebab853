package wire

// MAD header values of the CM class (ib_mad.h, ib_cm.h).
const (
	BaseVersion  = 1    // IB_MGMT_BASE_VERSION
	MgmtClassCM  = 0x07 // IB_MGMT_CLASS_CM
	ClassVersion = 2    // IB_CM_CLASS_VERSION
	MethodSend   = 0x03 // IB_MGMT_METHOD_SEND: every CM message uses it
)

// CM attribute IDs (ib_cm.h CM_*_ATTR_ID).
const (
	AttrClassPortInfo = 0x0001
	AttrREQ           = 0x0010
	AttrMRA           = 0x0011
	AttrREJ           = 0x0012
	AttrREP           = 0x0013
	AttrRTU           = 0x0014
	AttrDREQ          = 0x0015
	AttrDREP          = 0x0016
	AttrSIDRReq       = 0x0017
	AttrSIDRRep       = 0x0018
	AttrLAP           = 0x0019
	AttrAPR           = 0x001A
)

// Sizes of the private data areas (enum ib_cm_data_size) and of the
// additional-information areas of REJ, APR and SIDR_REP. Each message is
// its fixed part followed by private data up to the end of the MAD.
const (
	ReqPrivateDataSize     = 92
	MRAPrivateDataSize     = 222
	RejPrivateDataSize     = 148
	RepPrivateDataSize     = 196
	RTUPrivateDataSize     = 224
	DReqPrivateDataSize    = 220
	DRepPrivateDataSize    = 224
	LAPPrivateDataSize     = 168
	APRPrivateDataSize     = 148
	SIDRReqPrivateDataSize = 216
	SIDRRepPrivateDataSize = 136

	RejARISize      = 72 // IB_CM_REJ_ARI_LENGTH
	APRInfoSize     = 72 // IB_CM_APR_INFO_LENGTH
	SIDRRepInfoSize = 72 // IB_CM_SIDR_REP_INFO_LENGTH
)

// Transport Service Type values of REQ (2 bits). Type 3 means "see Extended
// Transport Type", which is ExtendedTransportXRC for XRC.
const (
	TransportRC       = 0
	TransportUC       = 1
	TransportRD       = 2
	TransportExtended = 3

	ExtendedTransportXRC = 1
)

// Values of the 2-bit Message MRAed (MRA) and Message Rejected (REJ) fields.
const (
	MessageREQ   = 0
	MessageREP   = 1
	MessageOther = 2 // LAP for MRA; anything else for REJ
)

// Failover Accepted values of REP.
const (
	FailoverAccepted    = 0
	FailoverRejected    = 1
	FailoverUnsupported = 2
)

// REJ reasons (enum ib_cm_rej_reason). 34 is not defined.
const (
	RejNoQP                     = 1
	RejNoEEC                    = 2
	RejNoResources              = 3
	RejTimeout                  = 4 // ARI: the sender's 8-byte node GUID
	RejUnsupported              = 5
	RejInvalidCommID            = 6
	RejInvalidCommInstance      = 7
	RejInvalidServiceID         = 8
	RejInvalidTransportType     = 9
	RejStaleConn                = 10
	RejRDCNotExist              = 11
	RejInvalidGID               = 12
	RejInvalidLID               = 13
	RejInvalidSL                = 14
	RejInvalidTrafficClass      = 15
	RejInvalidHopLimit          = 16
	RejInvalidPacketRate        = 17
	RejInvalidAltGID            = 18
	RejInvalidAltLID            = 19
	RejInvalidAltSL             = 20
	RejInvalidAltTrafficClass   = 21
	RejInvalidAltHopLimit       = 22
	RejInvalidAltPacketRate     = 23
	RejPortCMRedirect           = 24
	RejPortRedirect             = 25
	RejInvalidMTU               = 26
	RejInsufficientRespResource = 27
	RejConsumerDefined          = 28
	RejInvalidRNRRetry          = 29
	RejDuplicateLocalCommID     = 30
	RejInvalidClassVersion      = 31
	RejInvalidFlowLabel         = 32
	RejInvalidAltFlowLabel      = 33
	RejVendorOptionNotSupported = 35
)

// AP Status values of APR (enum ib_cm_apr_status).
const (
	APRSuccess           = 0
	APRInvalidCommID     = 1
	APRUnsupported       = 2
	APRRejected          = 3
	APRRedirect          = 4
	APRIsCurrent         = 5
	APRInvalidQPNEECN    = 6
	APRInvalidLID        = 7
	APRInvalidGID        = 8
	APRInvalidFlowLabel  = 9
	APRInvalidTClass     = 10
	APRInvalidHopLimit   = 11
	APRInvalidPacketRate = 12
	APRInvalidSL         = 13
)

// SIDR_REP Status values (enum ib_cm_sidr_status).
const (
	SIDRSuccess            = 0
	SIDRUnsupported        = 1
	SIDRReject             = 2
	SIDRNoQP               = 3
	SIDRRedirect           = 4
	SIDRUnsupportedVersion = 5
)
