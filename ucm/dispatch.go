package ucm

import (
	"context"
	"fmt"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"golang.org/x/sys/unix"
)

// handler runs one decoded command of a write().
type handler func(c *call, ctx context.Context, cmd abi.Command) error

// handlers is ucm_cmd_table's handler column: per command number the
// function that runs it. abi's command table (abi/cmd.go) holds the other
// columns, the sizes and the struct a command decodes into; a write is
// decoded once, by abi.ParseCommand, and dispatched once, here by number.
// The commands that share a struct (RTU, DREQ and DREP; REJ and APR) have
// an entry each, bound to their CM call. TestHandlerTable checks that every
// number has a handler for the struct abi decodes it into.
var handlers = [abi.NumCmds]handler{
	abi.CmdCreateID:    on((*call).createID),
	abi.CmdDestroyID:   on((*call).destroyID),
	abi.CmdAttrID:      on((*call).attrID),
	abi.CmdListen:      on((*call).listen),
	abi.CmdNotify:      on((*call).notify),
	abi.CmdSendREQ:     on((*call).sendREQ),
	abi.CmdSendREP:     on((*call).sendREP),
	abi.CmdSendRTU:     on(sendPrivateData((*cmcore.ID).SendRTU, true)),
	abi.CmdSendDREQ:    on(sendPrivateData((*cmcore.ID).SendDREQ, false)),
	abi.CmdSendDREP:    on(sendPrivateData((*cmcore.ID).SendDREP, false)),
	abi.CmdSendREJ:     on(sendInfo(sendREJ)),
	abi.CmdSendMRA:     on((*call).sendMRA),
	abi.CmdSendLAP:     on((*call).sendLAP),
	abi.CmdSendAPR:     on(sendInfo(sendAPR)),
	abi.CmdSendSIDRREQ: on((*call).sendSIDRREQ),
	abi.CmdSendSIDRREP: on((*call).sendSIDRREP),
	abi.CmdEvent:       on((*call).getEvent),
	abi.CmdInitQPAttr:  on((*call).initQPAttr),
}

// on makes a table entry of a handler of one command struct.
func on[T abi.Command](h func(c *call, ctx context.Context, m T) error) handler {
	return func(c *call, ctx context.Context, cmd abi.Command) error {
		m, ok := cmd.(T)
		if !ok { // abi's table and this one disagree: TestHandlerTable
			return fmt.Errorf("no handler for %T: %w", cmd, unix.EINVAL)
		}
		return h(c, ctx, m)
	}
}

// dispatch runs the handler of hdr.Cmd. ParseCommand has already checked
// the header and decoded cmd, and Write the response size (ENOSPC).
func (c *call) dispatch(ctx context.Context, hdr abi.Header, cmd abi.Command) error {
	return handlers[hdr.Cmd](c, ctx, cmd)
}
