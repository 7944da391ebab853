package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

func skipBigEndian(t *testing.T) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("golden bytes are little-endian")
	}
}

// hdrSize is what go-fuse's request structs add by embedding InHeader.
var hdrSize = binary.Size(fuse.InHeader{})

// TestSizes pins every struct to the C size (cuse.md §1.4, gcc on x86-64).
// go-fuse request structs embed the 40-byte header; the kernel's do not.
func TestSizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  int
		want int
	}{
		{"fuse_in_header", binary.Size(fuse.InHeader{}), 40},
		{"fuse_out_header", binary.Size(fuse.OutHeader{}), 16},
		{"fuse_open_in", binary.Size(fuse.OpenIn{}) - hdrSize, 8},
		{"fuse_open_out", binary.Size(fuse.OpenOut{}), 16},
		{"fuse_read_in", binary.Size(fuse.ReadIn{}) - hdrSize, 40},
		{"fuse_write_in", binary.Size(fuse.WriteIn{}) - hdrSize, 40},
		{"fuse_write_out", binary.Size(fuse.WriteOut{}), 8},
		{"fuse_release_in", binary.Size(fuse.ReleaseIn{}) - hdrSize, 24},
		{"fuse_interrupt_in", binary.Size(fuse.InterruptIn{}) - hdrSize, 8},
		{"fuse_ioctl_in", binary.Size(fuse.IoctlIn{}) - hdrSize, 32},
		{"fuse_ioctl_out", binary.Size(fuse.IoctlOut{}), 16},
		{"fuse_poll_in", binary.Size(PollIn{}), 24},
		{"fuse_poll_out", binary.Size(PollOut{}), 8},
		{"fuse_notify_poll_wakeup_out", binary.Size(NotifyPollWakeupOut{}), 8},
		{"cuse_init_in", binary.Size(CuseInitIn{}), 16},
		{"cuse_init_out", binary.Size(CuseInitOut{}), 72},
	} {
		if tc.got != tc.want {
			t.Errorf("sizeof(%s) = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	// And the Sizeof constants the code uses agree.
	for _, c := range [][2]int{
		{SizeofInHeader, 40}, {SizeofOutHeader, 16}, {SizeofOpenIn, 8}, {SizeofOpenOut, 16},
		{SizeofReadIn, 40}, {SizeofWriteIn, 40}, {SizeofWriteOut, 8}, {SizeofReleaseIn, 24},
		{SizeofInterruptIn, 8}, {SizeofIoctlIn, 32}, {SizeofIoctlOut, 16}, {SizeofPollIn, 24},
		{SizeofPollOut, 8}, {SizeofNotifyPollWakeupOut, 8}, {SizeofCuseInitIn, 16}, {SizeofCuseInitOut, 72},
	} {
		if c[0] != c[1] {
			t.Errorf("Sizeof constant %d, want %d", c[0], c[1])
		}
	}
}

// le builds golden bytes from little-endian fields of the given widths.
func le(fields ...any) []byte {
	var b []byte
	for _, f := range fields {
		switch v := f.(type) {
		case uint16:
			b = binary.LittleEndian.AppendUint16(b, v)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case uint64:
			b = binary.LittleEndian.AppendUint64(b, v)
		default:
			panic("bad field")
		}
	}
	return b
}

var hdr = fuse.InHeader{
	Length: 0x11223344, Opcode: 16, Unique: 0x0102030405060708, NodeId: 0xa1a2a3a4a5a6a7a8,
	Caller:      fuse.Caller{Owner: fuse.Owner{Uid: 1000, Gid: 100}, Pid: 4321},
	TotalExtlen: 0x0b0c, Padding: 0x0d0e,
}

// Offsets that matter (cuse.md §1.4): in_header.pid at 32, write_in and
// read_in flags at 32, cuse_init_out.dev_major at 24; the golden bytes
// below place every field.
func TestGolden(t *testing.T) {
	skipBigEndian(t)
	cases := []struct {
		name   string
		enc    []byte
		golden []byte
		dec    func([]byte) (any, error)
		want   any
	}{
		{
			"fuse_in_header", AppendInHeader(nil, &hdr),
			le(uint32(0x11223344), uint32(16), uint64(0x0102030405060708), uint64(0xa1a2a3a4a5a6a7a8),
				uint32(1000), uint32(100), uint32(4321), uint16(0x0b0c), uint16(0x0d0e)),
			func(b []byte) (any, error) { return DecodeInHeader(b) }, hdr,
		},
		{
			"fuse_out_header", AppendOutHeader(nil, fuse.OutHeader{Length: 24, Status: -4, Unique: 9}),
			le(uint32(24), uint32(0xfffffffc), uint64(9)),
			func(b []byte) (any, error) { return DecodeOutHeader(b) }, fuse.OutHeader{Length: 24, Status: -4, Unique: 9},
		},
		{
			"fuse_open_in", AppendOpenIn(nil, &fuse.OpenIn{Flags: 0x802, Mode: 1}),
			le(uint32(0x802), uint32(1)),
			func(b []byte) (any, error) { return DecodeOpenIn(hdr, b) }, fuse.OpenIn{InHeader: hdr, Flags: 0x802, Mode: 1},
		},
		{
			"fuse_open_out", AppendOpenOut(nil, fuse.OpenOut{Fh: 7, OpenFlags: 5, BackingID: -1}),
			le(uint64(7), uint32(5), uint32(0xffffffff)),
			func(b []byte) (any, error) { return DecodeOpenOut(b) }, fuse.OpenOut{Fh: 7, OpenFlags: 5, BackingID: -1},
		},
		{
			"fuse_read_in", AppendReadIn(nil, &fuse.ReadIn{Fh: 1, Offset: 2, Size: 3, ReadFlags: 4, LockOwner: 5, Flags: 6, Padding: 7}),
			le(uint64(1), uint64(2), uint32(3), uint32(4), uint64(5), uint32(6), uint32(7)),
			func(b []byte) (any, error) { return DecodeReadIn(hdr, b) },
			fuse.ReadIn{InHeader: hdr, Fh: 1, Offset: 2, Size: 3, ReadFlags: 4, LockOwner: 5, Flags: 6, Padding: 7},
		},
		{
			"fuse_write_in", AppendWriteIn(nil, &fuse.WriteIn{Fh: 1, Offset: 2, Size: 3, WriteFlags: 4, LockOwner: 5, Flags: 0x800, Padding: 7}),
			le(uint64(1), uint64(2), uint32(3), uint32(4), uint64(5), uint32(0x800), uint32(7)),
			func(b []byte) (any, error) { return DecodeWriteIn(hdr, b) },
			fuse.WriteIn{InHeader: hdr, Fh: 1, Offset: 2, Size: 3, WriteFlags: 4, LockOwner: 5, Flags: 0x800, Padding: 7},
		},
		{
			"fuse_write_out", AppendWriteOut(nil, fuse.WriteOut{Size: 24, Padding: 1}),
			le(uint32(24), uint32(1)),
			func(b []byte) (any, error) { return DecodeWriteOut(b) }, fuse.WriteOut{Size: 24, Padding: 1},
		},
		{
			"fuse_release_in", AppendReleaseIn(nil, &fuse.ReleaseIn{Fh: 1, Flags: 2, ReleaseFlags: 3, LockOwner: 4}),
			le(uint64(1), uint32(2), uint32(3), uint64(4)),
			func(b []byte) (any, error) { return DecodeReleaseIn(hdr, b) },
			fuse.ReleaseIn{InHeader: hdr, Fh: 1, Flags: 2, ReleaseFlags: 3, LockOwner: 4},
		},
		{
			"fuse_interrupt_in", AppendInterruptIn(nil, &fuse.InterruptIn{Unique: 42}),
			le(uint64(42)),
			func(b []byte) (any, error) { return DecodeInterruptIn(hdr, b) }, fuse.InterruptIn{InHeader: hdr, Unique: 42},
		},
		{
			"fuse_ioctl_in", AppendIoctlIn(nil, &fuse.IoctlIn{Fh: 1, Flags: 2, Cmd: 3, Arg: 4, InSize: 5, OutSize: 6}),
			le(uint64(1), uint32(2), uint32(3), uint64(4), uint32(5), uint32(6)),
			func(b []byte) (any, error) { return DecodeIoctlIn(hdr, b) },
			fuse.IoctlIn{InHeader: hdr, Fh: 1, Flags: 2, Cmd: 3, Arg: 4, InSize: 5, OutSize: 6},
		},
		{
			"fuse_poll_in", (&PollIn{Fh: 1, Kh: 2, Flags: 1, Events: 0x41}).Append(nil),
			le(uint64(1), uint64(2), uint32(1), uint32(0x41)),
			func(b []byte) (any, error) { var v PollIn; err := v.Decode(b); return v, err }, PollIn{Fh: 1, Kh: 2, Flags: 1, Events: 0x41},
		},
		{
			"fuse_poll_out", PollOut{Revents: 5, Padding: 6}.Append(nil),
			le(uint32(5), uint32(6)),
			func(b []byte) (any, error) { var v PollOut; err := v.Decode(b); return v, err }, PollOut{Revents: 5, Padding: 6},
		},
		{
			"fuse_notify_poll_wakeup_out", NotifyPollWakeupOut{Kh: 0xdead}.Append(nil),
			le(uint64(0xdead)),
			func(b []byte) (any, error) { var v NotifyPollWakeupOut; err := v.Decode(b); return v, err }, NotifyPollWakeupOut{Kh: 0xdead},
		},
		{
			"cuse_init_in", (&CuseInitIn{Major: 7, Minor: 38, Unused: 3, Flags: 1}).Append(nil),
			le(uint32(7), uint32(38), uint32(3), uint32(1)),
			func(b []byte) (any, error) { var v CuseInitIn; err := v.Decode(b); return v, err }, CuseInitIn{Major: 7, Minor: 38, Unused: 3, Flags: 1},
		},
		{
			"cuse_init_out",
			(&CuseInitOut{Major: 7, Minor: 31, Unused: 3, Flags: 1, MaxRead: 5, MaxWrite: 6, DevMajor: 231, DevMinor: 224,
				Spare: [10]uint32{9: 0x99}}).Append(nil),
			append(le(uint32(7), uint32(31), uint32(3), uint32(1), uint32(5), uint32(6), uint32(231), uint32(224)),
				le(uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0x99))...),
			func(b []byte) (any, error) { var v CuseInitOut; err := v.Decode(b); return v, err },
			CuseInitOut{Major: 7, Minor: 31, Unused: 3, Flags: 1, MaxRead: 5, MaxWrite: 6, DevMajor: 231, DevMinor: 224, Spare: [10]uint32{9: 0x99}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Equal(tc.enc, tc.golden) {
				t.Fatalf("encoded\n %x\nwant\n %x", tc.enc, tc.golden)
			}
			got, err := tc.dec(tc.golden)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decoded %+v, want %+v", got, tc.want)
			}
			// One byte short is always an error, never a panic.
			if _, err := tc.dec(tc.golden[:len(tc.golden)-1]); !errors.Is(err, ErrTruncated) {
				t.Fatalf("short decode err = %v, want ErrTruncated", err)
			}
		})
	}
}

func TestOffsets(t *testing.T) {
	skipBigEndian(t)
	h := AppendInHeader(nil, &fuse.InHeader{Caller: fuse.Caller{Pid: 0xabcd}})
	if binary.LittleEndian.Uint32(h[32:]) != 0xabcd {
		t.Error("in_header.pid not at offset 32")
	}
	w := AppendWriteIn(nil, &fuse.WriteIn{Flags: 0x800})
	if binary.LittleEndian.Uint32(w[32:]) != 0x800 {
		t.Error("write_in.flags not at offset 32")
	}
	r := AppendReadIn(nil, &fuse.ReadIn{Flags: 0x800})
	if binary.LittleEndian.Uint32(r[32:]) != 0x800 {
		t.Error("read_in.flags not at offset 32")
	}
	c := (&CuseInitOut{DevMajor: 231}).Append(nil)
	if binary.LittleEndian.Uint32(c[24:]) != 231 {
		t.Error("cuse_init_out.dev_major not at offset 24")
	}
}

func TestOpcodeString(t *testing.T) {
	if FUSE_POLL.String() != "POLL" || CUSE_INIT.String() != "CUSE_INIT" || Opcode(9999).String() != "opcode(9999)" {
		t.Error("Opcode.String")
	}
}
