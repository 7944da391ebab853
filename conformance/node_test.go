package conformance

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ucmd/ucmd/cuse/callermem"
	"golang.org/x/sys/unix"
)

// The real-node DUT's memory is what a device reaches with
// process_vm_readv/writev: allocations are readable and writable there,
// followed by a guard page, and Bad faults.
func TestNodeMemoryAsSeenByADevice(t *testing.T) {
	m := &mmapMem{}
	defer m.free()
	pid := os.Getpid()
	dev := callermem.ProcessVM{}

	a := m.Alloc(10)
	m.Write(a, []byte("0123456789"))
	got := make([]byte, 10)
	if err := dev.Read(pid, a, got); err != nil {
		t.Skipf("process_vm_readv on ourselves: %v", err)
	}
	if string(got) != "0123456789" {
		t.Errorf("device read %q", got)
	}
	if err := dev.Write(pid, a+2, []byte("ab")); err != nil {
		t.Fatal(err)
	}
	if b := m.Read(a, 4); !bytes.Equal(b, []byte("01ab")) {
		t.Errorf("after the device's write: %q", b)
	}
	page := os.Getpagesize()
	if err := dev.Read(pid, a, make([]byte, page+1)); !errors.Is(err, unix.EFAULT) {
		t.Errorf("read into the guard page: %v, want EFAULT", err)
	}
	if err := dev.Write(pid, m.Bad(), []byte{1}); !errors.Is(err, unix.EFAULT) {
		t.Errorf("write to Bad: %v, want EFAULT", err)
	}
	if b1, b2 := m.Bad(), m.Bad(); b1 != b2 {
		t.Error("Bad is not stable")
	}
}

func TestOpenPathMissing(t *testing.T) {
	_, err := OpenPath(filepath.Join(t.TempDir(), "ucm0"))
	if !errors.Is(err, unix.ENOENT) {
		t.Errorf("OpenPath of a missing node: %v, want ENOENT", err)
	}
}

// A node file speaks plain read/write/poll on its descriptor; over a
// FIFO (not a ucm device) the plumbing can be checked without root.
func TestNodeFilePlumbing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Skip(err)
	}
	// Not through OpenPath, which refuses what is not a ucm node.
	var dut DUT = &Node{path: p, mem: &mmapMem{}}
	defer dut.Close()
	f, err := dut.Open(true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := f.WaitReadable(0); err != nil || ok {
		t.Fatalf("empty FIFO readable=%v err=%v", ok, err)
	}
	if n, err := f.Write([]byte("x")); err != nil || n != 1 {
		t.Fatalf("write: %d %v", n, err)
	}
	if ok, err := f.WaitReadable(Wait); err != nil || !ok {
		t.Fatalf("FIFO with data readable=%v err=%v", ok, err)
	}
	if n, err := f.Read(8); err != nil || n != 1 {
		t.Errorf("read: %d %v", n, err)
	}
	if _, err := f.Read(8); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("nonblocking read of an empty FIFO: %v, want EAGAIN", err)
	}
	n, err := f.(CredWriter).WriteAs(65534, 65534, []byte("y"))
	switch {
	case unix.Geteuid() != 0:
		if !errors.Is(err, ErrSkip) {
			t.Errorf("WriteAs without root: %v, want ErrSkip", err)
		}
	case err != nil || n != 1:
		t.Errorf("WriteAs: %d %v", n, err)
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, unix.EBADF) {
		t.Errorf("write after close: %v, want EBADF", err)
	}
}
