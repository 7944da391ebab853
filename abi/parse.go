package abi

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Command is a decoded command struct: one of *CreateID, *DestroyID, *AttrID,
// *Listen, *Notify, *REQ, *REP, *PrivateData (RTU, DREQ, DREP), *Info (REJ,
// APR), *MRA, *LAP, *SIDRREQ, *SIDRREP, *EventGet or *InitQPAttr. The
// header's Cmd tells the commands that share a struct apart.
type Command interface {
	Struct
	isCommand()
}

func (*CreateID) isCommand()    {}
func (*DestroyID) isCommand()   {}
func (*AttrID) isCommand()      {}
func (*InitQPAttr) isCommand()  {}
func (*Listen) isCommand()      {}
func (*Notify) isCommand()      {}
func (*PrivateData) isCommand() {}
func (*REQ) isCommand()         {}
func (*REP) isCommand()         {}
func (*Info) isCommand()        {}
func (*MRA) isCommand()         {}
func (*LAP) isCommand()         {}
func (*SIDRREQ) isCommand()     {}
func (*SIDRREP) isCommand()     {}
func (*EventGet) isCommand()    {}

// NewCommand returns a zero command struct for c (from the command
// table), or nil if c is not a command.
func NewCommand(c Cmd) Command {
	if !c.Valid() {
		return nil
	}
	return commands[c].alloc()
}

// ParseHeader applies the checks of the kernel's ib_ucm_write, in its order,
// to the bytes of one write(): shorter than the header, command number out of
// range, or in+8 beyond the write all fail with EINVAL. (The EACCES check of
// ib_safe_file_access comes before these and is the caller's, as is the EFAULT
// a CUSE daemon cannot get.) The returned error wraps the unix.Errno; the
// header then holds whatever could be decoded, for logging.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("ucm write of %d bytes: shorter than the %d-byte command header: %w",
			len(b), HeaderSize, unix.EINVAL)
	}
	h.Decode(b)
	if !h.Cmd.Valid() {
		return h, fmt.Errorf("ucm write: command %d out of range (%d commands): %w",
			uint32(h.Cmd), NumCmds, unix.EINVAL)
	}
	if int(h.In)+HeaderSize > len(b) {
		return h, fmt.Errorf("ucm write of %d bytes: %v declares %d command bytes after the header: %w",
			len(b), h.Cmd, h.In, unix.EINVAL)
	}
	return h, nil
}

// ParseCommand decodes one write(): the header, checked by ParseHeader, and
// the command struct it names. As the kernel's handlers did, the struct is
// read from the bytes after the header regardless of hdr.in: bytes beyond in
// but within the write are used, bytes beyond the write read as zero (see the
// package documentation). Command 4 with in == 4 is ABI 4's ESTABLISH and
// decodes as Notify{ID, IBEventCommEst}.
//
// On success the write is to return len(b), not HeaderSize+in. The command
// is a new allocation; a Decoder is the allocation-free path.
func ParseCommand(b []byte) (Header, Command, error) {
	return parse(b, nil)
}

// Decoder is ParseCommand without the allocation, for a server's hot path:
// it decodes every write into a command struct of its own, one per struct
// type, which the next Parse of the same type overwrites. The zero Decoder
// is ready for use; it is not safe for concurrent use.
type Decoder struct {
	createID    CreateID
	destroyID   DestroyID
	attrID      AttrID
	listen      Listen
	notify      Notify
	req         REQ
	rep         REP
	privateData PrivateData
	info        Info
	mra         MRA
	lap         LAP
	sidrREQ     SIDRREQ
	sidrREP     SIDRREP
	eventGet    EventGet
	initQPAttr  InitQPAttr
}

// Parse is ParseCommand into d's structs: the command is valid until the
// next Parse.
func (d *Decoder) Parse(b []byte) (Header, Command, error) {
	return parse(b, d)
}

// parse is ParseCommand into d's structs, or new ones if d is nil. Every
// Decode sets every field, so a reused struct keeps nothing of before
// (TestDecoderReuse).
func parse(b []byte, d *Decoder) (Header, Command, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, nil, err
	}
	body := b[HeaderSize:]
	var c Command
	if d == nil {
		c = commands[h.Cmd].alloc()
	} else {
		c = commands[h.Cmd].of(d)
	}
	if h.Cmd == CmdNotify && h.In == EstablishSize {
		// ParseHeader checked that the write holds these 4 bytes.
		*c.(*Notify) = Notify{ID: ne.Uint32(body), Event: IBEventCommEst}
		return h, c, nil
	}
	c.Decode(body)
	return h, c, nil
}
