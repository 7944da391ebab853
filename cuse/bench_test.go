package cuse_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/cusetest"
)

// nopDev accepts every write at once: the benchmarks measure the server.
type nopDev struct{}

func (nopDev) Open(context.Context, cuse.Request, cuse.Waker) (cuse.Handle, error) {
	return nopDev{}, nil
}
func (nopDev) Read(context.Context, cuse.Request, []byte) (int, error) { return 0, nil }
func (nopDev) Write(_ context.Context, _ cuse.Request, data []byte) (int, error) {
	return len(data), nil
}
func (nopDev) Poll(context.Context, cuse.Request, uint32) (uint32, error) { return 0, nil }
func (nopDev) Release(context.Context)                                    {}

// BenchmarkWriteRoundTrip is one client write(2) through the fake kernel:
// encode, socket, server read and dispatch, handler goroutine, writev reply,
// fake-kernel decode and checks. 24 bytes, the size of a small ucm command.
func BenchmarkWriteRoundTrip(b *testing.B) {
	k := cusetest.Start(b, nopDev{}, nil)
	f, errno := k.Open(alice, unix.O_RDWR)
	if errno != 0 {
		b.Fatal(errno)
	}
	cmd := make([]byte, 24)
	b.ReportAllocs()
	for b.Loop() {
		if n, errno := f.Write(alice, cmd); n != len(cmd) || errno != 0 {
			b.Fatalf("write = %d, %v", n, errno)
		}
	}
}

// BenchmarkServerWrite isolates the server's side: a prebuilt WRITE goes
// down a raw socketpair and the reply is read back into a fixed buffer.
func BenchmarkServerWrite(b *testing.B) {
	write := rawWriter(b)
	b.ReportAllocs()
	for b.Loop() {
		write()
	}
}

// TestServerWriteAllocs is the request path's promise: a WRITE costs the
// server no allocation (each reader reuses its request, and its buffer).
func TestServerWriteAllocs(t *testing.T) {
	write := rawWriter(t)
	write() // the first request may start a reader
	if n := testing.AllocsPerRun(200, write); n != 0 {
		t.Errorf("%v allocations per WRITE, want 0", n)
	}
}

// rawWriter starts a Server of nopDev on a raw socketpair, opens a file,
// and returns a function that sends it one 24-byte WRITE and reads the
// reply, failing tb on any other answer.
func rawWriter(tb testing.TB) func() {
	tb.Helper()
	kernel, fh := rawServer(tb, nil)
	req := writeReq(fh, 6)
	buf := make([]byte, 8192)
	unique := uint64(6)
	return func() {
		// The kernel never reuses an id; the server may still be retiring
		// the previous one when the next request arrives.
		unique += 2
		binary.NativeEndian.PutUint64(req[8:], unique)
		if _, err := kernel.Write(req); err != nil {
			tb.Fatal(err)
		}
		n, err := kernel.Read(buf)
		if err != nil || n != 24 || binary.NativeEndian.Uint32(buf[16:]) != 24 {
			tb.Fatalf("reply %x, %v", buf[:n], err)
		}
	}
}

// rawServer starts a Server of nopDev on a raw socketpair, whose server
// end tune (if not nil) may adjust first, answers its CUSE_INIT, opens a
// file, and returns the kernel's end and the file handle.
func rawServer(tb testing.TB, tune func(server *os.File)) (*os.File, uint64) {
	tb.Helper()
	kernel, server := seqpacketTB(tb)
	tb.Cleanup(func() { kernel.Close() })
	if tune != nil {
		tune(server)
	}
	initReq := append(inHeader(56, cusetest.OpCuseInit, 2), make([]byte, 16)...)
	binary.NativeEndian.PutUint32(initReq[40:], 7)
	binary.NativeEndian.PutUint32(initReq[44:], 38)
	kernel.Write(initReq)
	srv, err := cuse.NewServer(context.Background(), server, cuse.Config{DevName: "bench"}, nopDev{})
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	tb.Cleanup(func() { srv.Close(); <-done })
	buf := make([]byte, 8192)
	kernel.Read(buf) // CUSE_INIT reply

	openReq := append(inHeader(48, cusetest.OpOpen, 4), make([]byte, 8)...)
	kernel.Write(openReq)
	kernel.Read(buf)
	return kernel, binary.NativeEndian.Uint64(buf[16:])
}

