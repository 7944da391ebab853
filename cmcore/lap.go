package cmcore

// Alternate path management: LAP proposes a new alternate path for an
// established connection, APR answers it (IB only; dropped on RoCE ports).

import (
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
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
	if id.destroyed || id.state != StateEstablished || (id.lapState != LAPUninit && id.lapState != LAPIdle) {
		defer cm.mu.Unlock()
		return errInval("send LAP in state %v/%v", id.state, id.lapState)
	}
	altAV, _, err := cm.avFromPath(alt)
	if err != nil {
		cm.mu.Unlock()
		return err
	}
	altAV.Timeout = ackTimeout(id.targetAckDelay, alt.PacketLifeTime)
	id.setAltAV(altAV)
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
	id.lapState = LAPSent
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
	if id.destroyed || id.state != StateEstablished || (id.lapState != LAPRcvd && id.lapState != LAPMRALAPSent) {
		defer cm.mu.Unlock()
		return errInval("send APR in state %v/%v", id.state, id.lapState)
	}
	cm.sendMsg(&t, id.port, id.dst, id.tid, &wire.APR{
		LocalCommID: id.localID, RemoteCommID: id.remoteID, APStatus: status, Info: info, PrivateData: pd,
	})
	id.lapState = LAPIdle
	cm.unlock(&t)
	return nil
}

// recvLAP is cm_lap_handler.
func (cm *CM) recvLAP(t *txn, in *rx, m *wire.LAP) {
	if cm.isRoCE(in.p) {
		return
	}
	id := cm.acquire(m.RemoteCommID, m.LocalCommID)
	if id == nil || id.state != StateEstablished {
		return
	}
	a := &m.Alternate
	path := PathRecord{
		DGID: a.LocalGID, SGID: a.RemoteGID, DLID: a.LocalLID, SLID: a.RemoteLID,
		FlowLabel: a.FlowLabel, TrafficClass: a.TrafficClass, HopLimit: a.HopLimit,
		SL: a.SL, Rate: a.PacketRate, PKey: id.pkey, MTU: id.pathMTU, Reversible: true,
		MTUSelector: 1, RateSelector: 1, PacketLifeTimeSelector: 1,
	}
	if a.LocalACKTimeout > 0 {
		path.PacketLifeTime = a.LocalACKTimeout - 1
	}
	// An alternate path no local port can take (its GID or the P_Key is
	// not ours) drops the LAP before anything else, duplicates included,
	// and the peer's LAP times out, as cm_lap_handler has since 5.14 (up
	// to 5.13 it checked the LAP state first, so a duplicate in
	// MRA_LAP_SENT got its MRA whatever its path). Unlike 5.14's, a LAP
	// that is not taken changes no address.
	alt, _, err := cm.avFromPath(&path)
	if err != nil {
		return
	}
	switch id.lapState {
	case LAPUninit, LAPIdle:
	case LAPMRALAPSent:
		cm.sendMsg(t, in.p, in.src, in.tid, &wire.MRA{
			LocalCommID: id.localID, RemoteCommID: id.remoteID, MessageMRAed: msgOther,
			ServiceTimeout: id.mraTimeout, PrivateData: id.savedMRA(),
		})
		return
	default:
		return
	}
	// The primary AV follows the LAP's source (cm_init_av_for_lap).
	id.port, id.dst = in.p, in.src
	id.setAltAV(alt)
	id.tid = in.tid
	id.lapState = LAPRcvd
	cm.post(Event{Type: EventLAPReceived, ID: id, LAP: LAPEventParam{Alternate: path}, PrivateData: m.PrivateData}, id)
}

// recvAPR is cm_apr_handler.
func (cm *CM) recvAPR(t *txn, in *rx, m *wire.APR) {
	if cm.isRoCE(in.p) {
		return
	}
	id := cm.acquire(m.RemoteCommID, m.LocalCommID)
	if id == nil || id.state != StateEstablished || (id.lapState != LAPSent && id.lapState != LAPMRALAPRcvd) {
		return
	}
	id.lapState = LAPIdle
	id.cancelMsg()
	cm.post(Event{Type: EventAPRReceived, ID: id, APR: APREventParam{Status: m.APStatus}, Info: m.Info, PrivateData: m.PrivateData}, id)
}

// isRoCE: LAP and APR are not used on RoCE; Linux drops them there.
func (cm *CM) isRoCE(p *port) bool {
	attr, err := hw.AttrOf(p.hw)
	return err == nil && attr.LinkLayer == hw.LinkEthernet
}
