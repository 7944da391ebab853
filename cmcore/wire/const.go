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
	AttrSIDRREQ       = 0x0017
	AttrSIDRREP       = 0x0018
	AttrLAP           = 0x0019
	AttrAPR           = 0x001A
)

// Sizes of the private data areas (enum ib_cm_data_size) and of the
// additional-information areas of REJ, APR and SIDR_REP. Each message is
// its fixed part followed by private data up to the end of the MAD.
const (
	REQPrivateDataSize     = 92
	MRAPrivateDataSize     = 222
	REJPrivateDataSize     = 148
	REPPrivateDataSize     = 196
	RTUPrivateDataSize     = 224
	DREQPrivateDataSize    = 220
	DREPPrivateDataSize    = 224
	LAPPrivateDataSize     = 168
	APRPrivateDataSize     = 148
	SIDRREQPrivateDataSize = 216
	SIDRREPPrivateDataSize = 136

	REJARISize      = 72 // IB_CM_REJ_ARI_LENGTH
	APRInfoSize     = 72 // IB_CM_APR_INFO_LENGTH
	SIDRREPInfoSize = 72 // IB_CM_SIDR_REP_INFO_LENGTH
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
	REJNoQP                     = 1
	REJNoEEC                    = 2
	REJNoResources              = 3
	REJTimeout                  = 4 // ARI: the sender's 8-byte node GUID
	REJUnsupported              = 5
	REJInvalidCommID            = 6
	REJInvalidCommInstance      = 7
	REJInvalidServiceID         = 8
	REJInvalidTransportType     = 9
	REJStaleConn                = 10
	REJRDCNotExist              = 11
	REJInvalidGID               = 12
	REJInvalidLID               = 13
	REJInvalidSL                = 14
	REJInvalidTrafficClass      = 15
	REJInvalidHopLimit          = 16
	REJInvalidPacketRate        = 17
	REJInvalidAltGID            = 18
	REJInvalidAltLID            = 19
	REJInvalidAltSL             = 20
	REJInvalidAltTrafficClass   = 21
	REJInvalidAltHopLimit       = 22
	REJInvalidAltPacketRate     = 23
	REJPortCMRedirect           = 24
	REJPortRedirect             = 25
	REJInvalidMTU               = 26
	REJInsufficientRespResource = 27
	REJConsumerDefined          = 28
	REJInvalidRNRRetry          = 29
	REJDuplicateLocalCommID     = 30
	REJInvalidClassVersion      = 31
	REJInvalidFlowLabel         = 32
	REJInvalidAltFlowLabel      = 33
	REJVendorOptionNotSupported = 35
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
