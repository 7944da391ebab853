package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// Client speaks the ucm ABI on one open file, the way libibcm builds its
// writes: header with in = sizeof(cmd), out = sizeof(resp), and buffers in
// the DUT's memory.
type Client struct {
	F   File
	Mem Memory
}

// NewClient opens a file of dut.
func NewClient(dut DUT, nonblock bool) (*Client, error) {
	f, err := dut.Open(nonblock)
	if err != nil {
		return nil, err
	}
	return &Client{F: f, Mem: dut.Mem()}, nil
}

// Close closes the file.
func (c *Client) Close() error { return c.F.Close() }

// Raw writes b as one write(2), as is, and returns its result.
func (c *Client) Raw(b []byte) (int, error) { return c.F.Write(b) }

// Cmd writes command s with the given out; it fails unless write(2)
// returned the whole length.
func (c *Client) Cmd(cmd abi.Cmd, out uint16, s abi.Struct) error {
	b := Encode(cmd, out, s)
	n, err := c.F.Write(b)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("write returned %d, want %d", n, len(b))
	}
	return nil
}

// Encode builds the bytes of one write: header (in = the struct's size)
// and the struct.
func Encode(cmd abi.Cmd, out uint16, s abi.Struct) []byte {
	b := make([]byte, abi.HeaderSize+s.Size())
	h := abi.Header{Cmd: cmd, In: uint16(s.Size()), Out: out}
	h.Encode(b)
	s.Encode(b[abi.HeaderSize:])
	return b
}

func (c *Client) out(cmd abi.Cmd) uint16 { return uint16(cmd.OutLen()) }

// response is a buffer for a command's response, filled with 0xff: the
// kernel wrote every byte of each response, and a response a device does
// not write then reads as ids, counts and states no check takes for right
// (zeroed, it read as id 0 and no events reported).
func (c *Client) response(n int) uint64 {
	a := c.Mem.Alloc(n)
	c.Mem.Write(a, bytes.Repeat([]byte{0xff}, n))
	return a
}

// CreateID creates an id with cookie uid.
func (c *Client) CreateID(uid uint64) (uint32, error) {
	resp := c.response(abi.CreateIDRespSize)
	if err := c.Cmd(abi.CmdCreateID, c.out(abi.CmdCreateID), &abi.CreateID{UID: uid, Response: resp}); err != nil {
		return 0, err
	}
	var r abi.CreateIDResp
	r.Decode(c.Mem.Read(resp, abi.CreateIDRespSize))
	return r.ID, nil
}

// DestroyID destroys id and returns events_reported.
func (c *Client) DestroyID(id uint32) (uint32, error) {
	resp := c.response(abi.DestroyIDRespSize)
	if err := c.Cmd(abi.CmdDestroyID, c.out(abi.CmdDestroyID), &abi.DestroyID{Response: resp, ID: id}); err != nil {
		return 0, err
	}
	var r abi.DestroyIDResp
	r.Decode(c.Mem.Read(resp, abi.DestroyIDRespSize))
	return r.EventsReported, nil
}

// AttrID returns ATTR_ID's answer.
func (c *Client) AttrID(id uint32) (abi.AttrIDResp, error) {
	var r abi.AttrIDResp
	resp := c.response(abi.AttrIDRespSize)
	if err := c.Cmd(abi.CmdAttrID, c.out(abi.CmdAttrID), &abi.AttrID{Response: resp, ID: id}); err != nil {
		return r, err
	}
	r.Decode(c.Mem.Read(resp, abi.AttrIDRespSize))
	return r, nil
}

// InitQPAttr returns INIT_QP_ATTR's answer.
func (c *Client) InitQPAttr(id uint32, st abi.QPState) (abi.QPAttr, error) {
	var r abi.QPAttr
	resp := c.response(abi.QPAttrSize)
	if err := c.Cmd(abi.CmdInitQPAttr, c.out(abi.CmdInitQPAttr), &abi.InitQPAttr{Response: resp, ID: id, QPState: st}); err != nil {
		return r, err
	}
	r.Decode(c.Mem.Read(resp, abi.QPAttrSize))
	return r, nil
}

// Listen is LISTEN.
func (c *Client) Listen(id uint32, sid, mask uint64) error {
	return c.Cmd(abi.CmdListen, 0, &abi.Listen{ServiceID: sid, ServiceMask: mask, ID: id})
}

// Notify is NOTIFY.
func (c *Client) Notify(id uint32, ev abi.IBEvent) error {
	return c.Cmd(abi.CmdNotify, 0, &abi.Notify{ID: id, Event: ev})
}

// Data puts b in the DUT's memory and returns its address and length.
func (c *Client) Data(b []byte) (uint64, uint8) {
	if len(b) == 0 {
		return 0, 0
	}
	a := c.Mem.Alloc(len(b))
	c.Mem.Write(a, b)
	return a, uint8(len(b))
}

