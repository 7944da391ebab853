package abi

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The worked examples of ucm-abi.md §2.2, byte for byte as libibcm builds
// them on x86_64.
func TestWorkedExamples(t *testing.T) {
	requireLittleEndian(t)
	for _, tc := range []struct {
		name    string
		write   string
		wantHdr Header
		want    Command
	}{
		{
			name: "CREATE_ID",
			write: `00 00 00 00  10 00  04 00
				10 32 54 76 98 ba dc fe
				f0 e1 d2 c3 b4 a5 96 00`,
			wantHdr: Header{Cmd: CmdCreateID, In: 16, Out: 4},
			want:    &CreateID{UID: 0xfedcba9876543210, Response: 0x0096a5b4c3d2e1f0},
		},
		{
			name: "GET_EVENT",
			write: `10 00 00 00  20 00  c0 00
				00 10 00 00 00 7f 00 00
				00 20 00 00 00 7f 00 00
				00 30 00 00 00 7f 00 00
				ff ff 00 00 00 00 00 00`,
			wantHdr: Header{Cmd: CmdEvent, In: 32, Out: 192},
			want: &EventGet{
				Response: 0x7f0000001000,
				Data:     0x7f0000002000,
				Info:     0x7f0000003000,
				DataLen:  255,
				InfoLen:  255,
			},
		},
		{
			name: "NOTIFY(COMM_EST)",
			write: `04 00 00 00  08 00  00 00
				2a 00 00 00  04 00 00 00`,
			wantHdr: Header{Cmd: CmdNotify, In: 8, Out: 0},
			want:    &Notify{ID: 42, Event: IBEventCommEst},
		},
		{
			// ABI 4: ESTABLISH {u32 id}, a 12-byte write.
			name:    "ESTABLISH",
			write:   `04 00 00 00  04 00  00 00  2a 00 00 00`,
			wantHdr: Header{Cmd: CmdNotify, In: 4, Out: 0},
			want:    &Notify{ID: 42, Event: IBEventCommEst},
		},
		{
			// ESTABLISH followed by unrelated bytes in the same write: in
			// decides, the trailing bytes are not an event.
			name:    "ESTABLISH with trailing bytes",
			write:   `04 00 00 00  04 00  00 00  2a 00 00 00  06 00 00 00`,
			wantHdr: Header{Cmd: CmdNotify, In: 4, Out: 0},
			want:    &Notify{ID: 42, Event: IBEventCommEst},
		},
		{
			name: "NOTIFY(PATH_MIG)",
			write: `04 00 00 00  08 00  00 00
				07 00 00 00  06 00 00 00`,
			wantHdr: Header{Cmd: CmdNotify, In: 8, Out: 0},
			want:    &Notify{ID: 7, Event: IBEventPathMig},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := unhex(t, tc.write)
			h, c, err := ParseCommand(b)
			if err != nil {
				t.Fatalf("ParseCommand: %v", err)
			}
			if h != tc.wantHdr {
				t.Errorf("header = %v, want %v", h, tc.wantHdr)
			}
			if !reflect.DeepEqual(c, tc.want) {
				t.Errorf("command = %#v, want %#v", c, tc.want)
			}
		})
	}
}

// writeOf builds a write: header, then body.
func writeOf(cmd Cmd, in, out uint16, body []byte) []byte {
	b := make([]byte, HeaderSize, HeaderSize+len(body))
	(&Header{Cmd: cmd, In: in, Out: out}).Encode(b)
	return append(b, body...)
}

// ib_ucm_write's checks, in order, all EINVAL.
func TestParseErrno(t *testing.T) {
	for _, tc := range []struct {
		name   string
		write  []byte
		reason string // part of the message, to tell which check fired
	}{
		{"empty", nil, "shorter than"},
		{"7 bytes", make([]byte, 7), "shorter than"},
		// len < 8 wins even when the partial header names a bad command.
		{"7 bytes, bad cmd", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0}, "shorter than"},
		{"cmd 18", writeOf(18, 0, 0, nil), "out of range"},
		{"cmd 0xffffffff", writeOf(0xffffffff, 0, 0, nil), "out of range"},
		// cmd is checked before in.
		{"cmd 18, in too big", writeOf(18, 100, 0, nil), "out of range"},
		{"in 16, 15 bytes follow", writeOf(CmdCreateID, 16, 4, make([]byte, 15)), "declares 16"},
		{"in 1, nothing follows", writeOf(CmdSendRTU, 1, 0, nil), "declares 1"},
		{"in 0xffff", writeOf(CmdSendREQ, 0xffff, 0, make([]byte, 64)), "declares 65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c, err := ParseCommand(tc.write)
			var errno unix.Errno
			if !errors.As(err, &errno) || errno != unix.EINVAL {
				t.Fatalf("ParseCommand = %v, want an error wrapping EINVAL", err)
			}
			if !errors.Is(err, unix.EINVAL) {
				t.Errorf("errors.Is(%v, EINVAL) = false", err)
			}
			if c != nil {
				t.Errorf("command %#v returned with an error", c)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not say %q", err, tc.reason)
			}
			if _, herr := ParseHeader(tc.write); herr == nil || herr.Error() != err.Error() {
				t.Errorf("ParseHeader = %v, ParseCommand = %v", herr, err)
			}
		})
	}
}

