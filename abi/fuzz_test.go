package abi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// reservedOf maps each struct type to its reserved byte ranges.
func reservedOf() map[reflect.Type][][2]int {
	m := make(map[reflect.Type][][2]int)
	for _, tc := range goldenCases {
		m[reflect.TypeOf(tc.val)] = tc.reserved
	}
	return m
}

// FuzzDecodeCommand: any write gives a command or EINVAL, never a panic; a
// command is accepted exactly when the kernel's write() checks pass; and the
// decoded struct re-encodes to the bytes it came from, reserved bytes aside.
func FuzzDecodeCommand(f *testing.F) {
	for cmd := Cmd(0); cmd <= NumCmds; cmd++ {
		in := cmd.InLen()
		body := make([]byte, in)
		for i := range body {
			body[i] = byte(i + 1)
		}
		f.Add(writeOf(cmd, uint16(in), uint16(cmd.OutLen()), body))
		f.Add(writeOf(cmd, uint16(in/2), 0, body[:in/2]))
	}
	f.Add(writeOf(CmdNotify, EstablishSize, 0, []byte{42, 0, 0, 0}))
	f.Add(writeOf(CmdCreateID, 0xffff, 0, nil))
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3})

	reserved := reservedOf()
	f.Fuzz(func(t *testing.T, b []byte) {
		h, c, err := ParseCommand(b)

		// The kernel's verdict, computed independently.
		valid := len(b) >= 8
		if valid {
			cmd := binary.NativeEndian.Uint32(b[0:])
			in := int(binary.NativeEndian.Uint16(b[4:]))
			valid = cmd < NumCmds && in+8 <= len(b)
		}

		if err != nil {
			var errno unix.Errno
			if !errors.As(err, &errno) || errno != unix.EINVAL {
				t.Fatalf("error %v does not wrap EINVAL", err)
			}
			if c != nil {
				t.Fatalf("command %#v with error %v", c, err)
			}
			if valid {
				t.Fatalf("rejected a write the kernel accepted: %v", err)
			}
			return
		}
		if !valid {
			t.Fatalf("accepted a write the kernel rejected: %v", h)
		}
		if c == nil {
			t.Fatalf("%v: nil command without error", h)
		}
		if h2, _ := ParseHeader(b); h2 != h {
			t.Fatalf("ParseHeader = %v, ParseCommand header %v", h2, h)
		}

		if h.Cmd == CmdNotify && h.In == EstablishSize {
			n := c.(*Notify)
			if n.Event != IBEventCommEst || n.ID != binary.NativeEndian.Uint32(b[8:]) {
				t.Fatalf("ESTABLISH decoded as %+v", n)
			}
			return
		}

		// Fidelity: the struct is the bytes after the header, zero-padded.
		size := c.Size()
		if size != h.Cmd.InLen() {
			t.Fatalf("%v decoded into a %d-byte %T", h.Cmd, size, c)
		}
		src := make([]byte, size)
		copy(src, b[HeaderSize:])
		enc := make([]byte, size)
		c.Encode(enc)
		for _, r := range reserved[reflect.TypeOf(c)] {
			clear(src[r[0]:r[1]])
		}
		if !bytes.Equal(enc, src) {
			t.Fatalf("%v: re-encoded\n%x\nfrom\n%x", h.Cmd, enc, src)
		}

		// Round trip through a canonical write.
		w := writeOf(h.Cmd, uint16(size), h.Out, enc)
		h3, c3, err := ParseCommand(w)
		if err != nil || !reflect.DeepEqual(c3, c) || h3.Cmd != h.Cmd {
			t.Fatalf("round trip: %v %#v %v, want %#v", h3, c3, err, c)
		}
	})
}
