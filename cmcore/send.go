package cmcore

import (
	"fmt"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"golang.org/x/sys/unix"
)

func errInval(what string, args ...any) error {
	return fmt.Errorf("cmcore: "+what+": %w", append(args, unix.EINVAL)...)
}

func checkLen(what string, b []byte, limit int) error {
	if len(b) > limit {
		return errInval("%s of %d bytes exceeds %d", what, len(b), limit)
	}
	return nil
}

// newTID is the TID of a message that starts a transaction (REQ, DREQ,
// LAP, SIDR_REQ): the local comm ID in the low 32 bits, the only part umad
// leaves alone.
func (id *ID) newTID() uint64 { return uint64(id.localID) }

// SendREQ starts a connection (ib_send_cm_req). EINVAL: no primary path,
// unsupported QP type, private data over 92 bytes, an alternate path whose
// P_Key or MTU differs from the primary's, PeerToPeer, not IDLE, or a path
// SGID not on this device; ENOENT: P_Key not in the port's table.
func (id *ID) SendREQ(p *REQParams) error {
	if err := checkLen("REQ private data", p.PrivateData, wire.REQPrivateDataSize); err != nil {
		return err
	}
	if p.Primary == nil {
		return errInval("REQ without a primary path")
	}
	switch p.QPType {
	case QPTypeRC, QPTypeUC, QPTypeXRCIni:
	default:
		return errInval("REQ for QP type %d", p.QPType)
	}
	if alt := p.Alternate; alt != nil && (alt.PKey != p.Primary.PKey || alt.MTU != p.Primary.MTU) {
		return errInval("alternate path P_Key/MTU %#x/%d differ from primary %#x/%d", alt.PKey, alt.MTU, p.Primary.PKey, p.Primary.MTU)
	}
	if p.PeerToPeer {
		return errInval("peer-to-peer REQ is not supported")
	}
	cm := id.cm
	var t txn
	// The paths are looked up outside the CM's lock, which the device's
	// every command and MAD need (the lookup may read sysfs), and before
	// it, so that a busy device's SEND_REQ takes it once. An id that
	// cannot send a REQ now gets EINVAL for that whatever its paths, as
	// ib_send_cm_req checks the state first.
	av, pt, err := cm.avFromPath(p.Primary)
	var altAV AddressVector
	if err == nil && p.Alternate != nil {
		altAV, _, err = cm.avFromPath(p.Alternate)
	}
	cm.mu.Lock()
	if id.destroyed || id.state != StateIdle {
		defer cm.mu.Unlock()
		return errInval("send REQ in state %v", id.state)
	}
	if err != nil {
		cm.mu.Unlock()
		return err
	}
	id.port, id.av, id.dst = pt, av, av.madAddress()
	id.setAltAV(altAV)
	id.serviceID, id.serviceMask = p.ServiceID, ^uint64(0)
	id.timeout = msDuration(2*convertToMs(p.Primary.PacketLifeTime) + convertToMs(p.RemoteCMResponseTimeout))
	id.maxRetries = p.MaxCMRetries // the caller's u8, as the kernel's: only the REQ's field has 4 bits
	id.qpType = p.QPType
	id.localQPN = p.QPN & 0xFFFFFF
	id.rqPSN = p.StartingPSN & 0xFFFFFF
	id.initiatorDepth, id.responderResources = p.InitiatorDepth, p.ResponderResources
	id.retryCount = p.RetryCount // RTS retry_cnt as given; the REQ's field has 3 bits
	id.pathMTU = p.Primary.MTU
	id.pkey = p.Primary.PKey
	id.remoteID = 0
	id.tid = id.newTID()
	req := cm.formatREQ(id, p)
	id.state = StateREQSent
	cm.startMsg(&t, id, cm.encode(id.tid, req, true), id.timeout, id.maxRetries)
	cm.unlock(&t)
	return nil
}

