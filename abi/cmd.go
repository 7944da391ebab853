package abi

import "fmt"

// ABIVersion is IB_USER_CM_ABI_VERSION, the value the driver published in
// /sys/class/infiniband_cm/abi_version. libibcm accepts 4 and 5.
const ABIVersion = 5

// Cmd is a command number, the IB_USER_CM_CMD_* enum: the index into the
// kernel's ucm_cmd_table.
type Cmd uint32

// Command numbers, in the kernel's order.
const (
	CmdCreateID    Cmd = 0  // IB_USER_CM_CMD_CREATE_ID
	CmdDestroyID   Cmd = 1  // IB_USER_CM_CMD_DESTROY_ID
	CmdAttrID      Cmd = 2  // IB_USER_CM_CMD_ATTR_ID
	CmdListen      Cmd = 3  // IB_USER_CM_CMD_LISTEN
	CmdNotify      Cmd = 4  // IB_USER_CM_CMD_NOTIFY (ESTABLISH before ABI 5)
	CmdSendREQ     Cmd = 5  // IB_USER_CM_CMD_SEND_REQ
	CmdSendREP     Cmd = 6  // IB_USER_CM_CMD_SEND_REP
	CmdSendRTU     Cmd = 7  // IB_USER_CM_CMD_SEND_RTU
	CmdSendDREQ    Cmd = 8  // IB_USER_CM_CMD_SEND_DREQ
	CmdSendDREP    Cmd = 9  // IB_USER_CM_CMD_SEND_DREP
	CmdSendREJ     Cmd = 10 // IB_USER_CM_CMD_SEND_REJ
	CmdSendMRA     Cmd = 11 // IB_USER_CM_CMD_SEND_MRA
	CmdSendLAP     Cmd = 12 // IB_USER_CM_CMD_SEND_LAP
	CmdSendAPR     Cmd = 13 // IB_USER_CM_CMD_SEND_APR
	CmdSendSIDRREQ Cmd = 14 // IB_USER_CM_CMD_SEND_SIDR_REQ
	CmdSendSIDRREP Cmd = 15 // IB_USER_CM_CMD_SEND_SIDR_REP
	CmdEvent       Cmd = 16 // IB_USER_CM_CMD_EVENT (GET_EVENT)
	CmdInitQPAttr  Cmd = 17 // IB_USER_CM_CMD_INIT_QP_ATTR

	// NumCmds is ARRAY_SIZE(ucm_cmd_table); every slot is populated.
	NumCmds = 18
)

// CmdEstablish is the ABI-4 name of command 4 (struct {u32 id}, in == 4).
const CmdEstablish = CmdNotify

// commands is the ABI's command table (the kernel's ucm_cmd_table without
// the handlers): per command number its name, sizeof its command struct
// (in), the size of its response (out) and the struct its bytes decode
// into. Cmd's methods, ParseCommand and Decoder read it; ucm's handler
// table (ucm/dispatch.go) is indexed by the same numbers.
var commands = [NumCmds]struct {
	name    string
	in, out int
	cmdStruct
}{
	CmdCreateID:    {"CREATE_ID", CreateIDSize, CreateIDRespSize, structOf(func(d *Decoder) *CreateID { return &d.createID })},
	CmdDestroyID:   {"DESTROY_ID", DestroyIDSize, DestroyIDRespSize, structOf(func(d *Decoder) *DestroyID { return &d.destroyID })},
	CmdAttrID:      {"ATTR_ID", AttrIDSize, AttrIDRespSize, structOf(func(d *Decoder) *AttrID { return &d.attrID })},
	CmdListen:      {"LISTEN", ListenSize, 0, structOf(func(d *Decoder) *Listen { return &d.listen })},
	CmdNotify:      {"NOTIFY", NotifySize, 0, structOf(func(d *Decoder) *Notify { return &d.notify })},
	CmdSendREQ:     {"SEND_REQ", REQSize, 0, structOf(func(d *Decoder) *REQ { return &d.req })},
	CmdSendREP:     {"SEND_REP", REPSize, 0, structOf(func(d *Decoder) *REP { return &d.rep })},
	CmdSendRTU:     {"SEND_RTU", PrivateDataSize, 0, structOf(func(d *Decoder) *PrivateData { return &d.privateData })},
	CmdSendDREQ:    {"SEND_DREQ", PrivateDataSize, 0, structOf(func(d *Decoder) *PrivateData { return &d.privateData })},
	CmdSendDREP:    {"SEND_DREP", PrivateDataSize, 0, structOf(func(d *Decoder) *PrivateData { return &d.privateData })},
	CmdSendREJ:     {"SEND_REJ", InfoSize, 0, structOf(func(d *Decoder) *Info { return &d.info })},
	CmdSendMRA:     {"SEND_MRA", MRASize, 0, structOf(func(d *Decoder) *MRA { return &d.mra })},
	CmdSendLAP:     {"SEND_LAP", LAPSize, 0, structOf(func(d *Decoder) *LAP { return &d.lap })},
	CmdSendAPR:     {"SEND_APR", InfoSize, 0, structOf(func(d *Decoder) *Info { return &d.info })},
	CmdSendSIDRREQ: {"SEND_SIDR_REQ", SIDRREQSize, 0, structOf(func(d *Decoder) *SIDRREQ { return &d.sidrREQ })},
	CmdSendSIDRREP: {"SEND_SIDR_REP", SIDRREPSize, 0, structOf(func(d *Decoder) *SIDRREP { return &d.sidrREP })},
	CmdEvent:       {"EVENT", EventGetSize, EventRespSize, structOf(func(d *Decoder) *EventGet { return &d.eventGet })},
	CmdInitQPAttr:  {"INIT_QP_ATTR", InitQPAttrSize, QPAttrSize, structOf(func(d *Decoder) *InitQPAttr { return &d.initQPAttr })},
}

