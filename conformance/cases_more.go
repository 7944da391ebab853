package conformance

import (
	"bytes"
	"fmt"

	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// moreCases need a connection in a given state: the CM's private-data
// limits (§2.6) where the state is right, and the rest of NOTIFY, LISTEN
// and INIT_QP_ATTR.
func moreCases() []Case {
	return []Case{
		onREQ("send_rep/einval-private-data", "ucm-abi.md §2.6: more than 196 bytes of REP private data → EINVAL", func(p *pair, child uint32) error {
			r := rep(child)
			r.Data, r.Len = p.Passive.Data(make([]byte, abi.MaxREPPrivateData+1))
			return expect(p.Passive.SendREP(r), unix.EINVAL)
		}),
		onREQ("send_rej/einval-ari", "ucm-abi.md §2.6: more than 72 bytes of ARI → EINVAL", func(p *pair, child uint32) error {
			return expect(p.Passive.SendInfo(abi.CmdSendREJ, child, 28, make([]byte, abi.MaxREJARI+1), nil), unix.EINVAL)
		}),
		onREQ("send_mra/einval-private-data", "ucm-abi.md §2.6: more than 222 bytes of MRA private data → EINVAL", func(p *pair, child uint32) error {
			a, n := p.Passive.Data(make([]byte, abi.MaxMRAPrivateData+1))
			return expect(p.Passive.Cmd(abi.CmdSendMRA, 0, &abi.MRA{ID: child, Data: a, Len: n, Timeout: 10}), unix.EINVAL)
		}),
		// The limits themselves pass (the CM's checks are "len > max"),
		// and the bytes arrive whole: a device refusing the limit, or
		// sending less, passed the limit+1 cases alone.
		{Name: "send_req/private-data-at-limit", Spec: "ucm-abi.md §2.6: exactly 92 bytes of REQ private data → success, all 92 in the passive side's REQ_RECEIVED", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			pd := pattern(abi.MaxREQPrivateData, 0x10)
			if err := p.SendREQ(pd); err != nil {
				return err
			}
			ev, err := p.Passive.Expect(abi.CMREQReceived, Wait)
			if err != nil {
				return err
			}
			return samePrivateData("REQ_RECEIVED", ev.Data, pd)
		}},
		onREQ("send_rep/private-data-at-limit", "ucm-abi.md §2.6: exactly 196 bytes of REP private data → success, all 196 in the active side's REP_RECEIVED", func(p *pair, child uint32) error {
			pd := pattern(abi.MaxREPPrivateData, 0x20)
			r := rep(child)
			r.Data, r.Len = p.Passive.Data(pd)
			if err := p.Passive.SendREP(r); err != nil {
				return check("SEND_REP", err)
			}
			ev, err := p.Active.Expect(abi.CMREPReceived, Wait)
			if err != nil {
				return err
			}
			return samePrivateData("REP_RECEIVED", ev.Data, pd)
		}),
		onREQ("send_mra/private-data-at-limit", "ucm-abi.md §2.6: exactly 222 bytes of MRA private data → success, all 222 in the active side's MRA_RECEIVED", func(p *pair, child uint32) error {
			pd := pattern(abi.MaxMRAPrivateData, 0x30)
			a, n := p.Passive.Data(pd)
			if err := p.Passive.Cmd(abi.CmdSendMRA, 0, &abi.MRA{ID: child, Data: a, Len: n, Timeout: 10}); err != nil {
				return check("SEND_MRA", err)
			}
			ev, err := p.Active.Expect(abi.CMMRAReceived, Wait)
			if err != nil {
				return err
			}
			return samePrivateData("MRA_RECEIVED", ev.Data, pd)
		}),
		onREQ("send_rej/ari-at-limit", "ucm-abi.md §2.6: exactly 72 bytes of ARI → success, all 72 as the active side's REJ_RECEIVED info", func(p *pair, child uint32) error {
			ari := pattern(abi.MaxREJARI, 0x40)
			if err := p.Passive.SendInfo(abi.CmdSendREJ, child, 28, ari, nil); err != nil {
				return check("SEND_REJ", err)
			}
			ev, err := p.Active.Expect(abi.CMREJReceived, Wait)
			if err != nil {
				return err
			}
			return samePrivateData("REJ_RECEIVED's ARI", ev.Info, ari)
		}),
		{Name: "send_dreq/private-data-at-limit", Spec: "ucm-abi.md §2.6: exactly 220 bytes of DREQ private data → success, all 220 in the passive side's DREQ_RECEIVED", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			if _, err := p.Establish(); err != nil {
				return err
			}
			pd := pattern(abi.MaxDREQPrivateData, 0x50)
			if err := p.Active.SendPrivateData(abi.CmdSendDREQ, p.ID, pd); err != nil {
				return check("SEND_DREQ", err)
			}
			ev, err := p.Passive.Expect(abi.CMDREQReceived, Wait)
			if err != nil {
				return err
			}
			return samePrivateData("DREQ_RECEIVED", ev.Data, pd)
		}},
		{Name: "notify/einval-event-established", Spec: "ucm-abi.md §3.2: NOTIFY with an event other than COMM_EST/PATH_MIG → EINVAL, also on an established id (where COMM_EST would be taken)", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			if _, err := p.Establish(); err != nil {
				return err
			}
			return expect(p.Active.Notify(p.ID, 99), unix.EINVAL)
		}},
		// The per-command einval-other-file cases address an IDLE id,
		// which the CM refuses anyway: here the id is in REQ_RCVD, where
		// its owner's SEND_REP succeeds.
		onREQ("send_rep/einval-other-file-req-rcvd", "ucm-abi.md §3.1, design.md rule 1: SEND_REP from another file, for a connection in REQ_RCVD → EINVAL and the connection is left alone: the owner's SEND_REP then succeeds and the RTU event carries the owner's uid", func(p *pair, child uint32) error {
			r := rep(child)
			r.UID = 0xBAD
			if err := expect(p.Active.SendREP(r), unix.EINVAL); err != nil {
				return check("SEND_REP from the active side's file", err)
			}
			if err := p.Passive.SendREP(rep(child)); err != nil {
				return check("the owner's SEND_REP", err)
			}
			if _, err := p.Active.Expect(abi.CMREPReceived, Wait); err != nil {
				return err
			}
			if err := p.Active.SendPrivateData(abi.CmdSendRTU, p.ID, nil); err != nil {
				return check("SEND_RTU", err)
			}
			ev, err := p.Passive.Expect(abi.CMRTUReceived, Wait)
			if err != nil {
				return err
			}
			if ev.UID != childUID {
				return fmt.Errorf("RTU_RECEIVED with uid %#x, want the owner's %#x", ev.UID, childUID)
			}
			return nil
		}),
		{Name: "get_event/data-buffer-exact", Spec: "ucm-abi.md §3.2: GET_EVENT copies the event's private data into data, no more than data_len: a REQ event into a data buffer of exactly 92 bytes (data_len 92), with an info buffer of 1 byte, succeeds", run: func(e *env) error {
			p, err := pairWithREQ(e)
			if err != nil {
				return err
			}
			ev, err := p.Passive.GetEventLen(abi.MaxREQPrivateData, 1)
			if err != nil {
				return check("GET_EVENT with a 92-byte data buffer", err)
			}
			if ev.Event != abi.CMREQReceived || !bytes.HasPrefix(ev.Data, []byte("hello")) {
				return fmt.Errorf("event %v with data %q, want REQ_RECEIVED with hello", ev.Event, ev.Data)
			}
			return nil
		}},
		onREQ("init_qp_attr/einval-qp-state", "ucm-abi.md §3.2: INIT_QP_ATTR for a state other than INIT/RTR/RTS → EINVAL", func(p *pair, child uint32) error {
			_, err := p.Passive.InitQPAttr(child, abi.QPStateSQD)
			return expect(err, unix.EINVAL)
		}),
		{Name: "send_req/einval-not-idle", Spec: "ucm-abi.md §3.2: SEND_REQ on an id that already sent one → EINVAL", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			if err := p.SendREQ(nil); err != nil {
				return err
			}
			return expect(p.Active.SendREQ(p.Active.REQ(p.ID, p.SID, p.Path, activeQPN)), unix.EINVAL)
		}},
		{Name: "send_dreq/einval-private-data", Spec: "ucm-abi.md §2.6: more than 220 bytes of DREQ private data → EINVAL", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			if _, err := p.Establish(); err != nil {
				return err
			}
			return expect(p.Active.SendPrivateData(abi.CmdSendDREQ, p.ID, make([]byte, abi.MaxDREQPrivateData+1)), unix.EINVAL)
		}},
		{Name: "notify/path-mig", Spec: "ucm-abi.md §3.2: NOTIFY PATH_MIG on an established id → success", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			if _, err := p.Establish(); err != nil {
				return err
			}
			return check("NOTIFY PATH_MIG", p.Active.Notify(p.ID, abi.IBEventPathMig))
		}},
		{Name: "send_sidr_req/einval-private-data", Spec: "ucm-abi.md §2.6: more than 216 bytes of SIDR_REQ private data → EINVAL", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			a, n := p.Active.Data(make([]byte, abi.MaxSIDRREQPrivateData+1))
			return expect(p.Active.Cmd(abi.CmdSendSIDRREQ, 0, &abi.SIDRREQ{ID: p.ID, SID: p.SID, Path: p.Active.Path(p.Path),
				Timeout: 100, Data: a, Len: n}), unix.EINVAL)
		}},
		{Name: "listen/assign-service-id", Spec: "ucm-abi.md §3.2: LISTEN on IB_CM_ASSIGN_SERVICE_ID → the CM picks a distinct 0x02… sid, mask ~0 (ATTR_ID shows it)", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			var sids [2]uint64
			for i := range sids {
				id, err := c.CreateID(0)
				if err != nil {
					return check("create", err)
				}
				if err := c.Listen(id, 0x0200000000000000, 0); err != nil {
					return check("listen", err)
				}
				a, err := c.AttrID(id)
				if err != nil {
					return check("attr", err)
				}
				if a.ServiceID>>56 != 0x02 || a.ServiceMask != ^uint64(0) {
					return fmt.Errorf("assigned service id %#x mask %#x", a.ServiceID, a.ServiceMask)
				}
				sids[i] = a.ServiceID
			}
			if sids[0] == sids[1] {
				return fmt.Errorf("two listeners assigned the same service id %#x", sids[0])
			}
			return nil
		}},
	}
}

// onREQ runs check on the passive side's new connection, in REQ_RCVD.
func onREQ(name, spec string, fn func(p *pair, child uint32) error) Case {
	return Case{Name: name, Spec: spec, run: func(e *env) error {
		p, err := pairWithREQ(e)
		if err != nil {
			return err
		}
		ev, err := p.Passive.Expect(abi.CMREQReceived, Wait)
		if err != nil {
			return err
		}
		return fn(p, ev.ID)
	}}
}

// pattern is n bytes counting up from first, so that a cut, a shift or a
// stray byte shows.
func pattern(n int, first byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = first + byte(i)
	}
	return b
}

// samePrivateData checks that an event's private data (or info) starts
// with want: a received event's data is the message's whole private data
// area, zeros after what the sender gave.
func samePrivateData(what string, got, want []byte) error {
	if len(got) < len(want) || !bytes.Equal(got[:len(want)], want) {
		return fmt.Errorf("%s carries %x, want %x first", what, got, want)
	}
	return nil
}
