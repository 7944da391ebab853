package conformance

import (
	"fmt"

	"github.com/ucmd/ucmd/abi"
)

// Masks of ib-cm.md §7 for an RC connection without an alternate path.
const (
	maskInit = abi.QPAttrState | abi.QPAttrAccessFlags | abi.QPAttrPKeyIndex | abi.QPAttrPort
	maskRTR  = abi.QPAttrState | abi.QPAttrAV | abi.QPAttrPathMTU | abi.QPAttrDestQPN | abi.QPAttrRQPSN |
		abi.QPAttrMaxDestRdAtomic | abi.QPAttrMinRNRTimer
	maskRTS = abi.QPAttrState | abi.QPAttrSQPSN | abi.QPAttrRetryCnt | abi.QPAttrRNRRetry |
		abi.QPAttrMaxQPRdAtomic | abi.QPAttrTimeout
	remoteAll = abi.AccessRemoteWrite | abi.AccessRemoteRead | abi.AccessRemoteAtomic
)

// qpSide is what one end's INIT_QP_ATTR answers must hold.
type qpSide struct {
	destQPN, rqPSN, sqPSN uint32
	retry, rnrRetry       uint8
}

// checkQPAttrs asks for INIT, RTR and RTS and checks them (ib-cm.md §7).
func checkQPAttrs(c *Client, id uint32, path abi.PathRec, want qpSide) error {
	init, err := c.InitQPAttr(id, abi.QPStateInit)
	if err != nil {
		return check("INIT_QP_ATTR(INIT)", err)
	}
	if init.QPAttrMask != maskInit || init.QPState != abi.QPStateInit || init.QPAccessFlags != remoteAll || init.PortNum != 1 {
		return fmt.Errorf("INIT: mask %v state %v access %#x port %d", init.QPAttrMask, init.QPState, init.QPAccessFlags, init.PortNum)
	}
	rtr, err := c.InitQPAttr(id, abi.QPStateRTR)
	if err != nil {
		return check("INIT_QP_ATTR(RTR)", err)
	}
	if rtr.QPAttrMask != maskRTR || rtr.DestQPNum != want.destQPN || rtr.RQPSN != want.rqPSN ||
		rtr.PathMTU != path.MTU || rtr.MaxDestRdAtomic != 1 || rtr.MinRNRTimer != 0 ||
		rtr.AHAttr.DLID != path.DLID || rtr.AHAttr.PortNum != 1 {
		return fmt.Errorf("RTR: mask %v dest_qp %#x rq_psn %#x mtu %d max_dest_rd_atomic %d min_rnr %d ah %+v",
			rtr.QPAttrMask, rtr.DestQPNum, rtr.RQPSN, rtr.PathMTU, rtr.MaxDestRdAtomic, rtr.MinRNRTimer, rtr.AHAttr)
	}
	rts, err := c.InitQPAttr(id, abi.QPStateRTS)
	if err != nil {
		return check("INIT_QP_ATTR(RTS)", err)
	}
	if rts.QPAttrMask != maskRTS || rts.SQPSN != want.sqPSN || rts.RetryCnt != want.retry ||
		rts.RNRRetry != want.rnrRetry || rts.MaxRdAtomic != 1 {
		return fmt.Errorf("RTS: mask %v sq_psn %#x retry %d rnr_retry %d max_rd_atomic %d",
			rts.QPAttrMask, rts.SQPSN, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic)
	}
	return nil
}

func connectEndToEnd(e *env) error {
	p, err := newPair(e)
	if err != nil {
		return err
	}
	if err := p.SendREQ([]byte("hello")); err != nil {
		return err
	}
	child, err := p.Accept()
	if err != nil {
		return err
	}
	if child == p.Listener || child == p.ID {
		return fmt.Errorf("new connection got id %d, already in use", child)
	}
	// Passive: rq_psn is its REP PSN, sq_psn the REQ's; retry and RNR
	// retry come from the REQ (ib-cm.md §7).
	if err := checkQPAttrs(p.Passive, child, p.Path, qpSide{
		destQPN: activeQPN, rqPSN: passivePSN, sqPSN: activePSN, retry: 5, rnrRetry: 7,
	}); err != nil {
		return fmt.Errorf("passive: %w", err)
	}
	rep, err := p.Active.Expect(abi.CMREPReceived, Wait)
	if err != nil {
		return err
	}
	if r := rep.U.REP(); rep.ID != p.ID || rep.UID != activeUID || r.RemoteQPN != passiveQPN || r.StartingPSN != passivePSN {
		return fmt.Errorf("REP event id %d uid %#x %+v", rep.ID, rep.UID, r)
	}
	// Active: rq_psn is its REQ PSN, sq_psn the REP's; RNR retry from the
	// REP, retry count its own.
	if err := checkQPAttrs(p.Active, p.ID, p.Path, qpSide{
		destQPN: passiveQPN, rqPSN: activePSN, sqPSN: passivePSN, retry: 5, rnrRetry: 6,
	}); err != nil {
		return fmt.Errorf("active: %w", err)
	}
	if err := p.Active.SendPrivateData(abi.CmdSendRTU, p.ID, []byte("rtu")); err != nil {
		return check("SEND_RTU", err)
	}
	rtu, err := p.Passive.Expect(abi.CMRTUReceived, Wait)
	if err != nil {
		return err
	}
	if rtu.ID != child || rtu.UID != childUID {
		return fmt.Errorf("RTU for id %d uid %#x, want %d and SEND_REP's uid %#x", rtu.ID, rtu.UID, child, childUID)
	}
	aa, err := p.Active.AttrID(p.ID)
	if err != nil {
		return check("ATTR_ID", err)
	}
	pa, err := p.Passive.AttrID(child)
	if err != nil {
		return check("ATTR_ID", err)
	}
	if aa.RemoteID != pa.LocalID || pa.RemoteID != aa.LocalID || aa.ServiceID != p.SID || aa.ServiceMask != ^uint64(0) {
		return fmt.Errorf("comm ids do not pair: active %+v passive %+v", aa, pa)
	}
	if err := p.Active.SendPrivateData(abi.CmdSendDREQ, p.ID, nil); err != nil {
		return check("SEND_DREQ", err)
	}
	if _, err := p.Passive.Expect(abi.CMDREQReceived, Wait); err != nil {
		return err
	}
	if err := p.Passive.SendPrivateData(abi.CmdSendDREP, child, nil); err != nil {
		return check("SEND_DREP", err)
	}
	if _, err := p.Active.Expect(abi.CMDREPReceived, Wait); err != nil {
		return err
	}
	if _, err := p.Active.Expect(abi.CMTimewaitExit, Wait); err != nil {
		return fmt.Errorf("active: %w", err)
	}
	if _, err := p.Passive.Expect(abi.CMTimewaitExit, Wait); err != nil {
		return fmt.Errorf("passive: %w", err)
	}
	// REP, DREP, TIMEWAIT_EXIT; RTU, DREQ, TIMEWAIT_EXIT; the REQ counts
	// on the listener.
	for _, d := range []struct {
		c    *Client
		id   uint32
		want uint32
	}{{p.Active, p.ID, 3}, {p.Passive, child, 3}, {p.Passive, p.Listener, 1}} {
		n, err := d.c.DestroyID(d.id)
		if err != nil {
			return check("DESTROY_ID", err)
		}
		if n != d.want {
			return fmt.Errorf("DESTROY_ID(%d): events_reported %d, want %d", d.id, n, d.want)
		}
	}
	return nil
}
