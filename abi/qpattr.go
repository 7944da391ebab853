package abi

import (
	"fmt"
	"math/bits"
	"strings"
)

// Sizes of the INIT_QP_ATTR response and its parts.
const (
	QPAttrSize      = 144
	AHAttrSize      = 32
	GlobalRouteSize = 24
)

// QPState is enum ib_qp_state.
type QPState uint32

const (
	QPStateReset QPState = 0 // IB_QPS_RESET
	QPStateInit  QPState = 1 // IB_QPS_INIT
	QPStateRTR   QPState = 2 // IB_QPS_RTR
	QPStateRTS   QPState = 3 // IB_QPS_RTS
	QPStateSQD   QPState = 4 // IB_QPS_SQD
	QPStateSQE   QPState = 5 // IB_QPS_SQE
	QPStateErr   QPState = 6 // IB_QPS_ERR
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint32(s))
}

// QPType is enum ib_qp_type, as carried by SEND_REQ and REQ events.
type QPType uint32

const (
	QPTypeRC     QPType = 2  // IB_QPT_RC
	QPTypeUC     QPType = 3  // IB_QPT_UC
	QPTypeUD     QPType = 4  // IB_QPT_UD
	QPTypeXRCIni QPType = 9  // IB_QPT_XRC_INI
	QPTypeXRCTgt QPType = 10 // IB_QPT_XRC_TGT
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeXRCIni:
		return "XRC_INI"
	case QPTypeXRCTgt:
		return "XRC_TGT"
	}
	return fmt.Sprintf("QPType(%d)", uint32(t))
}

// MigState is enum ib_mig_state (QPAttr.PathMigState).
type MigState uint32

const (
	MigMigrated MigState = 0 // IB_MIG_MIGRATED
	MigRearm    MigState = 1 // IB_MIG_REARM
	MigArmed    MigState = 2 // IB_MIG_ARMED
)

// AccessFlags are enum ib_access_flags bits (QPAttr.QPAccessFlags).
type AccessFlags uint32

const (
	AccessLocalWrite   AccessFlags = 1 << 0 // IB_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  AccessFlags = 1 << 1 // IB_ACCESS_REMOTE_WRITE
	AccessRemoteRead   AccessFlags = 1 << 2 // IB_ACCESS_REMOTE_READ
	AccessRemoteAtomic AccessFlags = 1 << 3 // IB_ACCESS_REMOTE_ATOMIC
)

// QPAttrMask is the enum ib_qp_attr_mask bit set (equal to IBV_QP_*) that
// says which QPAttr fields INIT_QP_ATTR filled in.
type QPAttrMask uint32

const (
	QPAttrState            QPAttrMask = 1 << 0  // IB_QP_STATE
	QPAttrCurState         QPAttrMask = 1 << 1  // IB_QP_CUR_STATE
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2  // IB_QP_EN_SQD_ASYNC_NOTIFY
	QPAttrAccessFlags      QPAttrMask = 1 << 3  // IB_QP_ACCESS_FLAGS
	QPAttrPKeyIndex        QPAttrMask = 1 << 4  // IB_QP_PKEY_INDEX
	QPAttrPort             QPAttrMask = 1 << 5  // IB_QP_PORT
	QPAttrQKey             QPAttrMask = 1 << 6  // IB_QP_QKEY
	QPAttrAV               QPAttrMask = 1 << 7  // IB_QP_AV
	QPAttrPathMTU          QPAttrMask = 1 << 8  // IB_QP_PATH_MTU
	QPAttrTimeout          QPAttrMask = 1 << 9  // IB_QP_TIMEOUT
	QPAttrRetryCnt         QPAttrMask = 1 << 10 // IB_QP_RETRY_CNT
	QPAttrRNRRetry         QPAttrMask = 1 << 11 // IB_QP_RNR_RETRY
	QPAttrRQPSN            QPAttrMask = 1 << 12 // IB_QP_RQ_PSN
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13 // IB_QP_MAX_QP_RD_ATOMIC
	QPAttrAltPath          QPAttrMask = 1 << 14 // IB_QP_ALT_PATH
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15 // IB_QP_MIN_RNR_TIMER
	QPAttrSQPSN            QPAttrMask = 1 << 16 // IB_QP_SQ_PSN
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17 // IB_QP_MAX_DEST_RD_ATOMIC
	QPAttrPathMigState     QPAttrMask = 1 << 18 // IB_QP_PATH_MIG_STATE
	QPAttrCap              QPAttrMask = 1 << 19 // IB_QP_CAP
	QPAttrDestQPN          QPAttrMask = 1 << 20 // IB_QP_DEST_QPN
)

