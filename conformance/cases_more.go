package conformance

import (
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
