package conformance

import (
	"time"

	"fmt"

	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// flowCases connect through the DUT's loopback path.
func flowCases() []Case {
	return []Case{
		{Name: "connect/rc-end-to-end", Spec: "LISTEN, REQ, REP, RTU, DREQ, DREP, TIMEWAIT_EXIT on two files; INIT_QP_ATTR per docs/ib-cm.md §7; events_reported exact (ucm-abi.md §3.4)", run: connectEndToEnd},
		{Name: "notify/comm-est", Spec: "ucm-abi.md §3.2: NOTIFY COMM_EST in REP_SENT → USER_ESTABLISHED; again → EISCONN", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			if err := p.SendREQ(nil); err != nil {
				return err
			}
			child, err := p.Accept()
			if err != nil {
				return err
			}
			if err := p.Passive.Notify(child, abi.IBEventCommEst); err != nil {
				return check("NOTIFY", err)
			}
			ev, err := p.Passive.Expect(abi.CMUserEstablished, Wait)
			if err != nil {
				return err
			}
			if ev.ID != child || ev.UID != childUID {
				return fmt.Errorf("USER_ESTABLISHED for id %d uid %#x, want %d %#x", ev.ID, ev.UID, child, childUID)
			}
			return check("second NOTIFY", expect(p.Passive.Notify(child, abi.IBEventCommEst), unix.EISCONN))
		}},
		{Name: "send_mra/received", Spec: "ucm-abi.md §3.2: SEND_MRA on a received REQ → MRA_RECEIVED with the timeout", run: func(e *env) error {
			p, err := pairWithREQ(e)
			if err != nil {
				return err
			}
			ev, err := p.Passive.Expect(abi.CMREQReceived, Wait)
			if err != nil {
				return err
			}
			a, n := p.Passive.Data([]byte("wait"))
			if err := p.Passive.Cmd(abi.CmdSendMRA, 0, &abi.MRA{ID: ev.ID, Data: a, Len: n, Timeout: 20}); err != nil {
				return check("SEND_MRA", err)
			}
			mra, err := p.Active.Expect(abi.CMMRAReceived, Wait)
			if err != nil {
				return err
			}
			if mra.U.MRA().Timeout != 20 || mra.ID != p.ID {
				return fmt.Errorf("MRA timeout %d id %d", mra.U.MRA().Timeout, mra.ID)
			}
			return nil
		}},
		{Name: "send_lap/apr", Spec: "ucm-abi.md §3.2: SEND_LAP → LAP_RECEIVED (ALTERNATE), SEND_APR → APR_RECEIVED with info; on RoCE the receiver drops LAP (cm_lap_handler)", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			child, err := p.Establish()
			if err != nil {
				return err
			}
			if err := p.Active.Cmd(abi.CmdSendLAP, 0, &abi.LAP{ID: p.ID, Path: p.Active.Path(p.Path)}); err != nil {
				return check("SEND_LAP", err)
			}
			if p.Path.DLID == 0 {
				// RoCE: cm_lap_handler drops LAP on RoCE ports
				// ("alternate path messages are not supported"), so
				// the send succeeds and the peer reports nothing.
				if ev, err := p.Passive.Expect(abi.CMLAPReceived, time.Second); err == nil {
					return fmt.Errorf("RoCE: LAP_RECEIVED %+v, but the kernel drops LAP on RoCE ports", ev.EventResp)
				}
				return nil
			}
			lap, err := p.Passive.Expect(abi.CMLAPReceived, Wait)
			if err != nil {
				return err
			}
			if lap.ID != child || lap.Present&abi.PresAlternate == 0 || lap.U.LAP().Path.DLID != p.Path.DLID {
				return fmt.Errorf("LAP event id %d present %v path %+v", lap.ID, lap.Present, lap.U.LAP().Path)
			}
			if err := p.Passive.SendInfo(abi.CmdSendAPR, child, 0, []byte{7}, nil); err != nil {
				return check("SEND_APR", err)
			}
			apr, err := p.Active.Expect(abi.CMAPRReceived, Wait)
			if err != nil {
				return err
			}
			if apr.U.APR().Status != 0 || apr.Present&abi.PresInfo == 0 || apr.Info[0] != 7 {
				return fmt.Errorf("APR status %d present %v", apr.U.APR().Status, apr.Present)
			}
			return nil
		}},
		{Name: "sidr/round-trip", Spec: "ucm-abi.md §3.2/§3.3: SIDR_REQ → SIDR_REQ_RECEIVED with a new id; SIDR_REP → SIDR_REP_RECEIVED", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			a, n := p.Active.Data([]byte("sidr"))
			err = p.Active.Cmd(abi.CmdSendSIDRREQ, 0, &abi.SIDRREQ{ID: p.ID, SID: p.SID, Path: p.Active.Path(p.Path),
				Timeout: 1000, MaxCMRetries: 3, Data: a, Len: n})
			if err != nil {
				return check("SEND_SIDR_REQ", err)
			}
			req, err := p.Passive.Expect(abi.CMSIDRREQReceived, Wait)
			if err != nil {
				return err
			}
			if req.ID == p.Listener || req.UID != listenUID || string(req.Data[:4]) != "sidr" {
				return fmt.Errorf("SIDR_REQ id %d uid %#x data %q", req.ID, req.UID, req.Data[:4])
			}
			i, il := p.Passive.Data([]byte{5, 6})
			err = p.Passive.Cmd(abi.CmdSendSIDRREP, 0, &abi.SIDRREP{ID: req.ID, QPN: 0x77, QKey: 0x1111, Info: i, InfoLen: il})
			if err != nil {
				return check("SEND_SIDR_REP", err)
			}
			rep, err := p.Active.Expect(abi.CMSIDRREPReceived, Wait)
			if err != nil {
				return err
			}
			r := rep.U.SIDRREP()
			if r.QPN != 0x77 || r.QKey != 0x1111 || r.Status != 0 || rep.UID != activeUID || rep.Info[0] != 5 {
				return fmt.Errorf("SIDR_REP %+v uid %#x", r, rep.UID)
			}
			return nil
		}},
		{Name: "close/undelivered-req-rejected", Spec: "ucm-abi.md §3.2 close: an undelivered REQ's connection is destroyed → REJ consumer defined (28)", run: func(e *env) error {
			p, err := pairWithREQ(e)
			if err != nil {
				return err
			}
			if err := p.Passive.Close(); err != nil {
				return check("close", err)
			}
			return expectREJ28(p)
		}},
		{Name: "destroy_id/listener-undelivered-req-rejected", Spec: "ucm-abi.md §3.2 DESTROY_ID: purged REQ → REJ 28 to the peer; events_reported 0", run: func(e *env) error {
			p, err := pairWithREQ(e)
			if err != nil {
				return err
			}
			n, err := p.Passive.DestroyID(p.Listener)
			if err != nil {
				return check("DESTROY_ID", err)
			}
			if n != 0 {
				return fmt.Errorf("events_reported %d, want 0", n)
			}
			if ok, _ := p.Passive.F.WaitReadable(0); ok {
				return fmt.Errorf("listener's file still readable after DESTROY_ID")
			}
			return expectREJ28(p)
		}},
		{Name: "destroy_id/purges-events", Spec: "ucm-abi.md §3.2, design.md rule 6: no event of an id is delivered after DESTROY_ID answered", run: func(e *env) error {
			p, err := pairWithREQ(e)
			if err != nil {
				return err
			}
			if _, err := p.Accept(); err != nil {
				return err
			}
			if ok, err := p.Active.F.WaitReadable(Wait); err != nil || !ok {
				return fmt.Errorf("no REP queued: %v", err)
			}
			n, err := p.Active.DestroyID(p.ID)
			if err != nil {
				return check("DESTROY_ID", err)
			}
			if n != 0 {
				return fmt.Errorf("events_reported %d, want 0", n)
			}
			if err := p.Active.F.SetNonblock(true); err != nil {
				return err
			}
			ev, err := p.Active.GetEvent()
			if Errno(err) != unix.EAGAIN {
				return fmt.Errorf("after DESTROY_ID: GET_EVENT gave %v (event %v), want EAGAIN", err, ev.Event)
			}
			return nil
		}},
		{Name: "init_qp_attr/efault-response", Spec: "ucm-abi.md §3.2: response unwritable → EFAULT", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			if err := p.SendREQ(nil); err != nil {
				return err
			}
			g := &abi.InitQPAttr{Response: p.Active.Mem.Bad(), ID: p.ID, QPState: abi.QPStateInit}
			return expect(p.Active.Cmd(abi.CmdInitQPAttr, abi.QPAttrSize, g), unix.EFAULT)
		}},
	}
}

func expectREJ28(p *pair) error {
	ev, err := p.Active.Expect(abi.CMREJReceived, Wait)
	if err != nil {
		return err
	}
	if r := ev.U.REJ().Reason; r != 28 {
		return fmt.Errorf("REJ reason %d, want 28 (consumer defined)", r)
	}
	return nil
}
