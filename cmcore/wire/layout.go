package wire

// This file is the wire layout of the eleven messages: every field's place
// in the MAD data area (byte offset = MAD offset - HeaderSize), as in the
// IBTA vol. 1 ch. 12 tables and the kernel's ibta_vol1_c12.h. Nothing else
// in the package knows an offset.

import "encoding/binary"

// bitField is a field of width bits whose least significant bit is bit
// shift of the big-endian word of size bytes at off. Describing every
// field, from a 1-bit flag to a 64-bit GUID, this one way leaves a single
// place (get/put below) where the MSB-first packing can go wrong.
type bitField struct {
	name  string
	off   int
	size  int  // 1, 2, 4 or 8
	shift uint // 0 = the field ends at the word's last bit
	width uint
}

func f8(name string, off int) bitField  { return bitField{name, off, 1, 0, 8} }
func f16(name string, off int) bitField { return bitField{name, off, 2, 0, 16} }
func f32(name string, off int) bitField { return bitField{name, off, 4, 0, 32} }
func f64(name string, off int) bitField { return bitField{name, off, 8, 0, 64} }

// f24 is a QPN, PSN or EECN: the top three bytes of the 32-bit word at off.
func f24(name string, off int) bitField { return bitField{name, off, 4, 8, 24} }

// fBits is a sub-byte field of byte off; mask is the field's mask within
// that byte as the IBTA tables give it (MSB = 0x80).
func fBits(name string, off int, mask uint8) bitField {
	shift, width := uint(0), uint(0)
	for mask&1 == 0 {
		mask >>= 1
		shift++
	}
	for mask&1 == 1 {
		mask >>= 1
		width++
	}
	return bitField{name, off, 1, shift, width}
}

func (f *bitField) word(d []byte) uint64 {
	switch f.size {
	case 1:
		return uint64(d[f.off])
	case 2:
		return uint64(binary.BigEndian.Uint16(d[f.off:]))
	case 4:
		return uint64(binary.BigEndian.Uint32(d[f.off:]))
	default:
		return binary.BigEndian.Uint64(d[f.off:])
	}
}

func (f *bitField) max() uint64 {
	if f.width >= 64 {
		return ^uint64(0)
	}
	return 1<<f.width - 1
}

func (f *bitField) get(d []byte) uint64 { return f.word(d) >> f.shift & f.max() }

// put ORs v into place, byte by byte, so fields sharing a byte or word
// combine; the caller has checked that v fits.
func (f *bitField) put(d []byte, v uint64) {
	w := v << f.shift
	b := d[f.off : f.off+f.size]
	for i := len(b) - 1; i >= 0; i-- {
		b[i] |= byte(w)
		w >>= 8
	}
}

// area is a byte string field: a GID, private data, ARI or info.
type area struct {
	name string
	off  int
	size int
}

func (a area) get(d []byte) []byte { return d[a.off : a.off+a.size] }

// pathLayout places the fields of a Path. REQ and LAP order them
// differently.
type pathLayout struct {
	localLID, remoteLID              bitField
	localGID, remoteGID              area
	flowLabel, packetRate            bitField
	trafficClass, hopLimit           bitField
	sl, subnetLocal, localACKTimeout bitField
}

// reqPath lays out a REQ path block starting at base (52 primary, 96
// alternate): IBTA table 106.
func reqPath(prefix string, base int) pathLayout {
	return pathLayout{
		localLID:        f16(prefix+" local port LID", base+0),
		remoteLID:       f16(prefix+" remote port LID", base+2),
		localGID:        area{prefix + " local port GID", base + 4, 16},
		remoteGID:       area{prefix + " remote port GID", base + 20, 16},
		flowLabel:       bitField{prefix + " flow label", base + 36, 4, 12, 20},
		packetRate:      fBits(prefix+" packet rate", base+39, 0x3F),
		trafficClass:    f8(prefix+" traffic class", base+40),
		hopLimit:        f8(prefix+" hop limit", base+41),
		sl:              fBits(prefix+" SL", base+42, 0xF0),
		subnetLocal:     fBits(prefix+" subnet local", base+42, 0x08),
		localACKTimeout: fBits(prefix+" local ACK timeout", base+43, 0xF8),
	}
}

// REQ, IBTA table 106.
var (
	reqLocalCommID             = f32("local comm ID", 0)
	reqServiceID               = f64("service ID", 8)
	reqLocalCAGUID             = f64("local CA GUID", 16)
	reqLocalQKey               = f32("local Q_Key", 28)
	reqLocalQPN                = f24("local QPN", 32)
	reqResponderResources      = f8("responder resources", 35)
	reqLocalEECN               = f24("local EECN", 36)
	reqInitiatorDepth          = f8("initiator depth", 39)
	reqRemoteEECN              = f24("remote EECN", 40)
	reqRemoteCMResponseTimeout = fBits("remote CM response timeout", 43, 0xF8)
	reqTransportType           = fBits("transport service type", 43, 0x06)
	reqEndToEndFlowControl     = fBits("end-to-end flow control", 43, 0x01)
	reqStartingPSN             = f24("starting PSN", 44)
	reqLocalCMResponseTimeout  = fBits("local CM response timeout", 47, 0xF8)
	reqRetryCount              = fBits("retry count", 47, 0x07)
	reqPartitionKey            = f16("partition key", 48)
	reqPathMTU                 = fBits("path MTU", 50, 0xF0)
	reqRDCExists               = fBits("RDC exists", 50, 0x08)
	reqRNRRetryCount           = fBits("RNR retry count", 50, 0x07)
	reqMaxCMRetries            = fBits("max CM retries", 51, 0xF0)
	reqSRQ                     = fBits("SRQ", 51, 0x08)
	reqExtendedTransport       = fBits("extended transport type", 51, 0x07)
	reqPrimary                 = reqPath("primary", 52)
	reqAlternate               = reqPath("alternate", 96)
	reqSAPSupported            = fBits("SAP supported", 139, 0x04)
	reqPrivateData             = area{"private data", 140, REQPrivateDataSize}
)