// Path puts p in the DUT's memory.
func (c *Client) Path(p abi.PathRec) uint64 {
	a := c.Mem.Alloc(abi.PathRecSize)
	b := make([]byte, abi.PathRecSize)
	p.Encode(b)
	c.Mem.Write(a, b)
	return a
}

// REQ returns a SEND_REQ for an RC connection as cmpost sends it. The
// pairs the receiver sees swapped differ (cm_format_req_event), so that a
// device that does not swap them shows.
func (c *Client) REQ(id uint32, sid uint64, path abi.PathRec, qpn uint32) *abi.REQ {
	return &abi.REQ{
		ID: id, QPN: qpn, QPType: abi.QPTypeRC, PSN: qpn + 1, SID: sid,
		PrimaryPath:        c.Path(path),
		ResponderResources: reqResponderResources, InitiatorDepth: reqInitiatorDepth,
		RemoteCMResponseTimeout: reqRemoteTimeout, LocalCMResponseTimeout: reqLocalTimeout,
		RetryCount: 5, RNRRetryCount: 7, MaxCMRetries: 5, FlowControl: 1,
	}
}

// SendREQ is SEND_REQ.
func (c *Client) SendREQ(r *abi.REQ) error { return c.Cmd(abi.CmdSendREQ, 0, r) }

// SendREP is SEND_REP.
func (c *Client) SendREP(r *abi.REP) error { return c.Cmd(abi.CmdSendREP, 0, r) }

// SendPrivateData is SEND_RTU, SEND_DREQ or SEND_DREP.
func (c *Client) SendPrivateData(cmd abi.Cmd, id uint32, pd []byte) error {
	a, n := c.Data(pd)
	return c.Cmd(cmd, 0, &abi.PrivateData{Data: a, ID: id, Len: n})
}

// SendInfo is SEND_REJ or SEND_APR.
func (c *Client) SendInfo(cmd abi.Cmd, id, status uint32, info, pd []byte) error {
	ia, il := c.Data(info)
	da, dl := c.Data(pd)
	return c.Cmd(cmd, 0, &abi.Info{ID: id, Status: status, Info: ia, Data: da, InfoLen: il, DataLen: dl})
}

// Event is one GET_EVENT answer.
type Event struct {
	abi.EventResp
	Data []byte
	Info []byte
}

// GetEvent is GET_EVENT with libibcm's 255-byte buffers.
func (c *Client) GetEvent() (Event, error) { return c.GetEventLen(255, 255) }

// GetEventLen is GET_EVENT with data and info buffers of the given sizes.
func (c *Client) GetEventLen(dataLen, infoLen uint8) (Event, error) {
	var ev Event
	g := &abi.EventGet{
		Response: c.response(abi.EventRespSize),
		Data:     c.Mem.Alloc(max(int(dataLen), 1)),
		Info:     c.Mem.Alloc(max(int(infoLen), 1)),
		DataLen:  dataLen, InfoLen: infoLen,
	}
	if err := c.Cmd(abi.CmdEvent, abi.EventRespSize, g); err != nil {
		return ev, err
	}
	ev.Decode(c.Mem.Read(g.Response, abi.EventRespSize))
	if ev.Present&abi.PresData != 0 {
		ev.Data = c.Mem.Read(g.Data, ev.Event.PrivateDataLen())
	}
	if ev.Present&abi.PresInfo != 0 {
		ev.Info = c.Mem.Read(g.Info, int(infoLen))
	}
	return ev, nil
}

// WaitEvent waits up to d for an event and takes it.
func (c *Client) WaitEvent(d time.Duration) (Event, error) {
	ok, err := c.F.WaitReadable(d)
	if err != nil {
		return Event{}, err
	}
	if !ok {
		return Event{}, fmt.Errorf("no event within %v", d)
	}
	return c.GetEvent()
}

// Expect waits for the next event and checks its type.
func (c *Client) Expect(t abi.CMEvent, d time.Duration) (Event, error) {
	ev, err := c.WaitEvent(d)
	if err != nil {
		return ev, fmt.Errorf("waiting for %v: %w", t, err)
	}
	if ev.Event != t {
		return ev, fmt.Errorf("got event %v (id %d), want %v", ev.Event, ev.ID, t)
	}
	return ev, nil
}

// Errno returns the errno in err, 0 for nil, and -1 for an error that
// carries none.
func Errno(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return ^unix.Errno(0)
}

// The REQ's pairs, each different from its partner.
const (
	reqResponderResources = 3
	reqInitiatorDepth     = 5
	reqRemoteTimeout      = 20
	reqLocalTimeout       = 19
)
