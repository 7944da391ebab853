package main

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/cusetest"
)

// A CREATE_ID-shaped write gets its id in the caller's memory and is
// answered in full, as cusefloor --pvw answers it; a short one, or one
// whose response cannot be written, fails.
func TestFloorWrite(t *testing.T) {
	mem := callermem.NewFake()
	k := cusetest.Start(t, floor{mem: mem}, &cusetest.Options{Memory: mem})
	client := cuse.Caller{Pid: 100, Uid: 1000, Gid: 1000}
	f, errno := k.Open(client, unix.O_RDWR)
	if errno != 0 {
		t.Fatal(errno)
	}
	resp := mem.Alloc(client.Pid, 4)
	cmd := make([]byte, minWrite)
	binary.NativeEndian.PutUint64(cmd[respOffset:], resp)
	if n, errno := f.Write(client, cmd); errno != 0 || n != len(cmd) {
		t.Fatalf("write = %d, %v; want %d", n, errno, len(cmd))
	}
	if got, _ := mem.Bytes(client.Pid, resp, 4); binary.NativeEndian.Uint32(got) != 1 {
		t.Errorf("response %x, want id 1", got)
	}
	if _, errno := f.Write(client, cmd[:minWrite-1]); errno != unix.EINVAL {
		t.Errorf("short write: %v, want EINVAL", errno)
	}
	mem.Unmap(client.Pid, resp, 4)
	if _, errno := f.Write(client, cmd); errno != unix.EFAULT {
		t.Errorf("write to an unmapped response: %v, want EFAULT", errno)
	}
}
