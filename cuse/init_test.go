package cuse_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/cusetest"
)

func TestInitNegotiation(t *testing.T) {
	k := cusetest.Start(t, newTestDev(), &cusetest.Options{
		Config:      cuse.Config{DevName: "infiniband/ucm0", Major: 231, Minor: 224, MaxWrite: 100},
		KernelMinor: 45, // a newer kernel: we answer with what we speak
	})
	if k.DevName != "infiniband/ucm0" {
		t.Errorf("DEVNAME = %q", k.DevName)
	}
	in := k.Init
	if in.Major != 7 || in.Minor != 38 || k.Server().ProtocolMinor() != 38 {
		t.Errorf("version %d.%d, want 7.38", in.Major, in.Minor)
	}
	if in.DevMajor != 231 || in.DevMinor != 224 {
		t.Errorf("device %d:%d, want 231:224", in.DevMajor, in.DevMinor)
	}
	// Below 4096 the kernel would raise it anyway.
	if in.MaxWrite != 4096 || in.MaxRead != cuse.DefaultMaxIO {
		t.Errorf("max_write %d, max_read %d", in.MaxWrite, in.MaxRead)
	}
	if in.Flags != 1 {
		t.Errorf("flags %#x, want CUSE_UNRESTRICTED_IOCTL (1): the kernel offered it", in.Flags)
	}

	old := cusetest.Start(t, newTestDev(), &cusetest.Options{KernelMinor: 11})
	if old.Init.Minor != 11 {
		t.Errorf("against a 7.11 kernel we answered minor %d", old.Init.Minor)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, name := range []string{"", "/abs", "a//b", "a/../b", "trailing/", "sp ace", "nul\x00", strings.Repeat("x", 4096)} {
		// Validation comes before any read of the channel.
		_, err := cuse.NewServer(context.Background(), pipeEnd(t), cuse.Config{DevName: name}, newTestDev())
		if err == nil {
			t.Errorf("DevName %q accepted", name)
		}
	}
	if _, err := cuse.NewServer(context.Background(), pipeEnd(t), cuse.Config{DevName: "x", IdleReaders: -1}, newTestDev()); err == nil {
		t.Error("IdleReaders -1 accepted")
	}
}

// pipeEnd returns the nonblocking read end of a pipe, for NewServer to
// own and close.
func pipeEnd(t *testing.T) *os.File {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	unix.Close(p[1])
	return os.NewFile(uintptr(p[0]), "pipe")
}

func seqpacket(t *testing.T) (kernel, server *os.File) { return seqpacketTB(t) }

func seqpacketTB(t testing.TB) (kernel, server *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "kernel"), os.NewFile(uintptr(fds[1]), "server")
}

func TestInitFailures(t *testing.T) {
	cuseInit := func(major, minor uint32) []byte {
		b := inHeader(40+16, cusetest.OpCuseInit, 2)
		body := make([]byte, 16)
		binary.NativeEndian.PutUint32(body[0:], major)
		binary.NativeEndian.PutUint32(body[4:], minor)
		return append(b, body...)
	}
	for name, first := range map[string][]byte{
		"old kernel":    cuseInit(7, 10),
		"wrong major":   cuseInit(8, 40),
		"not CUSE_INIT": inHeader(40, cusetest.OpWrite, 2),
		"truncated":     inHeader(40, cusetest.OpCuseInit, 2),
	} {
		t.Run(name, func(t *testing.T) {
			kernel, server := seqpacket(t)
			defer kernel.Close()
			if _, err := kernel.Write(first); err != nil {
				t.Fatal(err)
			}
			if _, err := cuse.NewServer(context.Background(), server, cuse.Config{DevName: "x"}, newTestDev()); err == nil {
				t.Fatal("NewServer succeeded")
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		kernel, server := seqpacket(t)
		defer kernel.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		_, err := cuse.NewServer(ctx, server, cuse.Config{DevName: "x"}, newTestDev())
		if err == nil || !strings.Contains(err.Error(), "CUSE_INIT") {
			t.Fatalf("NewServer without CUSE_INIT = %v", err)
		}
	})

	t.Run("blocking fd", func(t *testing.T) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(p[1])
		_, err := cuse.NewServer(context.Background(), os.NewFile(uintptr(p[0]), "pipe"), cuse.Config{DevName: "x"}, newTestDev())
		if err == nil || !strings.Contains(err.Error(), "not pollable") {
			t.Fatalf("NewServer on a blocking fd = %v", err)
		}
	})
}

func TestServeAfterClose(t *testing.T) {
	k := start(t, newTestDev())
	if err := k.Close(); err != cuse.ErrServerClosed {
		t.Fatalf("Serve = %v", err)
	}
	if err := k.Server().Serve(); err != cuse.ErrServerClosed {
		t.Fatalf("Serve after Close = %v", err)
	}
}

// When the kernel side goes away (daemon aborted through sysfs, module
// gone), Serve returns an error and still releases the open files.
func TestServeEndsWhenChannelDies(t *testing.T) {
	kernel, server := seqpacket(t)
	initReq := append(inHeader(56, cusetest.OpCuseInit, 2), make([]byte, 16)...)
	binary.NativeEndian.PutUint32(initReq[40:], 7)
	binary.NativeEndian.PutUint32(initReq[44:], 38)
	kernel.Write(initReq)
	d := newTestDev()
	srv, err := cuse.NewServer(context.Background(), server, cuse.Config{DevName: "x"}, d)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8192)
	kernel.Read(buf) // CUSE_INIT reply
	kernel.Write(append(inHeader(48, cusetest.OpOpen, 4), make([]byte, 8)...))
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	kernel.Read(buf) // OPEN reply
	kernel.Close()

	err = <-served
	if err == nil || errors.Is(err, cuse.ErrServerClosed) {
		t.Fatalf("Serve = %v, want a channel error", err)
	}
	if n := d.releasedCount(); n != 1 {
		t.Fatalf("%d handles released, want 1", n)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close after the channel died: %v", err)
	}
}
