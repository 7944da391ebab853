// Package wire is the raw FUSE/CUSE wire protocol as seen on /dev/cuse:
// opcodes, flags, message sizes, and explicit encoders and decoders for every
// fixed-size struct a CUSE daemon exchanges with the kernel.
//
// Names follow include/uapi/linux/fuse.h. Structs that
// github.com/hanwen/go-fuse/v2/fuse exports are reused; go-fuse embeds
// fuse.InHeader in every request struct, so its decoders here take the
// already decoded header and the request body that follows it. The structs
// go-fuse lacks or keeps unexported (cuse_init_in/out, fuse_poll_in/out,
// fuse_notify_poll_wakeup_out) are defined here.
//
// The codec follows the repository's convention (docs/design.md §10.3):
// the structs defined here have Decode and Append methods; go-fuse's
// structs, which cannot have methods here, get functions named after them
// (DecodeOpenIn, AppendOpenIn, EncodeOutHeader into a fixed buffer).
//
// All integers are in host byte order, as the kernel writes them. No decoder
// casts foreign bytes to a struct: each field is read with encoding/binary.
package wire

import "fmt"

// Protocol version spoken by this package. The kernel adopts the minor we
// answer in CUSE_INIT (fc->minor = arg->minor), so we answer
// min(kernel's minor, FUSE_KERNEL_MINOR_VERSION).
const (
	FUSE_KERNEL_VERSION       = 7
	FUSE_KERNEL_MINOR_VERSION = 38
	// CUSE_MIN_MINOR is the oldest minor cuse_process_init_reply accepts.
	CUSE_MIN_MINOR = 11
)

// Opcode is fuse_in_header.opcode (enum fuse_opcode).
type Opcode uint32

// The opcodes that can reach a CUSE daemon (cuse_frontend_fops has no
// flush, fsync or mmap), plus FUSE_INIT for diagnostics.
const (
	FUSE_OPEN      Opcode = 14
	FUSE_READ      Opcode = 15
	FUSE_WRITE     Opcode = 16
	FUSE_RELEASE   Opcode = 18
	FUSE_INIT      Opcode = 26
	FUSE_INTERRUPT Opcode = 36
	FUSE_IOCTL     Opcode = 39
	FUSE_POLL      Opcode = 40
	CUSE_INIT      Opcode = 4096
)

var opcodeNames = map[Opcode]string{
	FUSE_OPEN:      "OPEN",
	FUSE_READ:      "READ",
	FUSE_WRITE:     "WRITE",
	FUSE_RELEASE:   "RELEASE",
	FUSE_INIT:      "INIT",
	FUSE_INTERRUPT: "INTERRUPT",
	FUSE_IOCTL:     "IOCTL",
	FUSE_POLL:      "POLL",
	CUSE_INIT:      "CUSE_INIT",
}

func (o Opcode) String() string {
	if s, ok := opcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("opcode(%d)", uint32(o))
}

const (
	// FUSE_INT_REQ_BIT is set in the in_header.unique of an INTERRUPT; the
	// unique of ordinary requests is even.
	FUSE_INT_REQ_BIT = 1

	// FUSE_POLL_SCHEDULE_NOTIFY in fuse_poll_in.flags: a poller is waiting
	// and wants a FUSE_NOTIFY_POLL for fuse_poll_in.kh.
	FUSE_POLL_SCHEDULE_NOTIFY = 1 << 0

	// FUSE_NOTIFY_POLL is the notify code carried in fuse_out_header.error
	// of an unsolicited message (unique 0).
	FUSE_NOTIFY_POLL = 1

	// CUSE_UNRESTRICTED_IOCTL in cuse_init_in/out.flags.
	CUSE_UNRESTRICTED_IOCTL = 1 << 0

	// CUSE_INIT_INFO_MAX bounds the DEVNAME=... info blob of CUSE_INIT.
	CUSE_INIT_INFO_MAX = 4096

	// FUSE_MIN_READ_BUFFER: fuse_dev_do_read fails with EINVAL on a read
	// buffer smaller than max(this, in_header+write_in+max_write).
	FUSE_MIN_READ_BUFFER = 8192

	// MaxErrno bounds fuse_out_header.error: the kernel accepts only
	// -512 < error <= 0 (so ERESTARTSYS cannot be returned).
	MaxErrno = 511
)

// Sizes of the C structs (x86-64 and every other 64-bit Linux ABI;
// checked with gcc against include/uapi/linux/fuse.h 7.38).
const (
	SizeofInHeader               = 40
	SizeofOutHeader              = 16
	SizeofOpenIn                 = 8
	SizeofOpenOut                = 16
	SizeofReadIn                 = 40
	SizeofWriteIn                = 40
	SizeofWriteOut               = 8
	SizeofReleaseIn              = 24
	SizeofInterruptIn            = 8
	SizeofIoctlIn                = 32
	SizeofIoctlOut               = 16
	SizeofPollIn                 = 24
	SizeofPollOut                = 8
	SizeofNotifyPollWakeupOut    = 8
	SizeofCuseInitIn             = 16
	SizeofCuseInitOut            = 72
	SizeofMaxRequestHeader       = SizeofInHeader + SizeofWriteIn
	SizeofNotifyPollWakeupHeader = SizeofOutHeader + SizeofNotifyPollWakeupOut
)