// formatREQ is cm_format_req.
func (cm *CM) formatREQ(id *ID, p *REQParams) *wire.REQ {
	req := &wire.REQ{
		LocalCommID:             id.localID,
		ServiceID:               p.ServiceID,
		LocalCAGUID:             cm.nodeGUID,
		LocalQPN:                p.QPN & 0xFFFFFF,
		InitiatorDepth:          p.InitiatorDepth,
		RemoteCMResponseTimeout: p.RemoteCMResponseTimeout & 0x1F,
		EndToEndFlowControl:     p.FlowControl,
		StartingPSN:             p.StartingPSN & 0xFFFFFF,
		LocalCMResponseTimeout:  p.LocalCMResponseTimeout & 0x1F,
		PartitionKey:            p.Primary.PKey,
		PathMTU:                 p.Primary.MTU & 0xF,
		MaxCMRetries:            p.MaxCMRetries & 0xF,
		Primary:                 cm.reqPath(p.Primary),
		PrivateData:             p.PrivateData,
	}
	switch p.QPType {
	case QPTypeRC:
		req.TransportType = wire.TransportRC
	case QPTypeUC:
		req.TransportType = wire.TransportUC
	case QPTypeXRCIni:
		req.TransportType = wire.TransportExtended
		req.ExtendedTransport = wire.ExtendedTransportXRC
	}
	if p.QPType != QPTypeXRCIni {
		req.ResponderResources = p.ResponderResources
		req.RetryCount = p.RetryCount & 7
		req.RNRRetryCount = p.RNRRetryCount & 7
		req.SRQ = p.SRQ
	}
	if p.Alternate != nil {
		req.Alternate = cm.reqPath(p.Alternate)
	}
	return req
}

// reqPath is the per-path part of cm_format_req (ib-cm.md §6.1): routed
// paths get permissive LIDs until the remote LID info is known.
func (cm *CM) reqPath(p *PathRecord) wire.Path {
	local, remote := p.SLID, p.DLID
	if p.HopLimit > 1 {
		local, remote = permissiveLID, permissiveLID
	}
	return wire.Path{
		LocalLID:        local,
		RemoteLID:       remote,
		LocalGID:        p.SGID,
		RemoteGID:       p.DGID,
		FlowLabel:       p.FlowLabel & 0xFFFFF,
		PacketRate:      p.Rate & 0x3F,
		TrafficClass:    p.TrafficClass,
		HopLimit:        p.HopLimit,
		SL:              p.SL & 0xF,
		SubnetLocal:     p.HopLimit <= 1,
		LocalACKTimeout: ackTimeout(cm.ackDelay, p.PacketLifeTime),
	}
}