// writeReq is a WRITE of 24 bytes to fh with id unique.
func writeReq(fh, unique uint64) []byte {
	req := append(inHeader(40+40+24, cusetest.OpWrite, unique), make([]byte, 40+24)...)
	binary.NativeEndian.PutUint64(req[40:], fh)
	binary.NativeEndian.PutUint32(req[56:], 24)
	return req
}

// BenchmarkWriteRoundTripParallel has many client threads writing at once
// through the fake kernel: requests overlap in the server.
func BenchmarkWriteRoundTripParallel(b *testing.B) {
	k := cusetest.Start(b, nopDev{}, nil)
	f, errno := k.Open(alice, unix.O_RDWR)
	if errno != 0 {
		b.Fatal(errno)
	}
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		cmd := make([]byte, 24)
		for pb.Next() {
			if r, ok := f.WriteAsync(alice, cmd).WaitFor(cusetest.DefaultTimeout); !ok || r.Errno != 0 {
				b.Errorf("write = %+v, %v", r, ok)
				return
			}
		}
	})
}

// waitDev holds every write until release is closed, counting those
// that reached it; with detach, the writes wait without their buffer
// (DetachBuffer).
type waitDev struct {
	release chan struct{}
	in      atomic.Int32
	detach  bool
}

func (d *waitDev) Open(context.Context, cuse.Request, cuse.Waker) (cuse.Handle, error) {
	return d, nil
}
func (d *waitDev) Read(context.Context, cuse.Request, []byte) (int, error) { return 0, nil }
func (d *waitDev) Write(ctx context.Context, _ cuse.Request, data []byte) (int, error) {
	if d.detach {
		cuse.DetachBuffer(ctx)
	}
	d.in.Add(1)
	select {
	case <-d.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return len(data), nil
}
func (d *waitDev) Poll(context.Context, cuse.Request, uint32) (uint32, error) { return 0, nil }
func (d *waitDev) Release(context.Context)                                    {}

// BenchmarkLiveHeapPerWaitingRequest is the Go heap a request costs while
// its handler waits (a GET_EVENT blocked for an event, a command waiting
// for its turn to copy). Unless the handler detaches it (DetachBuffer),
// the reader that read the request keeps its buffer, of MaxWrite and a
// header, until it answers. The fake kernel's record of each request is
// counted too, the same in every case. Run with -benchtime 1x; the
// figure is B/request of live heap after GC.
func BenchmarkLiveHeapPerWaitingRequest(b *testing.B) {
	for _, c := range []struct {
		maxWrite uint32
		detach   bool
	}{{cuse.DefaultMaxIO, false}, {cuse.DefaultMaxIO, true}} {
		b.Run(fmt.Sprintf("MaxWrite=%d/detach=%v", c.maxWrite, c.detach), func(b *testing.B) {
			for b.Loop() {
				d := &waitDev{release: make(chan struct{}), detach: c.detach}
				k := cusetest.Start(b, d, &cusetest.Options{Config: cuse.Config{MaxWrite: c.maxWrite}})
				f, errno := k.Open(alice, unix.O_RDWR)
				if errno != 0 {
					b.Fatal(errno)
				}
				const n = 500
				cmd := make([]byte, 24)
				before := liveHeap()
				pending := make([]*cusetest.Pending, 0, n)
				for range n {
					pending = append(pending, f.WriteAsync(alice, cmd))
				}
				for d.in.Load() < n {
					time.Sleep(time.Millisecond)
				}
				b.ReportMetric((liveHeap()-before)/n, "B/request")
				close(d.release)
				for _, p := range pending {
					p.Wait()
				}
				k.Close()
			}
		})
	}
}

// liveHeap is the heap's object bytes after a full collection.
func liveHeap() float64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64())
}