// cmdStruct is the command table's struct column: a new zero struct
// (NewCommand), or the Decoder's own one.
type cmdStruct struct {
	alloc func() Command
	of    func(*Decoder) Command
}

// structOf makes a cmdStruct for the struct T that in picks out of a
// Decoder.
func structOf[T any, P interface {
	*T
	Command
}](in func(*Decoder) P) cmdStruct {
	return cmdStruct{
		alloc: func() Command { return P(new(T)) },
		of:    func(d *Decoder) Command { return in(d) },
	}
}

// Valid reports whether c names a command (c < NumCmds).
func (c Cmd) Valid() bool { return c < NumCmds }

// String returns the kernel's name without the IB_USER_CM_CMD_ prefix.
func (c Cmd) String() string {
	if !c.Valid() {
		return fmt.Sprintf("Cmd(%d)", uint32(c))
	}
	return commands[c].name
}

// InLen is the size of the command struct the kernel handler copied from the
// write buffer (sizeof(cmd)), which is also what libibcm puts in hdr.in.
// It is 0 for an invalid command.
func (c Cmd) InLen() int {
	if !c.Valid() {
		return 0
	}
	return commands[c].in
}

// OutLen is the size of the response the handler writes to cmd.response, or 0
// for commands without one. The kernel failed the write with ENOSPC when
// hdr.out < OutLen, before reading the command.
func (c Cmd) OutLen() int {
	if !c.Valid() {
		return 0
	}
	return commands[c].out
}

// HeaderSize is sizeof(struct ib_ucm_cmd_hdr).
const HeaderSize = 8

// Header is struct ib_ucm_cmd_hdr, the first 8 bytes of every write().
type Header struct {
	Cmd Cmd    // @0 u32
	In  uint16 // @4 bytes of command following the header
	Out uint16 // @6 size of the caller's response buffer
}

// Size returns HeaderSize.
func (*Header) Size() int { return HeaderSize }

// Encode writes h to b[:HeaderSize]; it panics if b is shorter.
func (h *Header) Encode(b []byte) {
	b = fit(b, HeaderSize)
	ne.PutUint32(b[0:], uint32(h.Cmd))
	ne.PutUint16(b[4:], h.In)
	ne.PutUint16(b[6:], h.Out)
}

// Decode reads h from b, treating bytes beyond len(b) as zero.
func (h *Header) Decode(b []byte) {
	var w [HeaderSize]byte
	copy(w[:], b)
	h.Cmd = Cmd(ne.Uint32(w[0:]))
	h.In = ne.Uint16(w[4:])
	h.Out = ne.Uint16(w[6:])
}

func (h Header) String() string {
	return fmt.Sprintf("%v in=%d out=%d", h.Cmd, h.In, h.Out)
}
