package cuse

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCheckConnected(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "channel")
	defer f.Close()
	ch, err := newChannel(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.checkConnected(); err != nil {
		t.Fatalf("live channel: %v", err)
	}
	// A pending request must not count as an error, nor be consumed.
	unix.Write(fds[1], []byte("request"))
	if err := ch.checkConnected(); err != nil {
		t.Fatalf("channel with a pending request: %v", err)
	}
	buf := make([]byte, 16)
	if n, err := ch.read(buf); err != nil || string(buf[:n]) != "request" {
		t.Fatalf("read after check = %q, %v", buf[:n], err)
	}
	// The peer going away stands in for the kernel aborting (POLLERR).
	unix.Close(fds[1])
	if err := ch.checkConnected(); !errors.Is(err, errAborted) {
		t.Fatalf("dead channel: %v, want errAborted", err)
	}
}