// MRA, IBTA table 107.
var (
	mraLocalCommID    = f32("local comm ID", 0)
	mraRemoteCommID   = f32("remote comm ID", 4)
	mraMessageMRAed   = fBits("message MRAed", 8, 0xC0)
	mraServiceTimeout = fBits("service timeout", 9, 0xF8)
	mraPrivateData    = area{"private data", 10, MRAPrivateDataSize}
)

// REJ, IBTA table 108.
var (
	rejLocalCommID     = f32("local comm ID", 0)
	rejRemoteCommID    = f32("remote comm ID", 4)
	rejMessageRejected = fBits("message rejected", 8, 0xC0)
	rejARILength       = fBits("ARI length", 9, 0xFE)
	rejReason          = f16("reason", 10)
	rejARI             = area{"ARI", 12, REJARISize}
	rejPrivateData     = area{"private data", 84, REJPrivateDataSize}
)

// REP, IBTA table 110.
var (
	repLocalCommID         = f32("local comm ID", 0)
	repRemoteCommID        = f32("remote comm ID", 4)
	repLocalQKey           = f32("local Q_Key", 8)
	repLocalQPN            = f24("local QPN", 12)
	repLocalEECN           = f24("local EECN", 16)
	repStartingPSN         = f24("starting PSN", 20)
	repResponderResources  = f8("responder resources", 24)
	repInitiatorDepth      = f8("initiator depth", 25)
	repTargetACKDelay      = fBits("target ACK delay", 26, 0xF8)
	repFailoverAccepted    = fBits("failover accepted", 26, 0x06)
	repEndToEndFlowControl = fBits("end-to-end flow control", 26, 0x01)
	repRNRRetryCount       = fBits("RNR retry count", 27, 0xE0)
	repSRQ                 = fBits("SRQ", 27, 0x10)
	repLocalCAGUID         = f64("local CA GUID", 28) // only 4-byte aligned
	repPrivateData         = area{"private data", 36, REPPrivateDataSize}
)

// RTU, IBTA table 111.
var (
	rtuLocalCommID  = f32("local comm ID", 0)
	rtuRemoteCommID = f32("remote comm ID", 4)
	rtuPrivateData  = area{"private data", 8, RTUPrivateDataSize}
)

// DREQ, IBTA table 112.
var (
	dreqLocalCommID  = f32("local comm ID", 0)
	dreqRemoteCommID = f32("remote comm ID", 4)
	dreqRemoteQPN    = f24("remote QPN/EECN", 8)
	dreqPrivateData  = area{"private data", 12, DREQPrivateDataSize}
)

// DREP, IBTA table 113.
var (
	drepLocalCommID  = f32("local comm ID", 0)
	drepRemoteCommID = f32("remote comm ID", 4)
	drepPrivateData  = area{"private data", 8, DREPPrivateDataSize}
)

// LAP, IBTA table 115. The alternate path puts the traffic class next to
// the flow label, unlike REQ.
var (
	lapLocalCommID             = f32("local comm ID", 0)
	lapRemoteCommID            = f32("remote comm ID", 4)
	lapRemoteQPN               = f24("remote QPN/EECN", 12)
	lapRemoteCMResponseTimeout = fBits("remote CM response timeout", 15, 0xF8)
	lapAlternate               = pathLayout{
		localLID:        f16("alternate local port LID", 20),
		remoteLID:       f16("alternate remote port LID", 22),
		localGID:        area{"alternate local port GID", 24, 16},
		remoteGID:       area{"alternate remote port GID", 40, 16},
		flowLabel:       bitField{"alternate flow label", 56, 4, 12, 20},
		trafficClass:    f8("alternate traffic class", 59),
		hopLimit:        f8("alternate hop limit", 60),
		packetRate:      fBits("alternate packet rate", 61, 0x3F),
		sl:              fBits("alternate SL", 62, 0xF0),
		subnetLocal:     fBits("alternate subnet local", 62, 0x08),
		localACKTimeout: fBits("alternate local ACK timeout", 63, 0xF8),
	}
	lapPrivateData = area{"private data", 64, LAPPrivateDataSize}
)

// APR, IBTA table 116.
var (
	aprLocalCommID  = f32("local comm ID", 0)
	aprRemoteCommID = f32("remote comm ID", 4)
	aprInfoLength   = f8("additional information length", 8)
	aprAPStatus     = f8("AP status", 9)
	aprInfo         = area{"additional information", 12, APRInfoSize}
	aprPrivateData  = area{"private data", 84, APRPrivateDataSize}
)

// SIDR_REQ, IBTA table 119.
var (
	sidrREQRequestID    = f32("request ID", 0)
	sidrREQPartitionKey = f16("partition key", 4)
	sidrREQServiceID    = f64("service ID", 8)
	sidrREQPrivateData  = area{"private data", 16, SIDRREQPrivateDataSize}
)

// SIDR_REP, IBTA table 120.
var (
	sidrREPRequestID   = f32("request ID", 0)
	sidrREPStatus      = f8("status", 4)
	sidrREPInfoLength  = f8("additional information length", 5)
	sidrREPQPN         = f24("QPN", 8)
	sidrREPServiceID   = f64("service ID", 12) // only 4-byte aligned
	sidrREPQKey        = f32("Q_Key", 20)
	sidrREPInfo        = area{"additional information", 24, SIDRREPInfoSize}
	sidrREPPrivateData = area{"private data", 96, SIDRREPPrivateDataSize}
)
