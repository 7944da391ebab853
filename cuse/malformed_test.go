package cuse_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/cusetest"
)

// inHeader builds a fuse_in_header by hand, independent of package wire.
func inHeader(length, opcode uint32, unique uint64) []byte {
	b := make([]byte, 40)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], length)
	ne.PutUint32(b[4:], opcode)
	ne.PutUint64(b[8:], unique)
	ne.PutUint32(b[32:], 1234) // pid
	return b
}

func TestMalformedRequestsAreDropped(t *testing.T) {
	k := start(t, newTestDev())
	f := mustOpen(t, k, alice, unix.O_RDWR)

	// Framing we cannot trust is dropped without an answer.
	k.SendRaw([]byte{1, 2, 3})                                               // shorter than a header
	k.SendRaw(inHeader(40, cusetest.OpWrite, 100)[:39])                      // truncated header
	k.SendRaw(inHeader(4096, cusetest.OpWrite, 102))                         // length beyond the message
	k.SendRaw(append(inHeader(40, cusetest.OpWrite, 104), 0, 0, 0))          // length short of it
	k.SendRaw(inHeader(40, cusetest.OpWrite, 0))                             // unique 0 is for notifications
	k.SendRaw(inHeader(40+4, cusetest.OpInterrupt, 107)[:40])                // length mismatch
	k.SendRaw(append(inHeader(40+4, cusetest.OpInterrupt, 109), 0, 0, 0, 0)) // short fuse_interrupt_in
	k.Sync()
	if v := k.Violations(); len(v) != 0 {
		t.Fatalf("server answered dropped requests: %v", v)
	}

	// Framing fine, body inconsistent: the unique is trustworthy, so the
	// client gets EIO instead of hanging.
	short := k.Send(cusetest.Header{Opcode: cusetest.OpWrite, Caller: alice}, make([]byte, 12))
	if r := short.Wait(); r.Errno != unix.EIO {
		t.Fatalf("truncated fuse_write_in = %v, want EIO", r.Errno)
	}
	writeIn := make([]byte, 40)
	binary.NativeEndian.PutUint64(writeIn[0:], f.Fh)
	binary.NativeEndian.PutUint32(writeIn[16:], 100) // claims 100 bytes, sends 3
	if r := k.Send(cusetest.Header{Opcode: cusetest.OpWrite, Caller: alice}, writeIn, []byte("abc")).Wait(); r.Errno != unix.EIO {
		t.Fatalf("write_in.size mismatch = %v, want EIO", r.Errno)
	}
	for _, op := range []uint32{cusetest.OpOpen, cusetest.OpRead, cusetest.OpPoll, cusetest.OpRelease} {
		if r := k.Send(cusetest.Header{Opcode: op, Caller: alice}, []byte{1}).Wait(); r.Errno != unix.EIO {
			t.Fatalf("truncated opcode %d body = %v, want EIO", op, r.Errno)
		}
	}
	readIn := make([]byte, 40)
	binary.NativeEndian.PutUint64(readIn[0:], f.Fh)
	binary.NativeEndian.PutUint32(readIn[16:], 1<<30) // beyond max_read
	if r := k.Send(cusetest.Header{Opcode: cusetest.OpRead, Caller: alice}, readIn).Wait(); r.Errno != unix.EIO {
		t.Fatalf("oversized read = %v, want EIO", r.Errno)
	}

	// And the server keeps serving.
	if n, errno := f.Write(alice, []byte("still here")); errno != 0 || n != 10 {
		t.Fatalf("write after malformed input = %d, %v", n, errno)
	}
}

func TestDuplicateUniqueIsDropped(t *testing.T) {
	d := newTestDev()
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)
	p := f.WriteAsync(alice, []byte("block"))
	d.awaitBlocked(t, p.Unique)

	dup := inHeader(40+40+1, cusetest.OpWrite, p.Unique)
	body := make([]byte, 41)
	binary.NativeEndian.PutUint64(body[0:], f.Fh)
	binary.NativeEndian.PutUint32(body[16:], 1)
	k.SendRaw(append(dup, body...))
	k.Sync()

	f.Write(alice, []byte("unblock"))
	if r := p.Wait(); r.Errno != 0 || r.Size() != 5 {
		t.Fatalf("original = %d, %v", r.Size(), r.Errno)
	}
	k.Sync()
	// A second answer to p.Unique would show up as a violation at cleanup.
}

// errDev answers every write with the error named by the data.
type errDev struct{ testHandle }

var errFromName = map[string]error{
	"eperm":   unix.EPERM,
	"wrapped": fmt.Errorf("context: %w", unix.ENOENT),
	"plain":   errors.New("not an errno"),
	"huge":    unix.Errno(600), // the kernel rejects errors <= -512
	"zero":    unix.Errno(0),
	"ctx":     context.Canceled, // not cancelled by us: a device bug
}

func (d *errDev) Open(context.Context, cuse.Request, cuse.Waker) (cuse.Handle, error) { return d, nil }

func (d *errDev) Write(ctx context.Context, req cuse.Request, data []byte) (int, error) {
	switch s := string(data); s {
	case "panic":
		panic("device bug")
	case "toomany":
		return len(data) + 1, nil
	case "negative":
		return -1, nil
	default:
		return 0, errFromName[s]
	}
}

func (d *errDev) Poll(context.Context, cuse.Request, uint32) (uint32, error) {
	return 0, unix.ENOSYS
}

func (d *errDev) Release(context.Context) {}

func TestErrorMapping(t *testing.T) {
	k := start(t, &errDev{})
	f := mustOpen(t, k, alice, unix.O_RDWR)
	for _, tc := range []struct {
		data string
		want unix.Errno
	}{
		{"eperm", unix.EPERM},
		{"wrapped", unix.ENOENT},
		{"plain", unix.EIO},
		{"huge", unix.EIO},
		{"zero", unix.EIO},
		{"ctx", unix.EIO},
		{"panic", unix.EIO},
		{"toomany", unix.EIO},
		{"negative", unix.EIO},
	} {
		if _, errno := f.Write(alice, []byte(tc.data)); errno != tc.want {
			t.Errorf("%s: errno %v, want %v", tc.data, errno, tc.want)
		}
	}
	// ENOSYS from Poll would make the kernel stop polling for good.
	if _, errno := f.Poll(alice, unix.POLLIN); errno != unix.EIO {
		t.Errorf("Poll ENOSYS became %v, want EIO", errno)
	}
}
