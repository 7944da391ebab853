package conformance

import (
	"errors"
	"fmt"

	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// noSuchID is an id no device hands out in a test run.
const noSuchID = 0x7ffffff0

// idCases are CREATE_ID, DESTROY_ID and ATTR_ID (§3.1, §3.2).
func idCases() []Case {
	return []Case{
		{Name: "create_id/success", Spec: "ucm-abi.md §3.2: writes {id}; ids are lowest-free, reused after DESTROY_ID", run: func(e *env) error {
			return sharedTable(func() error { return createIDSuccess(e) })
		}},
		enospc("create_id", abi.CmdCreateID, func(c *Client) abi.Struct {
			return &abi.CreateID{Response: c.Mem.Alloc(4)}
		}),
		enospc("destroy_id", abi.CmdDestroyID, func(c *Client) abi.Struct {
			return &abi.DestroyID{Response: c.Mem.Alloc(4), ID: noSuchID}
		}),
		enospc("attr_id", abi.CmdAttrID, func(c *Client) abi.Struct {
			return &abi.AttrID{Response: c.Mem.Alloc(24), ID: noSuchID}
		}),
		enospc("init_qp_attr", abi.CmdInitQPAttr, func(c *Client) abi.Struct {
			return &abi.InitQPAttr{Response: c.Mem.Alloc(abi.QPAttrSize), ID: noSuchID, QPState: abi.QPStateInit}
		}),
		enospc("get_event", abi.CmdEvent, func(c *Client) abi.Struct {
			return &abi.EventGet{Response: c.Mem.Alloc(abi.EventRespSize)}
		}),
		{Name: "create_id/efault-response", Spec: "ucm-abi.md §3.2: response unwritable → EFAULT and the new id is destroyed", run: func(e *env) error {
			return sharedTable(func() error { return createIDEFault(e) })
		}},
		{Name: "destroy_id/success", Spec: "ucm-abi.md §3.2: writes {events_reported}, 0 for an id without events; the id is gone", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			id, err := c.CreateID(0)
			if err != nil {
				return check("create", err)
			}
			n, err := c.DestroyID(id)
			if err != nil {
				return check("destroy", err)
			}
			if n != 0 {
				return fmt.Errorf("events_reported %d, want 0", n)
			}
			_, err = c.AttrID(id)
			return check("ATTR_ID after destroy", expect(err, unix.ENOENT))
		}},
		{Name: "destroy_id/efault-response", Spec: "ucm-abi.md §3.2: response unwritable → EFAULT, but the id is destroyed", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			id, err := c.CreateID(0)
			if err != nil {
				return check("create", err)
			}
			err = c.Cmd(abi.CmdDestroyID, 4, &abi.DestroyID{Response: c.Mem.Bad(), ID: id})
			if err := expect(err, unix.EFAULT); err != nil {
				return err
			}
			_, err = c.AttrID(id)
			return check("ATTR_ID after destroy", expect(err, unix.ENOENT))
		}},
		{Name: "attr_id/fresh", Spec: "ucm-abi.md §3.2: a new id has service id, mask and remote id 0", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			id, err := c.CreateID(0)
			if err != nil {
				return check("create", err)
			}
			a, err := c.AttrID(id)
			if err != nil {
				return check("attr", err)
			}
			if a.ServiceID != 0 || a.ServiceMask != 0 || a.RemoteID != 0 {
				return fmt.Errorf("fresh id attrs %+v", a)
			}
			return nil
		}},
		{Name: "attr_id/after-listen", Spec: "ucm-abi.md §3.2: after LISTEN, the listen's service id and mask", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			id, err := c.CreateID(0)
			if err != nil {
				return check("create", err)
			}
			sid := SID()
			if err := c.Listen(id, sid, ^uint64(0)); err != nil {
				return check("listen", err)
			}
			a, err := c.AttrID(id)
			if err != nil {
				return check("attr", err)
			}
			if a.ServiceID != sid || a.ServiceMask != ^uint64(0) {
				return fmt.Errorf("attrs %+v, want sid %#x mask ~0", a, sid)
			}
			return nil
		}},
		{Name: "attr_id/efault-response", Spec: "ucm-abi.md §3.2: response unwritable → EFAULT", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			id, err := c.CreateID(0)
			if err != nil {
				return check("create", err)
			}
			return expect(c.Cmd(abi.CmdAttrID, 24, &abi.AttrID{Response: c.Mem.Bad(), ID: id}), unix.EFAULT)
		}},
	}
}

// enospc: out one byte short of the response → ENOSPC, checked before
// anything else (the id in the command is unknown).
func enospc(area string, cmd abi.Cmd, build func(*Client) abi.Struct) Case {
	return Case{
		Name: area + "/enospc",
		Spec: fmt.Sprintf("ucm-abi.md §3.2: out < %d → ENOSPC, before the command is looked at", cmd.OutLen()),
		run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			return expect(c.Cmd(cmd, uint16(cmd.OutLen()-1), build(c)), unix.ENOSPC)
		},
	}
}

// createIDSuccess is create_id/success.
func createIDSuccess(e *env) error {
	c, err := e.Client()
	if err != nil {
		return err
	}
	a, err := c.CreateID(1)
	if err != nil {
		return check("create", err)
	}
	b, err := c.CreateID(2)
	if err != nil {
		return check("create", err)
	}
	if a == b {
		return fmt.Errorf("two ids numbered %d", a)
	}
	if _, err := c.DestroyID(a); err != nil {
		return check("destroy", err)
	}
	again, err := c.CreateID(3)
	if err != nil {
		return check("create", err)
	}
	if again != a {
		return fmt.Errorf("after destroying id %d, CREATE_ID gave %d: not lowest-free (%w)", a, again, errOtherUser)
	}
	return nil
}

// createIDEFault is create_id/efault-response.
func createIDEFault(e *env) error {
	c, err := e.Client()
	if err != nil {
		return err
	}
	// Make the lowest free id known: take it and give it back.
	low, err := c.CreateID(0)
	if err != nil {
		return check("create", err)
	}
	if _, err := c.DestroyID(low); err != nil {
		return check("destroy", err)
	}
	err = c.Cmd(abi.CmdCreateID, 4, &abi.CreateID{Response: c.Mem.Bad()})
	if err := expect(err, unix.EFAULT); err != nil {
		return err
	}
	again, err := c.CreateID(0)
	if err != nil {
		return check("create", err)
	}
	if again != low {
		return fmt.Errorf("CREATE_ID after the EFAULT gave %d, want the freed %d: the failed id leaked (%w)", again, low, errOtherUser)
	}
	return nil
}

// errOtherUser marks a check that another user of the device's one id
// table could make fail (ids are lowest-free across every file).
var errOtherUser = errors.New("an id was not the lowest free")

// sharedTable runs a case that expects the lowest free id, up to three
// times while it fails with errOtherUser: on a device others use, their
// CREATE_ID may take the id between two of the case's commands, where a
// device that leaks ids fails every time.
func sharedTable(run func() error) error {
	var err error
	for range 3 {
		if err = run(); !errors.Is(err, errOtherUser) {
			return err
		}
	}
	return err
}
