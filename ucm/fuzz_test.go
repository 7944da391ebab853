package ucm

import (
	"context"
	"errors"
	"testing"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"golang.org/x/sys/unix"
)

type nopWaker struct{}

func (nopWaker) Wake() {}

// FuzzWrite feeds arbitrary writes to one open file: each must either
// succeed with the full length or fail with an errno, never panic or
// block (the file is O_NONBLOCK so GET_EVENT cannot wait).
func FuzzWrite(f *testing.F) {
	cm := newSimCM(f, "fuzz0")
	if err := cm.Start(); err != nil {
		f.Fatal(err)
	}
	const pid = 7
	mem := callermem.NewFake()
	buf := mem.Alloc(pid, 4096) // command pointers in the seeds point here
	d, err := New(Config{CM: cm, Memory: mem})
	if err != nil {
		f.Fatal(err)
	}
	req := cuse.Request{Caller: cuse.Caller{Pid: pid}, Flags: unix.O_RDWR | unix.O_NONBLOCK}
	h, err := d.Open(context.Background(), req, nopWaker{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { h.Release(context.Background()) })

	for c := abi.Cmd(0); c < abi.NumCmds; c++ {
		cmd := abi.NewCommand(c)
		b := make([]byte, abi.HeaderSize+cmd.Size())
		// Every u64 pointer field at an 8-aligned offset gets buf.
		for off := abi.HeaderSize; off+8 <= len(b); off += 8 {
			for i := range 8 {
				b[off+i] = byte(buf >> (8 * i))
			}
		}
		h := abi.Header{Cmd: c, In: uint16(cmd.Size()), Out: uint16(c.OutLen())}
		h.Encode(b)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := h.Write(context.Background(), req, b)
		if err == nil {
			if n != len(b) {
				t.Fatalf("success returned %d of %d", n, len(b))
			}
			return
		}
		var errno unix.Errno
		if !errors.As(err, &errno) {
			t.Fatalf("error without an errno: %v", err)
		}
		// ib_ucm's errnos (docs/ucm-abi.md), and the limits' (EACCES,
		// EMFILE, ENOSPC: the ids of earlier inputs pile up in this one
		// file); EINTR, EBADF and ECONNABORTED need an interrupt, a
		// release or a stop, which no input makes.
		switch errno {
		case unix.EINVAL, unix.EFAULT, unix.ENOMEM, unix.ENOENT, unix.EAGAIN,
			unix.EBUSY, unix.EISCONN, unix.EACCES, unix.EMFILE, unix.ENOSPC:
		default:
			t.Fatalf("errno %v outside the set a write can return: %v", errno, err)
		}
	})
}
