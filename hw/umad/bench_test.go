package umad

import (
	"context"
	"encoding/binary"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad/uapi"
)

// BenchmarkEndpointLoop measures the endpoint's own cost per MAD: a Send
// into a send file and a Recv of the same bytes fed back through the
// receive file, with sockets standing in for umad (the kernel's MAD work
// is not included; see BenchmarkUMADRoundTrip in test/e2e for that). The
// one allocation is the received GRH, which hw.Address holds by pointer.
func BenchmarkEndpointLoop(b *testing.B) {
	e, k := newTestEndpoint(b, hw.LinkEthernet, Options{})
	peer := <-k.sends
	dst := hw.Address{QPN: 1, GRH: &hw.GRH{GID: hw.GID{0xfe, 0x80, 15: 2}, HopLimit: 64}}
	mad := testMAD(1)
	buf := make([]byte, uapi.SizeofUserMADHdr+maxMADSize)
	ctx := context.Background()
	b.ReportAllocs()
	var tid uint32
	for b.Loop() {
		// A new TID each time, as consecutive CM MADs mostly have: a
		// repeated one would (rightly) move to another lane.
		tid++
		binary.BigEndian.PutUint32(mad[12:16], tid)
		if err := e.Send(ctx, dst, mad); err != nil {
			b.Fatal(err)
		}
		n, err := unix.Read(peer, buf)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := unix.Write(k.recv, buf[:n]); err != nil {
			b.Fatal(err)
		}
		if _, err := e.Recv(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGCWithEndpoints measures a garbage collection in a process
// holding 100 endpoints (a host of 100 RDMA ports, as with SR-IOV
// functions), each with its default receive queue: what every queue adds
// to each collection's marking.
func BenchmarkGCWithEndpoints(b *testing.B) {
	for range 100 {
		newTestEndpoint(b, hw.LinkEthernet, Options{})
	}
	runtime.GC()
	for b.Loop() {
		runtime.GC()
	}
}
