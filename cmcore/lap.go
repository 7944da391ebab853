package cmcore

import (
	"github.com/ucmd/ucmd/cmcore/wire"
)

// SendLAP proposes a new alternate path (ib_send_cm_lap). EINVAL: private
// data over 168 bytes, not ESTABLISHED, or a LAP already in progress; path
// errors as for SendREQ.
func (id *ID) SendLAP(alt *PathRecord, pd []byte) error {
	if err := checkLen("LAP private data", pd, wire.LAPPrivateDataSize); err != nil {
		return err
	}
	if alt == nil {
		return errInval("LAP without a path")
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if id.destroyed || id.state != StateEstablished || (id.lapState != LapUninit && id.lapState != LapIdle) {
		defer cm.mu.Unlock()
		return errInval("send LAP in state %v/%v", id.state, id.lapState)
	}
	altAV, _, err := cm.avFromPath(alt)
	if err != nil {
		cm.mu.Unlock()
		return err
	}
	altAV.Timeout = ackTimeout(id.targetAckDelay, alt.PacketLifeTime)
	id.altAV = altAV
	lap := &wire.LAP{
		LocalCommID:             id.localID,
		RemoteCommID:            id.remoteID,
		RemoteQPN:               id.remoteQPN & 0xFFFFFF,
		RemoteCMResponseTimeout: 0x1F, // what Linux sends ("todo" in cm.c)
		Alternate: wire.Path{
			LocalLID:        alt.SLID,
			RemoteLID:       alt.DLID,
			LocalGID:        alt.SGID,
			RemoteGID:       alt.DGID,
			FlowLabel:       alt.FlowLabel & 0xFFFFF,
			PacketRate:      alt.Rate & 0x3F,
			TrafficClass:    alt.TrafficClass,
			HopLimit:        alt.HopLimit,
			SL:              alt.SL & 0xF,
			SubnetLocal:     true, // Linux always sends 1
			LocalACKTimeout: ackTimeout(cm.ackDelay, alt.PacketLifeTime),
		},
		PrivateData: pd,
	}
	id.tid = id.newTID()
	cm.startMsg(&t, id, cm.encode(id.tid, lap, true), id.timeout, id.maxRetries)
	id.lapState = LapSent
	cm.unlock(&t)
	return nil
}

// SendAPR answers a LAP (ib_send_cm_apr). EINVAL: private data over 148
// bytes, info over 72, or no LAP received.
func (id *ID) SendAPR(status uint8, info, pd []byte) error {
	if err := checkLen("APR private data", pd, wire.APRPrivateDataSize); err != nil {
		return err
	}
	if err := checkLen("APR info", info, wire.APRInfoSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if id.destroyed || id.state != StateEstablished || (id.lapState != LapRcvd && id.lapState != LapMRALapSent) {
		defer cm.mu.Unlock()
		return errInval("send APR in state %v/%v", id.state, id.lapState)
	}
	cm.sendMsg(&t, id.port, id.dst, id.tid, &wire.APR{
		LocalCommID: id.localID, RemoteCommID: id.remoteID, APStatus: status, Info: info, PrivateData: pd,
	})
	id.lapState = LapIdle
	cm.unlock(&t)
	return nil
}

// SendSIDRReq resolves a service ID to a UD QP (ib_send_cm_sidr_req); the
// request is retransmitted every TimeoutMs up to MaxCMRetries times.
// EINVAL: no path, private data over 216 bytes, not IDLE, or a path SGID
// not on this device.
func (id *ID) SendSIDRReq(p *SIDRReqParams) error {
	if p.Path == nil {
		return errInval("SIDR_REQ without a path")
	}
	if err := checkLen("SIDR_REQ private data", p.PrivateData, wire.SIDRReqPrivateDataSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	av, pt, err := cm.avFromPath(p.Path)
	if err != nil {
		cm.mu.Unlock()
		return err
	}
	if id.destroyed || id.state != StateIdle {
		defer cm.mu.Unlock()
		return errInval("send SIDR_REQ in state %v", id.state)
	}
	id.port, id.av, id.dst = pt, av, av.madAddress()
	id.serviceID, id.serviceMask = p.ServiceID, ^uint64(0)
	id.timeout = msDuration(uint64(p.TimeoutMs))
	id.maxRetries = p.MaxCMRetries
	id.tid = id.newTID()
	req := &wire.SIDRReq{RequestID: id.localID, PartitionKey: p.Path.PKey, ServiceID: p.ServiceID, PrivateData: p.PrivateData}
	id.state = StateSIDRReqSent
	cm.startMsg(&t, id, cm.encode(id.tid, req, true), id.timeout, id.maxRetries)
	cm.unlock(&t)
	return nil
}

// SendSIDRRep answers a SIDR_REQ (ib_send_cm_sidr_rep); the id returns to
// IDLE. EINVAL: info over 72 bytes, private data over 136, or not
// SIDR_REQ_RCVD.
func (id *ID) SendSIDRRep(p *SIDRRepParams) error {
	if err := checkLen("SIDR_REP info", p.Info, wire.SIDRRepInfoSize); err != nil {
		return err
	}
	if err := checkLen("SIDR_REP private data", p.PrivateData, wire.SIDRRepPrivateDataSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if id.destroyed || id.state != StateSIDRReqRcvd {
		defer cm.mu.Unlock()
		return errInval("send SIDR_REP in state %v", id.state)
	}
	cm.sendSIDRRepLocked(&t, id, p)
	cm.unlock(&t)
	return nil
}

func (cm *CM) sendSIDRRepLocked(t *txn, id *ID, p *SIDRRepParams) {
	cm.sendMsg(t, id.port, id.dst, id.tid, &wire.SIDRRep{
		RequestID: id.remoteID, Status: p.Status, QPN: p.QPN & 0xFFFFFF, ServiceID: id.serviceID,
		QKey: p.QKey, Info: p.Info, PrivateData: p.PrivateData,
	})
	id.state = StateIdle
	if id.sidrEntry != nil {
		delete(cm.sidr, *id.sidrEntry)
		id.sidrEntry = nil
	}
}