var qpAttrMaskNames = [...]string{
	"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX",
	"PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
	"RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN",
	"MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN",
}

// String lists the set bits as "STATE|AV|…"; unknown bits print in hex.
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var sb strings.Builder
	for v := uint32(m); v != 0; v &= v - 1 {
		i := bits.TrailingZeros32(v)
		if sb.Len() > 0 {
			sb.WriteByte('|')
		}
		if i < len(qpAttrMaskNames) {
			sb.WriteString(qpAttrMaskNames[i])
		} else {
			fmt.Fprintf(&sb, "%#x", uint32(1)<<i)
		}
	}
	return sb.String()
}

// GlobalRoute is struct ib_uverbs_global_route, the GRH part of AHAttr.
// All fields are host order.
type GlobalRoute struct {
	DGID         [16]byte // @0
	FlowLabel    uint32   // @16 host order, unlike PathRec.FlowLabel
	SGIDIndex    uint8    // @20
	HopLimit     uint8    // @21
	TrafficClass uint8    // @22
}

func (*GlobalRoute) Size() int { return GlobalRouteSize }

func (g *GlobalRoute) Encode(b []byte) {
	b = fit(b, GlobalRouteSize)
	copy(b[0:16], g.DGID[:])
	ne.PutUint32(b[16:], g.FlowLabel)
	b[20] = g.SGIDIndex
	b[21] = g.HopLimit
	b[22] = g.TrafficClass
	b[23] = 0
}

func (g *GlobalRoute) Decode(b []byte) {
	var w [GlobalRouteSize]byte
	copy(w[:], b)
	copy(g.DGID[:], w[0:16])
	g.FlowLabel = ne.Uint32(w[16:])
	g.SGIDIndex = w[20]
	g.HopLimit = w[21]
	g.TrafficClass = w[22]
}

// AHAttr is struct ib_uverbs_ah_attr, an address vector. All fields are host
// order, DLID included.
type AHAttr struct {
	GRH         GlobalRoute // @0, meaningful when IsGlobal != 0
	DLID        uint16      // @24
	SL          uint8       // @26
	SrcPathBits uint8       // @27
	StaticRate  uint8       // @28
	IsGlobal    uint8       // @29
	PortNum     uint8       // @30
}

func (*AHAttr) Size() int { return AHAttrSize }

func (a *AHAttr) Encode(b []byte) {
	b = fit(b, AHAttrSize)
	a.GRH.Encode(b[0:GlobalRouteSize])
	ne.PutUint16(b[24:], a.DLID)
	b[26] = a.SL
	b[27] = a.SrcPathBits
	b[28] = a.StaticRate
	b[29] = a.IsGlobal
	b[30] = a.PortNum
	b[31] = 0
}

func (a *AHAttr) Decode(b []byte) {
	var w [AHAttrSize]byte
	copy(w[:], b)
	a.GRH.Decode(w[0:GlobalRouteSize])
	a.DLID = ne.Uint16(w[24:])
	a.SL = w[26]
	a.SrcPathBits = w[27]
	a.StaticRate = w[28]
	a.IsGlobal = w[29]
	a.PortNum = w[30]
}

// QPAttr is struct ib_uverbs_qp_attr, the INIT_QP_ATTR response. All fields
// are host order. The kernel left the GRH of a non-global AHAttr as stack
// garbage; Encode always writes every byte, so a zero field is a zero byte.
type QPAttr struct {
	QPAttrMask       QPAttrMask  // @0
	QPState          QPState     // @4 (libibcm does not copy it back)
	CurQPState       QPState     // @8
	PathMTU          uint32      // @12 enum ib_mtu
	PathMigState     MigState    // @16
	QKey             uint32      // @20
	RQPSN            uint32      // @24
	SQPSN            uint32      // @28
	DestQPNum        uint32      // @32
	QPAccessFlags    AccessFlags // @36
	AHAttr           AHAttr      // @40
	AltAHAttr        AHAttr      // @72
	MaxSendWR        uint32      // @104
	MaxRecvWR        uint32      // @108
	MaxSendSGE       uint32      // @112
	MaxRecvSGE       uint32      // @116
	MaxInlineData    uint32      // @120
	PKeyIndex        uint16      // @124
	AltPKeyIndex     uint16      // @126
	EnSQDAsyncNotify uint8       // @128
	SQDraining       uint8       // @129
	MaxRdAtomic      uint8       // @130
	MaxDestRdAtomic  uint8       // @131
	MinRNRTimer      uint8       // @132
	PortNum          uint8       // @133
	Timeout          uint8       // @134
	RetryCnt         uint8       // @135
	RNRRetry         uint8       // @136
	AltPortNum       uint8       // @137
	AltTimeout       uint8       // @138
}

