package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrTruncated is returned (wrapped) by every decoder given fewer bytes than
// its struct needs.
var ErrTruncated = errors.New("truncated message")

var ne = binary.NativeEndian

func need(what string, b []byte, n int) error {
	if len(b) < n {
		return truncated(what, b, n)
	}
	return nil
}

// truncated is need's error, apart so that need inlines.
func truncated(what string, b []byte, n int) error {
	return fmt.Errorf("%s: have %d bytes, need %d: %w", what, len(b), n, ErrTruncated)
}

// --- fuse_in_header / fuse_out_header ---

// DecodeInHeader decodes struct fuse_in_header.
func DecodeInHeader(b []byte) (fuse.InHeader, error) {
	var h fuse.InHeader
	err := DecodeInHeaderTo(&h, b)
	return h, err
}

// DecodeInHeaderTo decodes struct fuse_in_header into h, which the server
// keeps in each reader's request: once per request, so without the
// copies of a returned struct.
func DecodeInHeaderTo(h *fuse.InHeader, b []byte) error {
	if err := need("fuse_in_header", b, SizeofInHeader); err != nil {
		return err
	}
	b = b[:SizeofInHeader] // one bounds check for all the fields
	h.Length = ne.Uint32(b[0:])
	h.Opcode = ne.Uint32(b[4:])
	h.Unique = ne.Uint64(b[8:])
	h.NodeId = ne.Uint64(b[16:])
	h.Uid = ne.Uint32(b[24:])
	h.Gid = ne.Uint32(b[28:])
	h.Pid = ne.Uint32(b[32:])
	h.TotalExtlen = ne.Uint16(b[36:])
	h.Padding = ne.Uint16(b[38:])
	return nil
}

// AppendInHeader appends struct fuse_in_header.
func AppendInHeader(b []byte, h *fuse.InHeader) []byte {
	b = ne.AppendUint32(b, h.Length)
	b = ne.AppendUint32(b, h.Opcode)
	b = ne.AppendUint64(b, h.Unique)
	b = ne.AppendUint64(b, h.NodeId)
	b = ne.AppendUint32(b, h.Uid)
	b = ne.AppendUint32(b, h.Gid)
	b = ne.AppendUint32(b, h.Pid)
	b = ne.AppendUint16(b, h.TotalExtlen)
	return ne.AppendUint16(b, h.Padding)
}

// DecodeOutHeader decodes struct fuse_out_header. Status is the kernel's
// "error" field: 0, a negative errno, or a positive notify code when Unique
// is 0.
func DecodeOutHeader(b []byte) (fuse.OutHeader, error) {
	if err := need("fuse_out_header", b, SizeofOutHeader); err != nil {
		return fuse.OutHeader{}, err
	}
	return fuse.OutHeader{
		Length: ne.Uint32(b[0:]),
		Status: int32(ne.Uint32(b[4:])),
		Unique: ne.Uint64(b[8:]),
	}, nil
}

// AppendOutHeader appends struct fuse_out_header.
func AppendOutHeader(b []byte, h fuse.OutHeader) []byte {
	b = ne.AppendUint32(b, h.Length)
	b = ne.AppendUint32(b, uint32(h.Status))
	return ne.AppendUint64(b, h.Unique)
}

// EncodeOutHeader writes struct fuse_out_header into b[:SizeofOutHeader].
func EncodeOutHeader(b []byte, h fuse.OutHeader) {
	_ = b[SizeofOutHeader-1]
	ne.PutUint32(b[0:], h.Length)
	ne.PutUint32(b[4:], uint32(h.Status))
	ne.PutUint64(b[8:], h.Unique)
}

// --- request bodies reused from go-fuse (InHeader filled from h) ---

// DecodeOpenIn decodes struct fuse_open_in from the body after h.
func DecodeOpenIn(h fuse.InHeader, body []byte) (fuse.OpenIn, error) {
	if err := need("fuse_open_in", body, SizeofOpenIn); err != nil {
		return fuse.OpenIn{}, err
	}
	return fuse.OpenIn{InHeader: h, Flags: ne.Uint32(body[0:]), Mode: ne.Uint32(body[4:])}, nil
}