// What the kernel accepted, ParseCommand accepts.
func TestParseAccepts(t *testing.T) {
	requireLittleEndian(t)
	body := make([]byte, 64)
	for i := range body {
		body[i] = byte(i + 1)
	}
	for _, tc := range []struct {
		name  string
		write []byte
		want  Command
	}{
		{
			// The limit case in + 8 == len.
			name:  "exact",
			write: writeOf(CmdCreateID, 16, 4, body[:16]),
			want:  &CreateID{UID: 0x0807060504030201, Response: 0x100f0e0d0c0b0a09},
		},
		{
			// Trailing bytes beyond 8+in are ignored.
			name:  "trailing bytes",
			write: writeOf(CmdCreateID, 16, 4, body[:40]),
			want:  &CreateID{UID: 0x0807060504030201, Response: 0x100f0e0d0c0b0a09},
		},
		{
			// in larger than the struct: the handler read sizeof(cmd).
			name:  "in beyond the struct",
			write: writeOf(CmdDestroyID, 40, 4, body[:40]),
			want:  &DestroyID{Response: 0x0807060504030201, ID: 0x0c0b0a09},
		},
		{
			// in shorter than the struct: the handler still read sizeof(cmd)
			// from the buffer, so bytes past in but inside the write count.
			name:  "short in, bytes in the write",
			write: writeOf(CmdCreateID, 4, 4, body[:16]),
			want:  &CreateID{UID: 0x0807060504030201, Response: 0x100f0e0d0c0b0a09},
		},
		{
			// Past the end of the write the kernel read the caller's other
			// memory, which we never see: zeroes.
			name:  "short in, short write",
			write: writeOf(CmdCreateID, 0, 4, body[:10]),
			want:  &CreateID{UID: 0x0807060504030201, Response: 0x0a09},
		},
		{
			name:  "header only",
			write: writeOf(CmdSendREQ, 0, 0, nil),
			want:  &REQ{},
		},
		{
			// NOTIFY with in < 4 is not ESTABLISH: the general rule applies.
			name:  "NOTIFY in 2",
			write: writeOf(CmdNotify, 2, 0, body[:8]),
			want:  &Notify{ID: 0x04030201, Event: IBEvent(0x08070605)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c, err := ParseCommand(tc.write)
			if err != nil {
				t.Fatalf("ParseCommand: %v", err)
			}
			if !reflect.DeepEqual(c, tc.want) {
				t.Errorf("command = %#v, want %#v", c, tc.want)
			}
		})
	}
}

// Every command number yields its struct, of the size libibcm sends as in.
func TestParseEveryCommand(t *testing.T) {
	wantType := map[Cmd]Command{
		CmdCreateID: &CreateID{}, CmdDestroyID: &DestroyID{}, CmdAttrID: &AttrID{},
		CmdListen: &Listen{}, CmdNotify: &Notify{}, CmdSendREQ: &REQ{}, CmdSendREP: &REP{},
		CmdSendRTU: &PrivateData{}, CmdSendDREQ: &PrivateData{}, CmdSendDREP: &PrivateData{},
		CmdSendREJ: &Info{}, CmdSendMRA: &MRA{}, CmdSendLAP: &LAP{}, CmdSendAPR: &Info{},
		CmdSendSIDRREQ: &SIDRREQ{}, CmdSendSIDRREP: &SIDRREP{}, CmdEvent: &EventGet{},
		CmdInitQPAttr: &InitQPAttr{},
	}
	if len(wantType) != NumCmds {
		t.Fatalf("table has %d commands", len(wantType))
	}
	for cmd := Cmd(0); cmd < NumCmds; cmd++ {
		in := cmd.InLen()
		_, c, err := ParseCommand(writeOf(cmd, uint16(in), uint16(cmd.OutLen()), make([]byte, in)))
		if err != nil {
			t.Errorf("%v: %v", cmd, err)
			continue
		}
		if reflect.TypeOf(c) != reflect.TypeOf(wantType[cmd]) {
			t.Errorf("%v: got %T, want %T", cmd, c, wantType[cmd])
		}
		if c.Size() != in {
			t.Errorf("%v: struct of %d bytes, InLen %d", cmd, c.Size(), in)
		}
	}
	if NewCommand(NumCmds) != nil {
		t.Errorf("NewCommand(%d) is not nil", NumCmds)
	}
}

