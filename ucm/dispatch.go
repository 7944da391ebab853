package ucm

import (
	"context"
	"fmt"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cuse"
	"golang.org/x/sys/unix"
)

// dispatch runs the handler of ucm_cmd_table[hdr.Cmd]. ParseCommand has
// already checked the header and ENOSPC the response size.
func (c *call) dispatch(ctx context.Context, req cuse.Request, hdr abi.Header, cmd abi.Command) error {
	switch m := cmd.(type) {
	case *abi.CreateID:
		return c.createID(ctx, m)
	case *abi.DestroyID:
		return c.destroyID(ctx, m)
	case *abi.AttrID:
		return c.attrID(m)
	case *abi.InitQPAttr:
		return c.initQPAttr(m)
	case *abi.Listen:
		return c.listen(m)
	case *abi.Notify:
		return c.notify(m)
	case *abi.REQ:
		return c.sendREQ(m)
	case *abi.REP:
		return c.sendREP(m)
	case *abi.PrivateData:
		return c.sendPrivateData(hdr.Cmd, m)
	case *abi.Info:
		return c.sendInfo(hdr.Cmd, m)
	case *abi.MRA:
		return c.sendMRA(m)
	case *abi.LAP:
		return c.sendLAP(m)
	case *abi.SIDRREQ:
		return c.sendSIDRREQ(m)
	case *abi.SIDRREP:
		return c.sendSIDRREP(m)
	case *abi.EventGet:
		return c.getEvent(ctx, req, m)
	}
	return fmt.Errorf("no handler for %T: %w", cmd, unix.EINVAL)
}
