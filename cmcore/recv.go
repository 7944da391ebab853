package cmcore

import (
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

// rx is one received CM message being handled.
type rx struct {
	p   *port
	src hw.Address // echo to answer
	tid uint64
}

// handleMAD decodes one received MAD and runs the §3.4 row for it. Bad
// MADs are dropped: nothing from the wire can panic or block the CM. The
// receiver itself may wait before its next MAD while the backlog of
// events is full (throttle).
func (cm *CM) handleMAD(p *port, r *hw.Received) {
	cm.stats.received.Add(1)
	var at time.Time
	if cm.obs != nil {
		at = cm.obsNow()
	}
	h, m, err := wire.Decode(&r.MAD)
	if err != nil {
		cm.stats.dropped.Add(1)
		cm.log.Debug("cmcore: dropping MAD", "port", p.num, "err", err)
		if cm.obs != nil {
			cm.observeReceived(at, p, MADDropped, r, "undecodable: "+err.Error())
		}
		return
	}
	in := rx{p: p, src: r.Src, tid: h.TID}
	var t txn
	cm.mu.Lock()
	nev := cm.backlog()
	if !cm.closed {
		switch m := m.(type) {
		case *wire.REQ:
			cm.recvREQ(&t, &in, m)
		case *wire.MRA:
			cm.recvMRA(&t, &in, m)
		case *wire.REJ:
			cm.recvREJ(&t, &in, m)
		case *wire.REP:
			cm.recvREP(&t, &in, m)
		case *wire.RTU:
			cm.recvRTU(&t, &in, m)
		case *wire.DREQ:
			cm.recvDREQ(&t, &in, m)
		case *wire.DREP:
			cm.recvDREP(&t, &in, m)
		case *wire.LAP:
			cm.recvLAP(&t, &in, m)
		case *wire.APR:
			cm.recvAPR(&t, &in, m)
		case *wire.SIDRREQ:
			cm.recvSIDRREQ(&t, &in, m)
		case *wire.SIDRREP:
			cm.recvSIDRREP(&t, &in, m)
		}
	}
	if cm.obs == nil {
		cm.unlock(&t)
		cm.throttle()
		return
	}
	// Observed before the answers it caused are sent. A row that neither
	// answered nor raised an event ignored it. (r goes to the observer by
	// a copy and never into t: it must not escape the receive loop.)
	var reason string
	if t.n == 0 && cm.backlog() == nev {
		reason = "ignored"
	}
	deliver, closed := cm.release()
	if !closed {
		cm.observeRx(at, p, r, reason)
		cm.transmit(&t)
	}
	if deliver {
		cm.deliver()
	}
	cm.throttle()
}

// issueREJ is cm_issue_rej: a REJ built from a received message without an
// id, sent back to its source.
func (cm *CM) issueREJ(t *txn, in *rx, local, remote uint32, rejected uint8, reason uint16, ari []byte) {
	cm.sendMsg(t, in.p, in.src, in.tid, &wire.REJ{
		LocalCommID: local, RemoteCommID: remote, MessageRejected: rejected, Reason: reason, ARI: ari,
	})
}

// recvREP is cm_rep_handler: only an id that has not learned its peer yet
// takes a REP; duplicate remote IDs are dropped, reused QPNs are stale.
func (cm *CM) recvREP(t *txn, in *rx, m *wire.REP) {
	id := cm.acquire(m.RemoteCommID, 0)
	if id == nil {
		cm.dupREP(t, in, m)
		return
	}
	if id.state != StateREQSent && id.state != StateMRAREQRcvd {
		return
	}
	id.remoteID = m.LocalCommID
	id.remoteCAGUID = m.LocalCAGUID
	id.remoteQPN = m.LocalQPN
	if id.qpType == QPTypeXRCIni {
		id.remoteQPN = m.LocalEECN
	}
	dup, stale := cm.insertRemote(id)
	switch {
	case dup != nil:
		id.remoteID = 0
		return
	case stale != nil:
		id.remoteID = 0
		cm.issueREJ(t, in, m.RemoteCommID, m.LocalCommID, msgREP, rejStaleConn, nil)
		if stale.state == StateEstablished {
			cm.sendDREQLocked(t, stale, nil)
		}
		return
	}
	id.cancelMsg()
	id.initiatorDepth = m.ResponderResources
	id.responderResources = m.InitiatorDepth
	id.sqPSN = m.StartingPSN
	id.rnrRetryCount = m.RNRRetryCount
	id.targetAckDelay = m.TargetACKDelay
	id.remoteQKey = m.LocalQKey
	id.av.Timeout = ackTimeout(m.TargetACKDelay, id.av.Timeout-1)
	if id.alt != nil && (id.alt.DLID != 0 || id.alt.IsGlobal) {
		id.alt.Timeout = ackTimeout(m.TargetACKDelay, id.alt.Timeout-1)
	}
	id.state = StateREPRcvd
	cm.post(Event{
		Type:        EventREPReceived,
		ID:          id,
		PrivateData: m.PrivateData,
		REP: REPEventParam{
			RemoteCAGUID:       m.LocalCAGUID,
			RemoteQKey:         m.LocalQKey,
			RemoteQPN:          id.remoteQPN,
			StartingPSN:        m.StartingPSN,
			ResponderResources: m.InitiatorDepth,
			InitiatorDepth:     m.ResponderResources,
			TargetACKDelay:     m.TargetACKDelay,
			FailoverAccepted:   m.FailoverAccepted,
			FlowControl:        m.EndToEndFlowControl,
			RNRRetryCount:      m.RNRRetryCount,
			SRQ:                m.SRQ,
		},
	}, id)
}

// dupREP is cm_dup_rep_handler: the REP was already processed, so the
// peer lost our answer.
func (cm *CM) dupREP(t *txn, in *rx, m *wire.REP) {
	id := cm.acquire(m.RemoteCommID, m.LocalCommID)
	if id == nil {
		return
	}
	switch id.state {
	case StateEstablished:
		cm.sendRTULocked(t, in.p, in.src, id)
	case StateMRAREPSent:
		cm.sendMRALocked(t, in.p, in.src, id, msgREP)
	}
}

// recvRTU is cm_rtu_handler.
func (cm *CM) recvRTU(t *txn, in *rx, m *wire.RTU) {
	id := cm.acquire(m.RemoteCommID, m.LocalCommID)
	if id == nil || (id.state != StateREPSent && id.state != StateMRAREPRcvd) {
		return
	}
	id.cancelMsg()
	id.state = StateEstablished
	cm.post(Event{Type: EventRTUReceived, ID: id, PrivateData: m.PrivateData}, id)
}

// recvDREQ is cm_dreq_handler: the DREQ must name our QPN.
func (cm *CM) recvDREQ(t *txn, in *rx, m *wire.DREQ) {
	id := cm.acquire(m.RemoteCommID, m.LocalCommID)
	if id == nil {
		// cm_issue_drep: answer so the peer can leave DREQ_SENT.
		cm.sendMsg(t, in.p, in.src, in.tid, &wire.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID})
		return
	}
	if m.RemoteQPN != id.localQPN {
		return
	}
	switch id.state {
	case StateREPSent, StateDREQSent, StateMRAREPRcvd:
		id.cancelMsg()
	case StateEstablished:
		if id.lapState == LAPSent || id.lapState == LAPMRALAPRcvd {
			id.cancelMsg()
		}
	case StateTimewait:
		cm.sendMsg(t, in.p, in.src, in.tid, &wire.DREP{LocalCommID: id.localID, RemoteCommID: id.remoteID, PrivateData: id.savedDREP()})
		return
	default:
		return
	}
	id.tid = in.tid
	id.state = StateDREQRcvd
	cm.post(Event{Type: EventDREQReceived, ID: id, PrivateData: m.PrivateData}, id)
}

