package cmcore

import (
	"slices"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

// recvREQ is the passive REQ pipeline of ib-cm.md §5.4, in its order:
// duplicate, stale connection, listener, path, then the new id.
func (cm *CM) recvREQ(t *txn, in *rx, m *wire.REQ) {
	// 4. Duplicate: this REQ's connection already has an id.
	if cur := cm.remoteIDs.get(idKey{m.LocalCommID, m.LocalCAGUID}); cur != nil {
		switch cur.state {
		// Answers go to this duplicate's source (cm_dup_req_handler's
		// cm_alloc_response_msg).
		case StateREQRcvd:
			if cm.autoMRA != 0 { // Options.AutoMRA; the state stays
				cm.sendMsg(t, in.p, in.src, cur.tid, &wire.MRA{
					LocalCommID: cur.localID, RemoteCommID: cur.remoteID,
					MessageMRAed: msgREQ, ServiceTimeout: cm.autoMRA,
				})
			}
		case StateMRAREQSent:
			cm.sendMRALocked(t, in.p, in.src, cur, msgREQ)
		case StateTimewait:
			cm.sendMsg(t, in.p, in.src, in.tid, &wire.REJ{
				LocalCommID: cur.localID, RemoteCommID: cur.remoteID,
				MessageRejected: msgOther, Reason: rejStaleConn,
			})
		}
		return
	}
	// 5. Stale: the peer reuses a QPN we still consider connected.
	if cur := cm.remoteQPNs.get(idKey{m.LocalQPN, m.LocalCAGUID}); cur != nil {
		cm.issueREJ(t, in, 0, m.LocalCommID, msgREQ, rejStaleConn, nil)
		if cur.state == StateEstablished {
			cm.sendDREQLocked(t, cur, nil)
		}
		return
	}
	// 6. Listener.
	l := cm.listen.find(m.ServiceID)
	if l == nil {
		cm.issueREJ(t, in, 0, m.LocalCommID, msgREQ, rejInvalidServiceID, nil)
		return
	}
	// 1-3. The new id, answering to the REQ's source until the user's REP.
	id := &ID{cm: cm, handler: l.handler, context: l.context}
	cm.ids.alloc(id)
	id.remoteID = m.LocalCommID
	id.remoteCAGUID = m.LocalCAGUID
	id.remoteQPN = m.LocalQPN
	id.remoteQKey = m.LocalQKey
	id.serviceID, id.serviceMask = m.ServiceID, ^uint64(0)
	id.tid = in.tid
	id.port, id.dst = in.p, in.src
	id.timeout = msDuration(convertToMs(m.LocalCMResponseTimeout))
	id.maxRetries = m.MaxCMRetries
	id.qpType = reqQPType(m)
	id.sqPSN = m.StartingPSN
	id.initiatorDepth = m.ResponderResources
	id.responderResources = m.InitiatorDepth
	id.retryCount = m.RetryCount
	id.rnrRetryCount = m.RNRRetryCount
	id.pathMTU = m.PathMTU
	id.pkey = m.PartitionKey
	id.state = StateREQRcvd
	cm.insertRemote(id) // cannot collide: both keys were checked above

	// 7-8. Paths and the QP's address vectors.
	attr, _ := hw.AttrOf(in.p.hw)
	primary := cm.pathFromREQ(in, &attr, m, &m.Primary, true)
	av, pt, err := cm.avFromPath(&primary)
	if err != nil {
		// The ARI is our GID at index 0, none if that slot is empty
		// (cm_req_handler's rdma_query_gid of index 0).
		var ari []byte
		if i := slices.IndexFunc(attr.GIDs, func(g hw.GIDEntry) bool { return g.Index == 0 }); i >= 0 {
			g := attr.GIDs[i].GID
			ari = g[:]
		}
		cm.sendREJLocked(t, id, rejInvalidGID, ari, nil)
		cm.ids.release(id)
		id.destroyed = true
		return
	}
	if m.Primary.LocalACKTimeout > 0 {
		av.Timeout = m.Primary.LocalACKTimeout
	}
	if g := in.src.GRH; g != nil && attr.LinkLayer == hw.LinkEthernet && pt == in.p {
		// The QP sends from the GID entry the REQ arrived on, as
		// cm_req_handler takes the packet's sgid_attr: one address sits in
		// several entries (one per RoCE type and per VLAN netdev), and only
		// the packet's names the type and VLAN the peer used. The MADs keep
		// the packet's source but take the path's traffic class and flow
		// label (the kernel's av), not the packet's: RoCE v2 over IPv4
		// reports those as 0.
		av.GRH.SGIDIndex = g.SGIDIndex
		src := *g
		src.TrafficClass, src.FlowLabel = av.GRH.TrafficClass, av.GRH.FlowLabel
		id.dst.GRH = &src
	}
	id.av = av
	// The QP sends to the LID the REQ names for the peer, the MADs to the
	// packet's source: across subnets a REQ may carry its inbound path's
	// DLID there (6.1's av.dlid_datapath; before 6.1 the path itself took
	// the REQ's LID). A permissive or zero LID leaves the packet's.
	if l := m.Primary.LocalLID; attr.LinkLayer != hw.LinkEthernet && l != 0 && l != permissiveLID {
		id.datapathDLID = l
	}
	var alt *PathRecord
	if m.Alternate.LocalLID != 0 {
		p := cm.pathFromREQ(in, &attr, m, &m.Alternate, false)
		altAV, _, err := cm.avFromPath(&p)
		if err != nil {
			cm.sendREJLocked(t, id, rejInvalidAltGID, primary.SGID[:], nil)
			cm.ids.release(id)
			id.destroyed = true
			return
		}
		if m.Alternate.LocalACKTimeout > 0 {
			altAV.Timeout = m.Alternate.LocalACKTimeout
		}
		id.setAltAV(altAV)
		alt = &p
	}

	// 9. Deliver on the listener.
	cm.post(Event{
		Type:        EventREQReceived,
		ID:          id,
		Listener:    l,
		PrivateData: m.PrivateData,
		REQ: REQEventParam{
			Primary:                 primary,
			Alternate:               alt,
			RemoteCAGUID:            m.LocalCAGUID,
			RemoteQKey:              m.LocalQKey,
			RemoteQPN:               m.LocalQPN,
			QPType:                  id.qpType,
			StartingPSN:             m.StartingPSN,
			ResponderResources:      m.InitiatorDepth,
			InitiatorDepth:          m.ResponderResources,
			LocalCMResponseTimeout:  m.RemoteCMResponseTimeout,
			FlowControl:             m.EndToEndFlowControl,
			RemoteCMResponseTimeout: m.LocalCMResponseTimeout,
			RetryCount:              m.RetryCount,
			RNRRetryCount:           m.RNRRetryCount,
			SRQ:                     m.SRQ,
			Port:                    uint8(pt.num), // the QP's (cm_format_req_event), which INIT_QP_ATTR gives
			BTHPKey:                 cm.pkeyAt(in.p, in.src.PKeyIndex),
		},
	}, l)
}

func reqQPType(m *wire.REQ) QPType {
	switch {
	case m.TransportType == wire.TransportRC:
		return QPTypeRC
	case m.TransportType == wire.TransportUC:
		return QPTypeUC
	case m.TransportType == wire.TransportExtended && m.ExtendedTransport == wire.ExtendedTransportXRC:
		return QPTypeXRCTgt
	}
	return 0
}

// pathFromREQ is cm_format_path_from_req (ib-cm.md §6.2): the REQ seen from
// the passive side. On IB a routed path (not subnet local) with permissive
// LIDs takes them from the received packet first (cm_process_routed_req):
// its source LID and SL for the REQ's local LID, its destination path bits
// for the remote one; and the primary DLID is the packet's source LID in
// any case (v6.1). RoCE paths have no LIDs. The primary's hop limit
// follows the received MAD's GRH.
func (cm *CM) pathFromREQ(in *rx, attr *hw.PortAttr, m *wire.REQ, rp *wire.Path, primary bool) PathRecord {
	p := PathRecord{
		DGID: rp.LocalGID, SGID: rp.RemoteGID,
		DLID: rp.LocalLID, SLID: rp.RemoteLID,
		FlowLabel: rp.FlowLabel, TrafficClass: rp.TrafficClass, HopLimit: rp.HopLimit,
		SL: rp.SL, Rate: rp.PacketRate, PKey: m.PartitionKey, MTU: m.PathMTU,
		Reversible: true, MTUSelector: 1, RateSelector: 1, PacketLifeTimeSelector: 1,
	}
	if rp.LocalACKTimeout > 0 {
		p.PacketLifeTime = rp.LocalACKTimeout - 1
	}
	roce := attr.LinkLayer == hw.LinkEthernet
	switch {
	case roce:
		p.DLID, p.SLID = 0, 0
	case !rp.SubnetLocal:
		if p.DLID == permissiveLID {
			p.DLID, p.SL = in.src.LID, in.src.SL
		}
		if p.SLID == permissiveLID {
			p.SLID = uint16(in.src.PathBits)
		}
	}
	if primary {
		if !roce {
			p.DLID = in.src.LID
		}
		p.HopLimit = 0
		if g := in.src.GRH; g != nil {
			p.HopLimit = 0xFF
			if roce {
				p.HopLimit = g.HopLimit
			}
			for _, e := range attr.GIDs {
				if e.Index == int(g.SGIDIndex) {
					p.GIDType = e.Type
				}
			}
		}
	}
	return p
}
