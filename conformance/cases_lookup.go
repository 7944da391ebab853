package conformance

import (
	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// idCommand builds a well-formed command naming id, with valid buffers.
type idCommand struct {
	name  string
	cmd   abi.Cmd
	build func(c *Client, id uint32) abi.Struct
}

func pd(c *Client) (uint64, uint8) { return c.Data([]byte{1, 2, 3, 4}) }

// idCommands are the 16 commands that look an id up.
var idCommands = []idCommand{
	{"destroy_id", abi.CmdDestroyID, func(c *Client, id uint32) abi.Struct {
		return &abi.DestroyID{Response: c.Mem.Alloc(4), ID: id}
	}},
	{"attr_id", abi.CmdAttrID, func(c *Client, id uint32) abi.Struct {
		return &abi.AttrID{Response: c.Mem.Alloc(24), ID: id}
	}},
	{"init_qp_attr", abi.CmdInitQPAttr, func(c *Client, id uint32) abi.Struct {
		return &abi.InitQPAttr{Response: c.Mem.Alloc(abi.QPAttrSize), ID: id, QPState: abi.QPStateInit}
	}},
	{"listen", abi.CmdListen, func(c *Client, id uint32) abi.Struct {
		return &abi.Listen{ServiceID: SID(), ID: id}
	}},
	{"notify", abi.CmdNotify, func(c *Client, id uint32) abi.Struct {
		return &abi.Notify{ID: id, Event: abi.IBEventCommEst}
	}},
	{"send_req", abi.CmdSendREQ, func(c *Client, id uint32) abi.Struct {
		r := c.REQ(id, SID(), abi.PathRec{}, 0x10)
		r.Data, r.Len = pd(c)
		return r
	}},
	{"send_rep", abi.CmdSendREP, func(c *Client, id uint32) abi.Struct {
		a, n := pd(c)
		return &abi.REP{ID: id, Data: a, Len: n, QPN: 0x20}
	}},
	{"send_rtu", abi.CmdSendRTU, privateData},
	{"send_dreq", abi.CmdSendDREQ, privateData},
	{"send_drep", abi.CmdSendDREP, privateData},
	{"send_rej", abi.CmdSendREJ, info},
	{"send_mra", abi.CmdSendMRA, func(c *Client, id uint32) abi.Struct {
		a, n := pd(c)
		return &abi.MRA{ID: id, Data: a, Len: n, Timeout: 10}
	}},
	{"send_lap", abi.CmdSendLAP, func(c *Client, id uint32) abi.Struct {
		a, n := pd(c)
		return &abi.LAP{ID: id, Data: a, Len: n, Path: c.Path(abi.PathRec{})}
	}},
	{"send_apr", abi.CmdSendAPR, info},
	{"send_sidr_req", abi.CmdSendSIDRREQ, func(c *Client, id uint32) abi.Struct {
		a, n := pd(c)
		return &abi.SIDRREQ{ID: id, Data: a, Len: n, Path: c.Path(abi.PathRec{}), SID: SID(), Timeout: 100}
	}},
	{"send_sidr_rep", abi.CmdSendSIDRREP, func(c *Client, id uint32) abi.Struct {
		a, n := pd(c)
		i, il := c.Data([]byte{9})
		return &abi.SIDRREP{ID: id, Data: a, DataLen: n, Info: i, InfoLen: il}
	}},
}

func privateData(c *Client, id uint32) abi.Struct {
	a, n := pd(c)
	return &abi.PrivateData{ID: id, Data: a, Len: n}
}

func info(c *Client, id uint32) abi.Struct {
	a, n := pd(c)
	i, il := c.Data([]byte{9})
	return &abi.Info{ID: id, Status: 28, Data: a, DataLen: n, Info: i, InfoLen: il}
}

// lookupCases: ib_ucm_ctx_get for every command (§3.1, design.md rule 1).
func lookupCases() []Case {
	var cs []Case
	for _, ic := range idCommands {
		cs = append(cs, Case{
			Name: ic.name + "/enoent",
			Spec: "ucm-abi.md §3.1: an id that does not exist → ENOENT",
			run: func(e *env) error {
				c, err := e.Client()
				if err != nil {
					return err
				}
				return expect(c.Cmd(ic.cmd, uint16(ic.cmd.OutLen()), ic.build(c, noSuchID)), unix.ENOENT)
			},
		}, Case{
			Name: ic.name + "/einval-other-file",
			Spec: "ucm-abi.md §3.1, design.md rule 1: an id of another open file → EINVAL, and it is left alone",
			run: func(e *env) error {
				owner, err := e.Client()
				if err != nil {
					return err
				}
				other, err := e.Client()
				if err != nil {
					return err
				}
				id, err := owner.CreateID(0)
				if err != nil {
					return check("create", err)
				}
				if err := expect(other.Cmd(ic.cmd, uint16(ic.cmd.OutLen()), ic.build(other, id)), unix.EINVAL); err != nil {
					return err
				}
				_, err = owner.AttrID(id)
				return check("owner's ATTR_ID afterwards", err)
			},
		})
	}
	return cs
}
