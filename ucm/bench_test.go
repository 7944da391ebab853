package ucm_test

import (
	"encoding/binary"
	"testing"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
)

// BenchmarkCreateDestroyID is CREATE_ID then DESTROY_ID through the fake
// kernel: two FUSE round trips over the socketpair, caller-memory copies,
// a cmcore id created and destroyed. It uses cusetest's own synchronous
// Write, so the figures include the CUSE server and the fake kernel.
func BenchmarkCreateDestroyID(b *testing.B) { benchCreateDestroy(b, nil) }

// benchCreateDestroy is BenchmarkCreateDestroyID on a DUT built with opts.
func benchCreateDestroy(b *testing.B, opts *fakedut.Options) {
	d := fakedut.New(b, opts)
	c, err := conformance.NewClient(d, false)
	must(b, err)
	ff := fake(c)
	createResp := c.Mem.Alloc(abi.CreateIDRespSize)
	destroyResp := c.Mem.Alloc(abi.DestroyIDRespSize)
	create := conformance.Encode(abi.CmdCreateID, 4, &abi.CreateID{UID: 1, Response: createResp})
	destroy := conformance.Encode(abi.CmdDestroyID, 4, &abi.DestroyID{Response: destroyResp})
	b.ReportAllocs()
	for b.Loop() {
		if _, errno := ff.F.Write(ff.Caller, create); errno != 0 {
			b.Fatal(errno)
		}
		id := binary.NativeEndian.Uint32(c.Mem.Read(createResp, 4))
		binary.NativeEndian.PutUint32(destroy[abi.HeaderSize+8:], id)
		if _, errno := ff.F.Write(ff.Caller, destroy); errno != 0 {
			b.Fatal(errno)
		}
	}
}
