package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// writeCases are ib_ucm_write's own checks (§2.3).
func writeCases() []Case {
	return []Case{
		{Name: "write/short-header", Spec: "ucm-abi.md §2.3: len < 8 → EINVAL", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			_, err = c.Raw(make([]byte, 7))
			return expect(err, unix.EINVAL)
		}},
		{Name: "write/bad-command", Spec: "ucm-abi.md §2.3: hdr.cmd >= 18 → EINVAL", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			b := Encode(abi.CmdCreateID, 4, &abi.CreateID{Response: c.Mem.Alloc(4)})
			binary.NativeEndian.PutUint32(b, abi.NumCmds)
			_, err = c.Raw(b)
			return expect(err, unix.EINVAL)
		}},
		{Name: "write/in-beyond-len", Spec: "ucm-abi.md §2.3: hdr.in + 8 > len → EINVAL", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			b := Encode(abi.CmdCreateID, 4, &abi.CreateID{Response: c.Mem.Alloc(4)})
			_, err = c.Raw(b[:len(b)-1])
			return expect(err, unix.EINVAL)
		}},
		{Name: "write/returns-full-length", Spec: "ucm-abi.md §2.3: success returns len, trailing bytes beyond 8+in ignored", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			b := Encode(abi.CmdCreateID, 4, &abi.CreateID{Response: c.Mem.Alloc(4)})
			b = append(b, make([]byte, 40)...)
			n, err := c.Raw(b)
			if err != nil {
				return fmt.Errorf("write: %w", err)
			}
			if n != len(b) {
				return fmt.Errorf("write returned %d, want %d", n, len(b))
			}
			return nil
		}},
		{Name: "write/largest-in", Spec: "ucm-abi.md §2.3: hdr.in is 16 bits; in = 65535 with len = 8 + 65535 succeeds and returns len (one write, however CUSE splits large ones)", run: func(e *env) error {
			return createIDWithIn(e, 0xffff)
		}},
		{Name: "write/past-max-write-ignored", Spec: "ucm-abi.md §2.3: ib_ucm_write runs the one command at the start of the buffer and returns len; bytes past 8 + 65535, which CUSE sends in a request of their own, are ignored, not run as a command", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			// A CREATE_ID of the largest in, then a second CREATE_ID that
			// only a device running the tail as a command would see.
			resp, tail := c.Mem.Alloc(4), c.Mem.Alloc(4)
			c.Mem.Write(tail, []byte{0xff, 0xff, 0xff, 0xff})
			b := Encode(abi.CmdCreateID, 4, &abi.CreateID{UID: 6, Response: resp})
			b = append(b, make([]byte, abi.HeaderSize+0xffff-len(b))...)
			binary.NativeEndian.PutUint16(b[4:], 0xffff) // hdr.in
			b = append(b, Encode(abi.CmdCreateID, 4, &abi.CreateID{UID: 7, Response: tail})...)
			n, err := c.Raw(b)
			if err != nil {
				return fmt.Errorf("write of %d bytes: %w", len(b), err)
			}
			if n != len(b) {
				return fmt.Errorf("write returned %d, want %d", n, len(b))
			}
			if got := c.Mem.Read(tail, 4); !bytes.Equal(got, []byte{0xff, 0xff, 0xff, 0xff}) {
				return fmt.Errorf("the bytes past 8 + 65535 ran as a CREATE_ID (its response %x was written)", got)
			}
			var r abi.CreateIDResp
			r.Decode(c.Mem.Read(resp, 4))
			_, err = c.AttrID(r.ID)
			return check("ATTR_ID of the id the write made", err)
		}},
		{Name: "write/short-in-accepted", Spec: "ucm-abi.md §2.3: handlers read sizeof(cmd) whatever hdr.in says; in=0 with the struct present succeeds", run: func(e *env) error {
			return createIDWithIn(e, 0)
		}},
		{Name: "write/eacces-other-credentials", Spec: "ucm-abi.md §2.3: a writer whose credentials differ from the opener's → EACCES (ib_safe_file_access)", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			cw, ok := c.F.(CredWriter)
			if !ok {
				return fmt.Errorf("the DUT cannot write with other credentials: %w", ErrSkip)
			}
			_, err = cw.WriteAs(65534, 65534, Encode(abi.CmdCreateID, 4, &abi.CreateID{Response: c.Mem.Alloc(4)}))
			if errors.Is(err, ErrSkip) {
				return err
			}
			if err := expect(err, unix.EACCES); err != nil {
				return err
			}
			_, err = c.CreateID(0)
			return check("CREATE_ID as the opener", err)
		}},
		{Name: "read/einval", Spec: "ucm-abi.md §2.1: the device has no read → EINVAL", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			_, err = c.F.Read(64)
			return expect(err, unix.EINVAL)
		}},
	}
}

// createIDWithIn writes a CREATE_ID whose hdr.in says in, the write as long
// as in asks for (at least the struct), and checks it returns the whole
// length and makes a usable id.
func createIDWithIn(e *env, in uint16) error {
	c, err := e.Client()
	if err != nil {
		return err
	}
	resp := c.Mem.Alloc(4)
	b := Encode(abi.CmdCreateID, 4, &abi.CreateID{UID: 5, Response: resp})
	if n := abi.HeaderSize + int(in); n > len(b) {
		b = append(b, make([]byte, n-len(b))...)
	}
	binary.NativeEndian.PutUint16(b[4:], in) // hdr.in
	n, err := c.Raw(b)
	if err != nil {
		return fmt.Errorf("write of %d bytes with hdr.in %d: %w", len(b), in, err)
	}
	if n != len(b) {
		return fmt.Errorf("write returned %d, want %d", n, len(b))
	}
	var r abi.CreateIDResp
	r.Decode(c.Mem.Read(resp, 4))
	_, err = c.AttrID(r.ID)
	return check("ATTR_ID of the new id", err)
}
