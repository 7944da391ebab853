package conformance

import (
	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// onFreshID runs a command on a new IDLE id and expects errno.
func onFreshID(name, spec string, errno unix.Errno, cmd abi.Cmd, build func(e *env, c *Client, id uint32) abi.Struct) Case {
	return Case{Name: name, Spec: spec, run: func(e *env) error {
		c, err := e.Client()
		if err != nil {
			return err
		}
		id, err := c.CreateID(0)
		if err != nil {
			return check("create", err)
		}
		return expect(c.Cmd(cmd, uint16(cmd.OutLen()), build(e, c, id)), errno)
	}}
}

// pathOrZero is the loopback path if known, else an empty one (the CM
// refuses the request either way, which is all these cases need).
func pathOrZero(e *env) abi.PathRec {
	p, _ := e.DUT.LoopbackPath()
	return p
}

func withID(b func(c *Client, id uint32) abi.Struct) func(*env, *Client, uint32) abi.Struct {
	return func(_ *env, c *Client, id uint32) abi.Struct { return b(c, id) }
}

// cmCases are the CM's refusals that ucm passes through (§3.2).
func cmCases() []Case {
	inval := unix.EINVAL
	idle := "ucm-abi.md §3.2: the CM refuses this on an IDLE id → EINVAL"
	listen := func(sid, mask uint64) func(c *Client, id uint32) abi.Struct {
		return func(c *Client, id uint32) abi.Struct { return &abi.Listen{ServiceID: sid, ServiceMask: mask, ID: id} }
	}
	req := func(mod func(*abi.REQ)) func(*env, *Client, uint32) abi.Struct {
		return func(e *env, c *Client, id uint32) abi.Struct {
			r := c.REQ(id, SID(), pathOrZero(e), 0x30)
			mod(r)
			return r
		}
	}
	cs := []Case{
		onFreshID("listen/einval-rdma-cm-range", "ucm-abi.md §3.2 ucm_validate_listen: sid&mask in 0x0000000001xxxxxx → EINVAL", inval,
			abi.CmdListen, withID(listen(0x0000000001000123, ^uint64(0)))),
		onFreshID("listen/einval-sdp-range", "ucm-abi.md §3.2 ucm_validate_listen: sid&mask in 0x000000000001xxxx → EINVAL", inval,
			abi.CmdListen, withID(listen(0x0000000000010123, ^uint64(0)))),
		onFreshID("listen/mask-zero-skips-range-check", "ucm-abi.md §3.2: the range check applies the raw mask, so mask 0 passes", 0,
			abi.CmdListen, withID(listen(0x0000000001000777, 0))),
		onFreshID("listen/einval-assign-range", "ucm-abi.md §3.2: a sid with top byte 0x02 other than IB_CM_ASSIGN_SERVICE_ID → EINVAL", inval,
			abi.CmdListen, withID(listen(0x0200000000000001, ^uint64(0)))),
		{Name: "listen/einval-not-idle", Spec: "ucm-abi.md §3.2: LISTEN on a listening id → EINVAL", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			id, err := c.CreateID(0)
			if err != nil {
				return check("create", err)
			}
			if err := c.Listen(id, SID(), 0); err != nil {
				return check("first listen", err)
			}
			return expect(c.Listen(id, SID(), 0), unix.EINVAL)
		}},
		{Name: "listen/ebusy-overlap", Spec: "ucm-abi.md §3.2: a listen overlapping another on the device → EBUSY", run: func(e *env) error {
			a, err := e.Client()
			if err != nil {
				return err
			}
			b, err := e.Client()
			if err != nil {
				return err
			}
			x, err := a.CreateID(0)
			if err != nil {
				return check("create", err)
			}
			y, err := b.CreateID(0)
			if err != nil {
				return check("create", err)
			}
			sid := SID()
			if err := a.Listen(x, sid, 0); err != nil {
				return check("first listen", err)
			}
			return expect(b.Listen(y, sid, 0), unix.EBUSY)
		}},
		onFreshID("notify/einval-idle", idle, inval, abi.CmdNotify, withID(func(c *Client, id uint32) abi.Struct {
			return &abi.Notify{ID: id, Event: abi.IBEventCommEst}
		})),
		onFreshID("notify/einval-event", "ucm-abi.md §3.2: NOTIFY with an event other than COMM_EST/PATH_MIG → EINVAL", inval, abi.CmdNotify,
			withID(func(c *Client, id uint32) abi.Struct { return &abi.Notify{ID: id, Event: 99} })),
		onFreshID("init_qp_attr/einval-idle", "ucm-abi.md §3.2: no QP attributes for an IDLE id → EINVAL", inval, abi.CmdInitQPAttr,
			withID(func(c *Client, id uint32) abi.Struct {
				return &abi.InitQPAttr{Response: c.Mem.Alloc(abi.QPAttrSize), ID: id, QPState: abi.QPStateRTR}
			})),
		onFreshID("send_req/einval-no-path", "ucm-abi.md §3.2: SEND_REQ without a primary path → EINVAL", inval, abi.CmdSendREQ,
			req(func(r *abi.REQ) { r.PrimaryPath = 0 })),
		onFreshID("send_req/einval-qp-type", "ucm-abi.md §3.2: SEND_REQ for a QP type other than RC/UC/XRC_INI → EINVAL", inval, abi.CmdSendREQ,
			req(func(r *abi.REQ) { r.QPType = abi.QPTypeUD })),
		onFreshID("send_req/einval-peer-to-peer", "ucm-abi.md §3.2: peer_to_peer is unsupported → EINVAL", inval, abi.CmdSendREQ,
			req(func(r *abi.REQ) { r.PeerToPeer = 1 })),
		{Name: "send_req/einval-private-data", Spec: "ucm-abi.md §2.6: more than 92 bytes of REQ private data → EINVAL", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			id, err := c.CreateID(0)
			if err != nil {
				return check("create", err)
			}
			r := c.REQ(id, SID(), pathOrZero(e), 0x30)
			r.Data, r.Len = c.Data(make([]byte, abi.MaxREQPrivateData+1))
			return expect(c.SendREQ(r), unix.EINVAL)
		}},
		onFreshID("send_sidr_req/einval-no-path", "ucm-abi.md §3.2: SEND_SIDR_REQ without a path → EINVAL", inval, abi.CmdSendSIDRREQ,
			withID(func(c *Client, id uint32) abi.Struct {
				return &abi.SIDRREQ{ID: id, SID: SID(), Timeout: 100}
			})),
	}
	for _, ic := range idCommands {
		switch ic.cmd {
		case abi.CmdSendREP, abi.CmdSendRTU, abi.CmdSendDREQ, abi.CmdSendDREP, abi.CmdSendREJ,
			abi.CmdSendMRA, abi.CmdSendLAP, abi.CmdSendAPR, abi.CmdSendSIDRREP:
			cs = append(cs, onFreshID(ic.name+"/einval-idle", idle, inval, ic.cmd, withID(ic.build)))
		}
	}
	return cs
}