func (*QPAttr) Size() int { return QPAttrSize }

func (q *QPAttr) Encode(b []byte) {
	b = fit(b, QPAttrSize)
	ne.PutUint32(b[0:], uint32(q.QPAttrMask))
	ne.PutUint32(b[4:], uint32(q.QPState))
	ne.PutUint32(b[8:], uint32(q.CurQPState))
	ne.PutUint32(b[12:], q.PathMTU)
	ne.PutUint32(b[16:], uint32(q.PathMigState))
	ne.PutUint32(b[20:], q.QKey)
	ne.PutUint32(b[24:], q.RQPSN)
	ne.PutUint32(b[28:], q.SQPSN)
	ne.PutUint32(b[32:], q.DestQPNum)
	ne.PutUint32(b[36:], uint32(q.QPAccessFlags))
	q.AHAttr.Encode(b[40:72])
	q.AltAHAttr.Encode(b[72:104])
	ne.PutUint32(b[104:], q.MaxSendWR)
	ne.PutUint32(b[108:], q.MaxRecvWR)
	ne.PutUint32(b[112:], q.MaxSendSGE)
	ne.PutUint32(b[116:], q.MaxRecvSGE)
	ne.PutUint32(b[120:], q.MaxInlineData)
	ne.PutUint16(b[124:], q.PKeyIndex)
	ne.PutUint16(b[126:], q.AltPKeyIndex)
	b[128] = q.EnSQDAsyncNotify
	b[129] = q.SQDraining
	b[130] = q.MaxRdAtomic
	b[131] = q.MaxDestRdAtomic
	b[132] = q.MinRNRTimer
	b[133] = q.PortNum
	b[134] = q.Timeout
	b[135] = q.RetryCnt
	b[136] = q.RNRRetry
	b[137] = q.AltPortNum
	b[138] = q.AltTimeout
	clear(b[139:QPAttrSize])
}

func (q *QPAttr) Decode(b []byte) {
	var w [QPAttrSize]byte
	copy(w[:], b)
	q.QPAttrMask = QPAttrMask(ne.Uint32(w[0:]))
	q.QPState = QPState(ne.Uint32(w[4:]))
	q.CurQPState = QPState(ne.Uint32(w[8:]))
	q.PathMTU = ne.Uint32(w[12:])
	q.PathMigState = MigState(ne.Uint32(w[16:]))
	q.QKey = ne.Uint32(w[20:])
	q.RQPSN = ne.Uint32(w[24:])
	q.SQPSN = ne.Uint32(w[28:])
	q.DestQPNum = ne.Uint32(w[32:])
	q.QPAccessFlags = AccessFlags(ne.Uint32(w[36:]))
	q.AHAttr.Decode(w[40:72])
	q.AltAHAttr.Decode(w[72:104])
	q.MaxSendWR = ne.Uint32(w[104:])
	q.MaxRecvWR = ne.Uint32(w[108:])
	q.MaxSendSGE = ne.Uint32(w[112:])
	q.MaxRecvSGE = ne.Uint32(w[116:])
	q.MaxInlineData = ne.Uint32(w[120:])
	q.PKeyIndex = ne.Uint16(w[124:])
	q.AltPKeyIndex = ne.Uint16(w[126:])
	q.EnSQDAsyncNotify = w[128]
	q.SQDraining = w[129]
	q.MaxRdAtomic = w[130]
	q.MaxDestRdAtomic = w[131]
	q.MinRNRTimer = w[132]
	q.PortNum = w[133]
	q.Timeout = w[134]
	q.RetryCnt = w[135]
	q.RNRRetry = w[136]
	q.AltPortNum = w[137]
	q.AltTimeout = w[138]
}