// recvDREP is cm_drep_handler.
func (cm *CM) recvDREP(t *txn, in *rx, m *wire.DREP) {
	id := cm.acquire(m.RemoteCommID, m.LocalCommID)
	if id == nil || (id.state != StateDREQSent && id.state != StateDREQRcvd) {
		return
	}
	cm.enterTimewait(id)
	cm.post(Event{Type: EventDREPReceived, ID: id, PrivateData: m.PrivateData}, id)
}

// recvREJ is cm_rej_handler with cm_acquire_rejected_id's lookup: REJ
// TIMEOUT by (ARI CA GUID, remote comm ID), a rejected REQ by our ID alone.
func (cm *CM) recvREJ(t *txn, in *rx, m *wire.REJ) {
	var id *ID
	switch {
	case m.Reason == rejTimeout:
		if len(m.ARI) >= 8 {
			if cur := cm.remoteIDs.get(idKey{m.LocalCommID, be64(m.ARI)}); cur != nil && !cur.destroyed {
				id = cur
			}
		}
	case m.MessageRejected == msgREQ:
		id = cm.acquire(m.RemoteCommID, 0)
	default:
		id = cm.acquire(m.RemoteCommID, m.LocalCommID)
	}
	if id == nil {
		return
	}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREQRcvd, StateMRAREQSent:
		if m.Reason == rejStaleConn {
			cm.enterTimewait(id)
		} else {
			cm.resetToIdle(id)
		}
	case StateDREQSent, StateREPRcvd, StateMRAREPSent:
		cm.enterTimewait(id)
	case StateEstablished:
		if id.lapState != LAPUninit && id.lapState != LAPSent {
			return
		}
		cm.enterTimewait(id)
	default:
		return
	}
	cm.post(Event{
		Type: EventREJReceived, ID: id, REJ: REJEventParam{Reason: m.Reason},
		Info: m.ARI, PrivateData: m.PrivateData,
	}, id)
}

// recvMRA is cm_mra_handler: the first MRA for an outstanding message
// extends its retransmission; later ones are duplicates.
func (cm *CM) recvMRA(t *txn, in *rx, m *wire.MRA) {
	var id *ID
	switch m.MessageMRAed {
	case msgREQ:
		id = cm.acquire(m.RemoteCommID, 0)
	case msgREP, msgOther:
		id = cm.acquire(m.RemoteCommID, m.LocalCommID)
	}
	if id == nil || id.msg == nil {
		return
	}
	var next State
	switch {
	case m.MessageMRAed == msgREQ && id.state == StateREQSent:
		next = StateMRAREQRcvd
	case m.MessageMRAed == msgREP && id.state == StateREPSent:
		next = StateMRAREPRcvd
	case m.MessageMRAed == msgOther && id.state == StateEstablished && id.lapState == LAPSent:
		next = StateEstablished
		id.lapState = LAPMRALAPRcvd
	default:
		return // wrong state, or a second MRA
	}
	id.state = next
	cm.extendMsg(id.msg, msDuration(convertToMs(m.ServiceTimeout)+convertToMs(id.av.Timeout)), next)
	cm.post(Event{Type: EventMRAReceived, ID: id, MRA: MRAEventParam{ServiceTimeout: m.ServiceTimeout}, PrivateData: m.PrivateData}, id)
}

func be64(b []byte) uint64 {
	var v uint64
	for _, c := range b[:8] {
		v = v<<8 | uint64(c)
	}
	return v
}