// AppendOpenIn appends the body of struct fuse_open_in (not the header).
func AppendOpenIn(b []byte, in *fuse.OpenIn) []byte {
	b = ne.AppendUint32(b, in.Flags)
	return ne.AppendUint32(b, in.Mode)
}

// DecodeReadIn decodes struct fuse_read_in from the body after h.
func DecodeReadIn(h fuse.InHeader, body []byte) (fuse.ReadIn, error) {
	if err := need("fuse_read_in", body, SizeofReadIn); err != nil {
		return fuse.ReadIn{}, err
	}
	return fuse.ReadIn{
		InHeader:  h,
		Fh:        ne.Uint64(body[0:]),
		Offset:    ne.Uint64(body[8:]),
		Size:      ne.Uint32(body[16:]),
		ReadFlags: ne.Uint32(body[20:]),
		LockOwner: ne.Uint64(body[24:]),
		Flags:     ne.Uint32(body[32:]),
		Padding:   ne.Uint32(body[36:]),
	}, nil
}

// AppendReadIn appends the body of struct fuse_read_in.
func AppendReadIn(b []byte, in *fuse.ReadIn) []byte {
	b = ne.AppendUint64(b, in.Fh)
	b = ne.AppendUint64(b, in.Offset)
	b = ne.AppendUint32(b, in.Size)
	b = ne.AppendUint32(b, in.ReadFlags)
	b = ne.AppendUint64(b, in.LockOwner)
	b = ne.AppendUint32(b, in.Flags)
	return ne.AppendUint32(b, in.Padding)
}

// DecodeWriteIn decodes struct fuse_write_in from the body after h; the
// written data follows it.
func DecodeWriteIn(h fuse.InHeader, body []byte) (fuse.WriteIn, error) {
	if err := need("fuse_write_in", body, SizeofWriteIn); err != nil {
		return fuse.WriteIn{}, err
	}
	body = body[:SizeofWriteIn]
	return fuse.WriteIn{
		InHeader:   h,
		Fh:         ne.Uint64(body[0:]),
		Offset:     ne.Uint64(body[8:]),
		Size:       ne.Uint32(body[16:]),
		WriteFlags: ne.Uint32(body[20:]),
		LockOwner:  ne.Uint64(body[24:]),
		Flags:      ne.Uint32(body[32:]),
		Padding:    ne.Uint32(body[36:]),
	}, nil
}

// AppendWriteIn appends the body of struct fuse_write_in.
func AppendWriteIn(b []byte, in *fuse.WriteIn) []byte {
	b = ne.AppendUint64(b, in.Fh)
	b = ne.AppendUint64(b, in.Offset)
	b = ne.AppendUint32(b, in.Size)
	b = ne.AppendUint32(b, in.WriteFlags)
	b = ne.AppendUint64(b, in.LockOwner)
	b = ne.AppendUint32(b, in.Flags)
	return ne.AppendUint32(b, in.Padding)
}

// DecodeReleaseIn decodes struct fuse_release_in from the body after h.
func DecodeReleaseIn(h fuse.InHeader, body []byte) (fuse.ReleaseIn, error) {
	if err := need("fuse_release_in", body, SizeofReleaseIn); err != nil {
		return fuse.ReleaseIn{}, err
	}
	return fuse.ReleaseIn{
		InHeader:     h,
		Fh:           ne.Uint64(body[0:]),
		Flags:        ne.Uint32(body[8:]),
		ReleaseFlags: ne.Uint32(body[12:]),
		LockOwner:    ne.Uint64(body[16:]),
	}, nil
}

// AppendReleaseIn appends the body of struct fuse_release_in.
func AppendReleaseIn(b []byte, in *fuse.ReleaseIn) []byte {
	b = ne.AppendUint64(b, in.Fh)
	b = ne.AppendUint32(b, in.Flags)
	b = ne.AppendUint32(b, in.ReleaseFlags)
	return ne.AppendUint64(b, in.LockOwner)
}

// DecodeInterruptIn decodes struct fuse_interrupt_in from the body after h.
func DecodeInterruptIn(h fuse.InHeader, body []byte) (fuse.InterruptIn, error) {
	if err := need("fuse_interrupt_in", body, SizeofInterruptIn); err != nil {
		return fuse.InterruptIn{}, err
	}
	return fuse.InterruptIn{InHeader: h, Unique: ne.Uint64(body[0:])}, nil
}

