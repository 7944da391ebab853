package cmcore

// QP states (enum ib_qp_state) accepted by InitQPAttr.
const (
	QPStateInit = 1
	QPStateRTR  = 2
	QPStateRTS  = 3
)

// QP attribute mask bits (enum ib_qp_attr_mask; uverbs uses the same values).
const (
	QPAttrState           = 1 << 0
	QPAttrAccessFlags     = 1 << 3
	QPAttrPKeyIndex       = 1 << 4
	QPAttrPort            = 1 << 5
	QPAttrAV              = 1 << 7
	QPAttrPathMTU         = 1 << 8
	QPAttrTimeout         = 1 << 9
	QPAttrRetryCnt        = 1 << 10
	QPAttrRNRRetry        = 1 << 11
	QPAttrRQPSN           = 1 << 12
	QPAttrMaxQPRdAtomic   = 1 << 13
	QPAttrAltPath         = 1 << 14
	QPAttrMinRNRTimer     = 1 << 15
	QPAttrSQPSN           = 1 << 16
	QPAttrMaxDestRdAtomic = 1 << 17
	QPAttrPathMigState    = 1 << 18
	QPAttrDestQPN         = 1 << 20
)

// Access flags (enum ib_access_flags) and path migration state.
const (
	AccessRemoteWrite  = 2
	AccessRemoteRead   = 4
	AccessRemoteAtomic = 8
	MigRearm           = 1
)

// QPAttr is the subset of ib_qp_attr that ib_cm_init_qp_attr fills; only
// the fields named by the returned mask are meaningful.
type QPAttr struct {
	QPState         uint8
	AccessFlags     uint32
	PKeyIndex       uint16
	PortNum         uint8
	AH              AddressVector // primary: DLID, SL, rate, GRH, port
	PathMTU         uint8
	DestQPN         uint32
	RQPSN           uint32
	SQPSN           uint32
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	MaxRdAtomic     uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	AltAH           AddressVector
	AltPortNum      uint8
	AltPKeyIndex    uint16
	AltTimeout      uint8
	PathMigState    uint8
}

// InitQPAttr returns the attributes and mask to move the connection's QP
// to qpState (INIT, RTR or RTS), per ib-cm.md §7. EINVAL for any other
// target state or when the connection is not in a state where that step
// is known.
func (id *ID) InitQPAttr(qpState uint8) (QPAttr, uint32, error) {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	a := QPAttr{QPState: qpState}
	var mask uint32
	st := id.state
	connecting := st == StateREQRcvd || st == StateMRAREQSent || st == StateREPRcvd || st == StateMRAREPSent ||
		st == StateREPSent || st == StateMRAREPRcvd || st == StateEstablished
	if id.destroyed {
		return a, 0, errInval("init QP attr on a destroyed id")
	}
	hasAlt := id.altAV().DLID != 0
	switch qpState {
	case QPStateInit:
		if !connecting && st != StateREQSent && st != StateMRAREQRcvd {
			return a, 0, errInval("init QP attr INIT in state %v", st)
		}
		mask = QPAttrState | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPort
		a.AccessFlags = AccessRemoteWrite
		if id.responderResources != 0 {
			a.AccessFlags |= AccessRemoteRead | AccessRemoteAtomic
		}
		a.PKeyIndex = id.av.PKeyIndex
		a.PortNum = id.av.PortNum
	case QPStateRTR:
		if !connecting {
			return a, 0, errInval("init QP attr RTR in state %v", st)
		}
		mask = QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
		a.AH = id.av
		if id.datapathDLID != 0 {
			a.AH.DLID = id.datapathDLID
		}
		a.PathMTU = id.pathMTU
		a.DestQPN = id.remoteQPN
		a.RQPSN = id.rqPSN
		if id.qpType == QPTypeRC || id.qpType == QPTypeXRCTgt {
			mask |= QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
			a.MaxDestRdAtomic = id.responderResources
			a.MinRNRTimer = 0
		}
		if hasAlt {
			mask |= QPAttrAltPath
			id.fillAlt(&a)
		}
	case QPStateRTS:
		if !connecting {
			return a, 0, errInval("init QP attr RTS in state %v", st)
		}
		if id.lapState == LAPUninit {
			mask = QPAttrState | QPAttrSQPSN
			a.SQPSN = id.sqPSN
			switch id.qpType {
			case QPTypeRC, QPTypeXRCIni:
				mask |= QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
				a.RetryCnt = id.retryCount
				a.RNRRetry = id.rnrRetryCount
				a.MaxRdAtomic = id.initiatorDepth
				fallthrough
			case QPTypeXRCTgt:
				mask |= QPAttrTimeout
				a.Timeout = id.av.Timeout
			}
			if hasAlt {
				mask |= QPAttrPathMigState
				a.PathMigState = MigRearm
			}
		} else {
			mask = QPAttrAltPath | QPAttrPathMigState
			id.fillAlt(&a)
			a.PathMigState = MigRearm
		}
	default:
		return a, 0, errInval("init QP attr for QP state %d", qpState)
	}
	return a, mask, nil
}

func (id *ID) fillAlt(a *QPAttr) {
	alt := id.altAV()
	a.AltAH = alt
	a.AltPortNum = alt.PortNum
	a.AltPKeyIndex = alt.PKeyIndex
	a.AltTimeout = alt.Timeout
}