// SendREP accepts a REQ (ib_send_cm_rep). EINVAL: private data over 196
// bytes, or not REQ_RCVD/MRA_REQ_SENT.
func (id *ID) SendREP(p *REPParams) error {
	if err := checkLen("REP private data", p.PrivateData, wire.REPPrivateDataSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if id.destroyed || (id.state != StateREQRcvd && id.state != StateMRAREQSent) {
		defer cm.mu.Unlock()
		return errInval("send REP in state %v", id.state)
	}
	id.localQPN = p.QPN & 0xFFFFFF
	id.rqPSN = p.StartingPSN & 0xFFFFFF
	id.initiatorDepth, id.responderResources = p.InitiatorDepth, p.ResponderResources
	rep := &wire.REP{
		LocalCommID:        id.localID,
		RemoteCommID:       id.remoteID,
		StartingPSN:        id.rqPSN,
		ResponderResources: p.ResponderResources,
		TargetACKDelay:     cm.ackDelay & 0x1F,
		FailoverAccepted:   p.FailoverAccepted & 3,
		RNRRetryCount:      p.RNRRetryCount & 7,
		SRQ:                p.SRQ,
		LocalCAGUID:        cm.nodeGUID,
		PrivateData:        p.PrivateData,
	}
	if id.qpType == QPTypeXRCTgt {
		rep.LocalEECN = id.localQPN
		rep.SRQ = true
	} else {
		rep.LocalQPN = id.localQPN
		rep.InitiatorDepth = p.InitiatorDepth
		rep.EndToEndFlowControl = p.FlowControl
	}
	id.state = StateREPSent
	cm.startMsg(&t, id, cm.encode(id.tid, rep, true), id.timeout, id.maxRetries)
	cm.unlock(&t)
	return nil
}

// SendRTU completes the active side (ib_send_cm_rtu). The private data is
// kept to answer duplicate REPs. EINVAL: over 224 bytes, or not
// REP_RCVD/MRA_REP_SENT.
func (id *ID) SendRTU(pd []byte) error {
	if err := checkLen("RTU private data", pd, wire.RTUPrivateDataSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if id.destroyed || (id.state != StateREPRcvd && id.state != StateMRAREPSent) {
		defer cm.mu.Unlock()
		return errInval("send RTU in state %v", id.state)
	}
	id.savePD(pickRTU, pd)
	id.state = StateEstablished
	cm.sendRTULocked(&t, id.port, id.dst, id)
	cm.unlock(&t)
	return nil
}

// sendRTULocked sends id's RTU to dst on p: the connection's address, or
// a duplicate REP's source, which the kernel answers there
// (cm_dup_rep_handler's cm_alloc_response_msg).
func (cm *CM) sendRTULocked(t *txn, p *port, dst hw.Address, id *ID) {
	cm.sendMsg(t, p, dst, id.tid, &wire.RTU{LocalCommID: id.localID, RemoteCommID: id.remoteID, PrivateData: id.savedRTU()})
}

// SendDREQ starts a disconnect (ib_send_cm_dreq); an outstanding LAP is
// abandoned. EINVAL: over 220 bytes, or not ESTABLISHED.
func (id *ID) SendDREQ(pd []byte) error {
	if err := checkLen("DREQ private data", pd, wire.DREQPrivateDataSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if id.destroyed || id.state != StateEstablished {
		defer cm.mu.Unlock()
		return errInval("send DREQ in state %v", id.state)
	}
	cm.sendDREQLocked(&t, id, pd)
	cm.unlock(&t)
	return nil
}

func (cm *CM) sendDREQLocked(t *txn, id *ID, pd []byte) {
	id.tid = id.newTID()
	dreq := &wire.DREQ{LocalCommID: id.localID, RemoteCommID: id.remoteID, RemoteQPN: id.remoteQPN & 0xFFFFFF, PrivateData: pd}
	id.state = StateDREQSent
	cm.startMsg(t, id, cm.encode(id.tid, dreq, true), id.timeout, id.maxRetries)
}

// SendDREP answers a DREQ (ib_send_cm_drep) and enters TIMEWAIT. The
// private data is kept to answer duplicate DREQs. EINVAL: over 224 bytes,
// or not DREQ_RCVD.
func (id *ID) SendDREP(pd []byte) error {
	if err := checkLen("DREP private data", pd, wire.DREPPrivateDataSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if id.destroyed || id.state != StateDREQRcvd {
		defer cm.mu.Unlock()
		return errInval("send DREP in state %v", id.state)
	}
	cm.sendDREPLocked(&t, id, id.savePD(pickDREP, pd))
	cm.unlock(&t)
	return nil
}

func (cm *CM) sendDREPLocked(t *txn, id *ID, pd []byte) {
	cm.sendMsg(t, id.port, id.dst, id.tid, &wire.DREP{LocalCommID: id.localID, RemoteCommID: id.remoteID, PrivateData: pd})
	cm.enterTimewait(id)
}

// SendREJ rejects a connection being set up (ib_send_cm_rej). EINVAL:
// private data over 148 bytes, ARI over 72, or a state other than
// REQ_SENT, MRA_REQ_RCVD, REQ_RCVD, MRA_REQ_SENT, REP_RCVD, MRA_REP_SENT
// (→ IDLE), REP_SENT, MRA_REP_RCVD (→ TIMEWAIT).
func (id *ID) SendREJ(reason uint16, ari, pd []byte) error {
	if err := checkLen("REJ private data", pd, wire.REJPrivateDataSize); err != nil {
		return err
	}
	if err := checkLen("REJ ARI", ari, wire.REJARISize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if id.destroyed || !rejectable(id.state) {
		defer cm.mu.Unlock()
		return errInval("send REJ in state %v", id.state)
	}
	cm.sendREJLocked(&t, id, reason, ari, pd)
	cm.unlock(&t)
	return nil
}

// rejectable reports whether ib_send_cm_rej accepts state.
func rejectable(s State) bool {
	switch s {
	case StateREQSent, StateMRAREQRcvd, StateREQRcvd, StateMRAREQSent,
		StateREPRcvd, StateMRAREPSent, StateREPSent, StateMRAREPRcvd:
		return true
	}
	return false
}

// sendREJLocked formats a REJ per ib-cm.md §3.3 and moves the id to IDLE or
// (after a REP was sent) TIMEWAIT.
func (cm *CM) sendREJLocked(t *txn, id *ID, reason uint16, ari, pd []byte) {
	rej := &wire.REJ{LocalCommID: id.localID, RemoteCommID: id.remoteID, MessageRejected: msgOther, Reason: reason, ARI: ari, PrivateData: pd}
	switch id.state {
	case StateREQRcvd:
		rej.LocalCommID = 0
		rej.MessageRejected = msgREQ
	case StateMRAREQSent:
		rej.MessageRejected = msgREQ
	case StateREPRcvd, StateMRAREPSent:
		rej.MessageRejected = msgREP
	}
	cm.sendMsg(t, id.port, id.dst, id.tid, rej)
	switch id.state {
	case StateREPSent, StateMRAREPRcvd:
		cm.enterTimewait(id)
	default:
		cm.resetToIdle(id)
	}
}

// SendMRA asks the peer to wait (ib_send_cm_mra): REQ_RCVD → MRA_REQ_SENT,
// REP_RCVD → MRA_REP_SENT, ESTABLISHED with a LAP received → MRA_LAP_SENT.
// serviceTimeout's low 5 bits are the Service Timeout; with MRAFlagDelay
// set nothing is sent now, the MRA only answers duplicates. EINVAL: over
// 222 bytes or another state.
func (id *ID) SendMRA(serviceTimeout uint8, pd []byte) error {
	if err := checkLen("MRA private data", pd, wire.MRAPrivateDataSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	var mraed uint8
	switch {
	case id.destroyed:
		mraed = 0xFF
	case id.state == StateREQRcvd:
		mraed = msgREQ
		id.state = StateMRAREQSent
	case id.state == StateREPRcvd:
		mraed = msgREP
		id.state = StateMRAREPSent
	case id.state == StateEstablished && id.lapState == LAPRcvd:
		mraed = msgOther
		id.lapState = LAPMRALAPSent
	default:
		mraed = 0xFF
	}
	if mraed == 0xFF {
		defer cm.mu.Unlock()
		return errInval("send MRA in state %v/%v", id.state, id.lapState)
	}
	id.mraTimeout = serviceTimeout & 0x1F
	id.savePD(pickMRA, pd)
	if serviceTimeout&MRAFlagDelay == 0 {
		cm.sendMRALocked(&t, id.port, id.dst, id, mraed)
	}
	cm.unlock(&t)
	return nil
}

// sendMRALocked sends id's MRA to dst on p: the connection's address, or
// a duplicate's source, where the kernel answers duplicates
// (cm_alloc_response_msg).
func (cm *CM) sendMRALocked(t *txn, p *port, dst hw.Address, id *ID, mraed uint8) {
	cm.sendMsg(t, p, dst, id.tid, &wire.MRA{
		LocalCommID: id.localID, RemoteCommID: id.remoteID, MessageMRAed: mraed,
		ServiceTimeout: id.mraTimeout, PrivateData: id.savedMRA(),
	})
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