// AppendInterruptIn appends the body of struct fuse_interrupt_in.
func AppendInterruptIn(b []byte, in *fuse.InterruptIn) []byte {
	return ne.AppendUint64(b, in.Unique)
}

// DecodeIoctlIn decodes struct fuse_ioctl_in from the body after h.
func DecodeIoctlIn(h fuse.InHeader, body []byte) (fuse.IoctlIn, error) {
	if err := need("fuse_ioctl_in", body, SizeofIoctlIn); err != nil {
		return fuse.IoctlIn{}, err
	}
	return fuse.IoctlIn{
		InHeader: h,
		Fh:       ne.Uint64(body[0:]),
		Flags:    ne.Uint32(body[8:]),
		Cmd:      ne.Uint32(body[12:]),
		Arg:      ne.Uint64(body[16:]),
		InSize:   ne.Uint32(body[24:]),
		OutSize:  ne.Uint32(body[28:]),
	}, nil
}

// AppendIoctlIn appends the body of struct fuse_ioctl_in.
func AppendIoctlIn(b []byte, in *fuse.IoctlIn) []byte {
	b = ne.AppendUint64(b, in.Fh)
	b = ne.AppendUint32(b, in.Flags)
	b = ne.AppendUint32(b, in.Cmd)
	b = ne.AppendUint64(b, in.Arg)
	b = ne.AppendUint32(b, in.InSize)
	return ne.AppendUint32(b, in.OutSize)
}

// --- reply bodies reused from go-fuse ---

// DecodeOpenOut decodes struct fuse_open_out.
func DecodeOpenOut(b []byte) (fuse.OpenOut, error) {
	if err := need("fuse_open_out", b, SizeofOpenOut); err != nil {
		return fuse.OpenOut{}, err
	}
	return fuse.OpenOut{
		Fh:        ne.Uint64(b[0:]),
		OpenFlags: ne.Uint32(b[8:]),
		BackingID: int32(ne.Uint32(b[12:])),
	}, nil
}

// AppendOpenOut appends struct fuse_open_out.
func AppendOpenOut(b []byte, out fuse.OpenOut) []byte {
	b = ne.AppendUint64(b, out.Fh)
	b = ne.AppendUint32(b, out.OpenFlags)
	return ne.AppendUint32(b, uint32(out.BackingID))
}

// DecodeWriteOut decodes struct fuse_write_out.
func DecodeWriteOut(b []byte) (fuse.WriteOut, error) {
	if err := need("fuse_write_out", b, SizeofWriteOut); err != nil {
		return fuse.WriteOut{}, err
	}
	return fuse.WriteOut{Size: ne.Uint32(b[0:]), Padding: ne.Uint32(b[4:])}, nil
}

// AppendWriteOut appends struct fuse_write_out.
func AppendWriteOut(b []byte, out fuse.WriteOut) []byte {
	b = ne.AppendUint32(b, out.Size)
	return ne.AppendUint32(b, out.Padding)
}

// --- structs go-fuse does not export ---

// CuseInitIn is struct cuse_init_in, the body of the CUSE_INIT request.
type CuseInitIn struct {
	Major  uint32
	Minor  uint32
	Unused uint32
	Flags  uint32 // the kernel always offers CUSE_UNRESTRICTED_IOCTL
}

// Decode reads struct cuse_init_in from b.
func (in *CuseInitIn) Decode(b []byte) error {
	if err := need("cuse_init_in", b, SizeofCuseInitIn); err != nil {
		return err
	}
	*in = CuseInitIn{
		Major:  ne.Uint32(b[0:]),
		Minor:  ne.Uint32(b[4:]),
		Unused: ne.Uint32(b[8:]),
		Flags:  ne.Uint32(b[12:]),
	}
	return nil
}

// Append appends struct cuse_init_in.
func (in *CuseInitIn) Append(b []byte) []byte {
	b = ne.AppendUint32(b, in.Major)
	b = ne.AppendUint32(b, in.Minor)
	b = ne.AppendUint32(b, in.Unused)
	return ne.AppendUint32(b, in.Flags)
}

