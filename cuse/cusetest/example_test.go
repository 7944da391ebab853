package cusetest_test

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/cusetest"
)

// echoPtr answers each write with "ok", written to the caller's memory at
// the address the command carries (a device in the style of ucm).
type echoPtr struct{ mem callermem.Memory }

func (d echoPtr) Open(context.Context, cuse.Request, cuse.Waker) (cuse.Handle, error) { return d, nil }
func (d echoPtr) Read(context.Context, cuse.Request, []byte) (int, error)             { return 0, unix.EINVAL }
func (d echoPtr) Poll(context.Context, cuse.Request, uint32) (uint32, error)          { return 0, nil }
func (d echoPtr) Release(context.Context)                                             {}
func (d echoPtr) Write(_ context.Context, req cuse.Request, data []byte) (int, error) {
	if len(data) != 8 {
		return 0, unix.EINVAL
	}
	addr := uint64(data[0]) | uint64(data[1])<<8 | uint64(data[2])<<16 | uint64(data[3])<<24 |
		uint64(data[4])<<32 | uint64(data[5])<<40 | uint64(data[6])<<48 | uint64(data[7])<<56
	if err := d.mem.Write(req.Caller.Pid, addr, []byte("ok")); err != nil {
		return 0, err // EFAULT for the client
	}
	return len(data), nil
}

func le64(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

// TestDeviceWithCallerMemory shows the shape of a device test: a fake caller memory shared
// by the device and the fake kernel, a client thread with a buffer, and
// kernel-level requests.
func TestDeviceWithCallerMemory(t *testing.T) {
	mem := callermem.NewFake()
	k := cusetest.Start(t, echoPtr{mem: mem}, &cusetest.Options{Memory: mem})

	client := cuse.Caller{Pid: 100, Uid: 1000, Gid: 1000}
	f, errno := k.Open(client, unix.O_RDWR)
	if errno != 0 {
		t.Fatal(errno)
	}
	buf := k.Memory().Alloc(client.Pid, 16)
	if n, errno := f.Write(client, le64(buf)); errno != 0 || n != 8 {
		t.Fatalf("write = %d, %v", n, errno)
	}
	if got, _ := mem.Bytes(client.Pid, buf, 2); string(got) != "ok" {
		t.Fatalf("client buffer = %q", got)
	}

	// An unmapped address faults like copy_to_user.
	mem.Unmap(client.Pid, buf, 16)
	if _, errno := f.Write(client, le64(buf)); errno != unix.EFAULT {
		t.Fatalf("write to an unmapped buffer = %v, want EFAULT", errno)
	}
	if errno := f.Release(); errno != 0 {
		t.Fatal(errno)
	}
}
