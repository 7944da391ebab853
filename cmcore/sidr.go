package cmcore

// Service ID Resolution (SIDR_REQ / SIDR_REP): a UD QP lookup by service
// ID, with its own retransmitted request and a dedupe table on the
// responder side (ib-cm.md §3.4, §5.2).

import (
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

// SendSIDRREQ resolves a service ID to a UD QP (ib_send_cm_sidr_req); the
// request is retransmitted every TimeoutMs up to MaxCMRetries times.
// EINVAL: no path, private data over 216 bytes, not IDLE, or a path SGID
// not on this device.
func (id *ID) SendSIDRREQ(p *SIDRREQParams) error {
	if p.Path == nil {
		return errInval("SIDR_REQ without a path")
	}
	if err := checkLen("SIDR_REQ private data", p.PrivateData, wire.SIDRREQPrivateDataSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	// Outside the CM's lock, as the kernel looks it up before its id's:
	// that may read sysfs.
	av, pt, err := cm.avFromPath(p.Path)
	if err != nil {
		return err
	}
	cm.mu.Lock()
	if id.destroyed || id.state != StateIdle {
		defer cm.mu.Unlock()
		return errInval("send SIDR_REQ in state %v", id.state)
	}
	id.port, id.av, id.dst = pt, av, av.madAddress()
	id.serviceID, id.serviceMask = p.ServiceID, ^uint64(0)
	id.timeout = msDuration(uint64(p.TimeoutMs))
	id.maxRetries = p.MaxCMRetries
	id.tid = id.newTID()
	req := &wire.SIDRREQ{RequestID: id.localID, PartitionKey: p.Path.PKey, ServiceID: p.ServiceID, PrivateData: p.PrivateData}
	id.state = StateSIDRREQSent
	cm.startMsg(&t, id, cm.encode(id.tid, req, true), id.timeout, id.maxRetries)
	cm.unlock(&t)
	return nil
}

// SendSIDRREP answers a SIDR_REQ (ib_send_cm_sidr_rep); the id returns to
// IDLE. EINVAL: info over 72 bytes, private data over 136, or not
// SIDR_REQ_RCVD.
func (id *ID) SendSIDRREP(p *SIDRREPParams) error {
	if err := checkLen("SIDR_REP info", p.Info, wire.SIDRREPInfoSize); err != nil {
		return err
	}
	if err := checkLen("SIDR_REP private data", p.PrivateData, wire.SIDRREPPrivateDataSize); err != nil {
		return err
	}
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if id.destroyed || id.state != StateSIDRREQRcvd {
		defer cm.mu.Unlock()
		return errInval("send SIDR_REP in state %v", id.state)
	}
	cm.sendSIDRREPLocked(&t, id, p)
	cm.unlock(&t)
	return nil
}

func (cm *CM) sendSIDRREPLocked(t *txn, id *ID, p *SIDRREPParams) {
	cm.sendMsg(t, id.port, id.dst, id.tid, &wire.SIDRREP{
		RequestID: id.remoteID, Status: p.Status, QPN: p.QPN & 0xFFFFFF, ServiceID: id.serviceID,
		QKey: p.QKey, Info: p.Info, PrivateData: p.PrivateData,
	})
	id.state = StateIdle
	if id.sidrEntry != nil {
		delete(cm.sidr, *id.sidrEntry)
		id.sidrEntry = nil
	}
}

// recvSIDRREQ is cm_sidr_req_handler: dedupe by (request ID, source),
// SIDR_REP status 1 when nobody listens, else a new id for the listener.
func (cm *CM) recvSIDRREQ(t *txn, in *rx, m *wire.SIDRREQ) {
	key := sidrKey{reqID: m.RequestID, lid: in.src.LID}
	if in.src.GRH != nil {
		key.gid = in.src.GRH.GID
	}
	if cm.sidr[key] != nil {
		return // duplicate
	}
	l := cm.listen.find(m.ServiceID)
	if l == nil {
		cm.sendMsg(t, in.p, in.src, in.tid, &wire.SIDRREP{RequestID: m.RequestID, Status: sidrUnsupported, ServiceID: m.ServiceID})
		return
	}
	id := &ID{cm: cm, handler: l.handler, context: l.context}
	cm.ids.alloc(id)
	id.state = StateSIDRREQRcvd
	id.remoteID = m.RequestID
	id.serviceID, id.serviceMask = m.ServiceID, ^uint64(0)
	id.tid = in.tid
	id.port, id.dst = in.p, in.src
	id.sidrEntry = &key
	cm.sidr[key] = id
	cm.post(Event{
		Type: EventSIDRREQReceived, ID: id, Listener: l,
		SIDRREQ: SIDRREQEventParam{
			ServiceID: m.ServiceID, PKey: m.PartitionKey, Port: uint8(in.p.num),
			BTHPKey: cm.pkeyAt(in.p, in.src.PKeyIndex),
		},
		PrivateData: m.PrivateData,
	}, l)
}

// recvSIDRREP is cm_sidr_rep_handler.
func (cm *CM) recvSIDRREP(t *txn, in *rx, m *wire.SIDRREP) {
	id := cm.acquire(m.RequestID, 0)
	if id == nil || id.state != StateSIDRREQSent {
		return
	}
	id.cancelMsg()
	id.state = StateIdle
	cm.post(Event{
		Type: EventSIDRREPReceived, ID: id,
		SIDRREP:     SIDRREPEventParam{Status: m.Status, QKey: m.QKey, QPN: m.QPN},
		Info:        m.Info,
		PrivateData: m.PrivateData,
	}, id)
}

// pkeyAt returns the P_Key at index i of p's table (the BTH P_Key of a
// MAD received with that index).
func (cm *CM) pkeyAt(p *port, i uint16) uint16 {
	attr, err := hw.AttrOf(p.hw)
	if err != nil || int(i) >= len(attr.PKeys) {
		return 0
	}
	return attr.PKeys[i]
}
