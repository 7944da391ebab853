package conformance

import (
	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// efaultCase: a command whose side buffer is unreadable fails with EFAULT
// even though its id is unknown: the copies come before the lookup
// (§3.2, §7.1).
type efaultCase struct {
	name  string
	cmd   abi.Cmd
	build func(c *Client, bad uint64) abi.Struct
}

var efaults = []efaultCase{
	{"send_req/efault-data", abi.CmdSendREQ, func(c *Client, bad uint64) abi.Struct {
		r := c.REQ(noSuchID, SID(), abi.PathRec{}, 1)
		r.Data, r.Len = bad, 8
		return r
	}},
	{"send_req/efault-null-data", abi.CmdSendREQ, func(c *Client, bad uint64) abi.Struct {
		r := c.REQ(noSuchID, SID(), abi.PathRec{}, 1)
		r.Data, r.Len = 0, 8
		return r
	}},
	{"send_req/efault-primary-path", abi.CmdSendREQ, func(c *Client, bad uint64) abi.Struct {
		r := c.REQ(noSuchID, SID(), abi.PathRec{}, 1)
		r.PrimaryPath = bad
		return r
	}},
	{"send_req/efault-alternate-path", abi.CmdSendREQ, func(c *Client, bad uint64) abi.Struct {
		r := c.REQ(noSuchID, SID(), abi.PathRec{}, 1)
		r.AlternatePath = bad
		return r
	}},
	{"send_rep/efault-data", abi.CmdSendREP, func(c *Client, bad uint64) abi.Struct {
		return &abi.REP{ID: noSuchID, Data: bad, Len: 8}
	}},
	{"send_rtu/efault-data", abi.CmdSendRTU, badPrivateData},
	{"send_dreq/efault-data", abi.CmdSendDREQ, badPrivateData},
	{"send_drep/efault-data", abi.CmdSendDREP, badPrivateData},
	{"send_rej/efault-data", abi.CmdSendREJ, func(c *Client, bad uint64) abi.Struct {
		return &abi.Info{ID: noSuchID, Data: bad, DataLen: 8}
	}},
	{"send_rej/efault-info", abi.CmdSendREJ, func(c *Client, bad uint64) abi.Struct {
		return &abi.Info{ID: noSuchID, Info: bad, InfoLen: 8}
	}},
	{"send_apr/efault-data", abi.CmdSendAPR, func(c *Client, bad uint64) abi.Struct {
		return &abi.Info{ID: noSuchID, Data: bad, DataLen: 8}
	}},
	{"send_apr/efault-info", abi.CmdSendAPR, func(c *Client, bad uint64) abi.Struct {
		return &abi.Info{ID: noSuchID, Info: bad, InfoLen: 8}
	}},
	{"send_mra/efault-data", abi.CmdSendMRA, func(c *Client, bad uint64) abi.Struct {
		return &abi.MRA{ID: noSuchID, Data: bad, Len: 8}
	}},
	{"send_lap/efault-data", abi.CmdSendLAP, func(c *Client, bad uint64) abi.Struct {
		return &abi.LAP{ID: noSuchID, Data: bad, Len: 8, Path: c.Path(abi.PathRec{})}
	}},
	{"send_lap/efault-path", abi.CmdSendLAP, func(c *Client, bad uint64) abi.Struct {
		return &abi.LAP{ID: noSuchID, Path: bad}
	}},
	{"send_sidr_req/efault-data", abi.CmdSendSIDRREQ, func(c *Client, bad uint64) abi.Struct {
		return &abi.SIDRREQ{ID: noSuchID, Data: bad, Len: 8, Path: c.Path(abi.PathRec{})}
	}},
	{"send_sidr_req/efault-path", abi.CmdSendSIDRREQ, func(c *Client, bad uint64) abi.Struct {
		return &abi.SIDRREQ{ID: noSuchID, Path: bad}
	}},
	{"send_sidr_rep/efault-data", abi.CmdSendSIDRREP, func(c *Client, bad uint64) abi.Struct {
		return &abi.SIDRREP{ID: noSuchID, Data: bad, DataLen: 8}
	}},
	{"send_sidr_rep/efault-info", abi.CmdSendSIDRREP, func(c *Client, bad uint64) abi.Struct {
		return &abi.SIDRREP{ID: noSuchID, Info: bad, InfoLen: 8}
	}},
}

func badPrivateData(c *Client, bad uint64) abi.Struct {
	return &abi.PrivateData{ID: noSuchID, Data: bad, Len: 8}
}

func efaultCases() []Case {
	var cs []Case
	for _, ec := range efaults {
		cs = append(cs, Case{
			Name: ec.name,
			Spec: "ucm-abi.md §3.2: side buffers are copied before the id lookup: EFAULT beats ENOENT",
			run: func(e *env) error {
				c, err := e.Client()
				if err != nil {
					return err
				}
				return expect(c.Cmd(ec.cmd, 0, ec.build(c, c.Mem.Bad())), unix.EFAULT)
			},
		})
	}
	cs = append(cs, Case{
		Name: "send_rtu/zero-len-ignores-pointer",
		Spec: "ucm-abi.md §3.2: len 0 reads nothing whatever the pointer (then ENOENT for the unknown id)",
		run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			return expect(c.Cmd(abi.CmdSendRTU, 0, &abi.PrivateData{ID: noSuchID, Data: c.Mem.Bad()}), unix.ENOENT)
		},
	})
	return cs
}