// The in/out sizes libibcm sends (ucm-abi.md §2.2 table).
func TestCmdTable(t *testing.T) {
	for _, tc := range []struct {
		cmd     Cmd
		name    string
		in, out int
	}{
		{0, "CREATE_ID", 16, 4},
		{1, "DESTROY_ID", 16, 4},
		{2, "ATTR_ID", 16, 24},
		{3, "LISTEN", 24, 0},
		{4, "NOTIFY", 8, 0},
		{5, "SEND_REQ", 64, 0},
		{6, "SEND_REP", 40, 0},
		{7, "SEND_RTU", 16, 0},
		{8, "SEND_DREQ", 16, 0},
		{9, "SEND_DREP", 16, 0},
		{10, "SEND_REJ", 32, 0},
		{11, "SEND_MRA", 16, 0},
		{12, "SEND_LAP", 24, 0},
		{13, "SEND_APR", 32, 0},
		{14, "SEND_SIDR_REQ", 40, 0},
		{15, "SEND_SIDR_REP", 40, 0},
		{16, "EVENT", 32, 192},
		{17, "INIT_QP_ATTR", 16, 144},
		{18, "Cmd(18)", 0, 0},
	} {
		if got := tc.cmd.String(); got != tc.name {
			t.Errorf("Cmd(%d).String() = %q, want %q", uint32(tc.cmd), got, tc.name)
		}
		if got := tc.cmd.InLen(); got != tc.in {
			t.Errorf("%v.InLen() = %d, want %d", tc.cmd, got, tc.in)
		}
		if got := tc.cmd.OutLen(); got != tc.out {
			t.Errorf("%v.OutLen() = %d, want %d", tc.cmd, got, tc.out)
		}
	}
	if ABIVersion != 5 {
		t.Errorf("ABIVersion = %d", ABIVersion)
	}
}

// A Decoder's structs are reused: a command decoded after another of the
// same struct holds only its own bytes (every Decode sets every field),
// the same as a fresh ParseCommand, and costs no allocation.
func TestDecoderReuse(t *testing.T) {
	var d Decoder
	for c := Cmd(0); c < NumCmds; c++ {
		in := c.InLen()
		ones := make([]byte, in)
		for i := range ones {
			ones[i] = 0xff
		}
		if _, got, err := d.Parse(writeOf(c, uint16(in), uint16(c.OutLen()), ones)); err != nil {
			t.Fatalf("%v: %v", c, err)
		} else if reflect.DeepEqual(got, NewCommand(c)) {
			t.Fatalf("%v: all-ones bytes decoded as the zero struct", c)
		}
		zeros := writeOf(c, uint16(in), uint16(c.OutLen()), make([]byte, in))
		_, got, err := d.Parse(zeros)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		_, want, _ := ParseCommand(zeros)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%v after an all-ones one: %+v, want %+v", c, got, want)
		}
		if n := testing.AllocsPerRun(10, func() { d.Parse(zeros) }); n != 0 {
			t.Errorf("%v: Decoder.Parse allocates %v times", c, n)
		}
	}
	// ABI 4's ESTABLISH fills the NOTIFY struct too.
	d.Parse(writeOf(CmdNotify, NotifySize, 0, ne.AppendUint32(ne.AppendUint32(nil, 9), 0xffffffff)))
	_, got, err := d.Parse(writeOf(CmdEstablish, EstablishSize, 0, ne.AppendUint32(nil, 7)))
	if want := (&Notify{ID: 7, Event: IBEventCommEst}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ESTABLISH after a NOTIFY = %+v, %v; want %+v", got, err, want)
	}
}