// CuseInitOut is struct cuse_init_out, the reply to CUSE_INIT; the packed
// "KEY=VALUE\0" info blob follows it.
type CuseInitOut struct {
	Major    uint32
	Minor    uint32
	Unused   uint32
	Flags    uint32
	MaxRead  uint32 // the kernel raises values below 4096 to 4096
	MaxWrite uint32
	DevMajor uint32 // 0 asks for a dynamic major
	DevMinor uint32
	Spare    [10]uint32
}

// Decode reads struct cuse_init_out from b.
func (out *CuseInitOut) Decode(b []byte) error {
	if err := need("cuse_init_out", b, SizeofCuseInitOut); err != nil {
		return err
	}
	*out = CuseInitOut{
		Major:    ne.Uint32(b[0:]),
		Minor:    ne.Uint32(b[4:]),
		Unused:   ne.Uint32(b[8:]),
		Flags:    ne.Uint32(b[12:]),
		MaxRead:  ne.Uint32(b[16:]),
		MaxWrite: ne.Uint32(b[20:]),
		DevMajor: ne.Uint32(b[24:]),
		DevMinor: ne.Uint32(b[28:]),
	}
	for i := range out.Spare {
		out.Spare[i] = ne.Uint32(b[32+4*i:])
	}
	return nil
}

// Append appends struct cuse_init_out.
func (out *CuseInitOut) Append(b []byte) []byte {
	for _, v := range [...]uint32{out.Major, out.Minor, out.Unused, out.Flags,
		out.MaxRead, out.MaxWrite, out.DevMajor, out.DevMinor} {
		b = ne.AppendUint32(b, v)
	}
	for _, v := range out.Spare {
		b = ne.AppendUint32(b, v)
	}
	return b
}

// PollIn is struct fuse_poll_in, the body of FUSE_POLL.
type PollIn struct {
	Fh     uint64
	Kh     uint64 // one per open file, for FUSE_NOTIFY_POLL
	Flags  uint32 // FUSE_POLL_SCHEDULE_NOTIFY
	Events uint32 // requested POLL* events, userspace values
}

// Decode reads struct fuse_poll_in from b.
func (in *PollIn) Decode(b []byte) error {
	if err := need("fuse_poll_in", b, SizeofPollIn); err != nil {
		return err
	}
	*in = PollIn{
		Fh:     ne.Uint64(b[0:]),
		Kh:     ne.Uint64(b[8:]),
		Flags:  ne.Uint32(b[16:]),
		Events: ne.Uint32(b[20:]),
	}
	return nil
}

// Append appends struct fuse_poll_in.
func (in *PollIn) Append(b []byte) []byte {
	b = ne.AppendUint64(b, in.Fh)
	b = ne.AppendUint64(b, in.Kh)
	b = ne.AppendUint32(b, in.Flags)
	return ne.AppendUint32(b, in.Events)
}

// PollOut is struct fuse_poll_out, the reply to FUSE_POLL.
type PollOut struct {
	Revents uint32
	Padding uint32
}

// Decode reads struct fuse_poll_out from b.
func (out *PollOut) Decode(b []byte) error {
	if err := need("fuse_poll_out", b, SizeofPollOut); err != nil {
		return err
	}
	*out = PollOut{Revents: ne.Uint32(b[0:]), Padding: ne.Uint32(b[4:])}
	return nil
}

// Append appends struct fuse_poll_out.
func (out PollOut) Append(b []byte) []byte {
	b = ne.AppendUint32(b, out.Revents)
	return ne.AppendUint32(b, out.Padding)
}

// NotifyPollWakeupOut is struct fuse_notify_poll_wakeup_out, the body of a
// FUSE_NOTIFY_POLL message.
type NotifyPollWakeupOut struct {
	Kh uint64
}

// Decode reads struct fuse_notify_poll_wakeup_out from b.
func (out *NotifyPollWakeupOut) Decode(b []byte) error {
	if err := need("fuse_notify_poll_wakeup_out", b, SizeofNotifyPollWakeupOut); err != nil {
		return err
	}
	*out = NotifyPollWakeupOut{Kh: ne.Uint64(b[0:])}
	return nil
}

// Append appends struct fuse_notify_poll_wakeup_out.
func (out NotifyPollWakeupOut) Append(b []byte) []byte {
	return ne.AppendUint64(b, out.Kh)
}
