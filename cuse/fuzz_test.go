package cuse_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/cusetest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// FuzzRequest feeds arbitrary messages to a serving Server and checks that
// it neither panics nor stops serving: after each message a sentinel
// request must still be answered, and every reply must be one the kernel
// takes.
func FuzzRequest(f *testing.F) {
	write := append(inHeader(40+40+3, cusetest.OpWrite, 10), make([]byte, 43)...)
	binary.NativeEndian.PutUint64(write[40:], 1)
	binary.NativeEndian.PutUint32(write[56:], 3)
	f.Add(write)
	f.Add(append(inHeader(48, cusetest.OpOpen, 12), make([]byte, 8)...))
	f.Add(append(inHeader(48, cusetest.OpInterrupt, 13), make([]byte, 8)...))
	f.Add(append(inHeader(64, cusetest.OpPoll, 14), make([]byte, 24)...))
	f.Add(append(inHeader(64, cusetest.OpRelease, 16), make([]byte, 24)...))
	f.Add(inHeader(40, 9999, 18))
	f.Add([]byte{1, 2, 3})

	kernel, server := seqpacketTB(f)
	defer kernel.Close()
	initReq := append(inHeader(56, cusetest.OpCuseInit, 2), make([]byte, 16)...)
	binary.NativeEndian.PutUint32(initReq[40:], 7)
	binary.NativeEndian.PutUint32(initReq[44:], 38)
	kernel.Write(initReq)
	srv, err := cuse.NewServer(context.Background(), server, cuse.Config{DevName: "fuzz", Logger: discard}, nopDev{})
	if err != nil {
		f.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	defer func() { srv.Close(); <-done }()
	buf := make([]byte, 1<<17)
	kernel.Read(buf) // CUSE_INIT reply

	sentinel := uint64(1 << 62)
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) == 0 || len(msg) > 1<<16 {
			// An empty datagram reads as end-of-file on a socketpair;
			// /dev/cuse never returns an empty read.
			return
		}
		if len(msg) >= 16 && binary.NativeEndian.Uint64(msg[8:])&(1<<62) != 0 {
			// Keep clear of the sentinel ids.
			msg = append([]byte(nil), msg...)
			binary.NativeEndian.PutUint64(msg[8:], binary.NativeEndian.Uint64(msg[8:])&^(1<<62))
		}
		if _, err := kernel.Write(msg); err != nil {
			t.Fatalf("write: %v", err)
		}
		sentinel += 2
		if _, err := kernel.Write(inHeader(40, 9999, sentinel)); err != nil {
			t.Fatal(err)
		}
		kernel.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			n, err := kernel.Read(buf)
			if err != nil {
				t.Fatalf("server stopped answering: %v", err)
			}
			// Every reply is one whole fuse_out_header message the
			// kernel would take: its length field says what was
			// written, its error is 0 or a negated errno, or, for a
			// notification (unique 0), the notify code.
			if n < 16 {
				t.Fatalf("a %d-byte reply", n)
			}
			length := binary.NativeEndian.Uint32(buf)
			errno := int32(binary.NativeEndian.Uint32(buf[4:]))
			unique := binary.NativeEndian.Uint64(buf[8:])
			if int(length) != n || (errno > 0 && unique != 0) || errno < -4095 {
				t.Fatalf("reply of %d bytes: length %d, error %d, unique %#x", n, length, errno, unique)
			}
			if unique == sentinel {
				return
			}
		}
	})
}
