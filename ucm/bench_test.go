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
// a cmcore id created and destroyed.
func BenchmarkCreateDestroyID(b *testing.B) {
	d := fakedut.New(b, nil)
	c, err := conformance.NewClient(d, false)
	must(b, err)
	ff := fake(c)
	createResp := c.Mem.Alloc(abi.CreateIDRespSize)
	destroyResp := c.Mem.Alloc(abi.DestroyIDRespSize)
	create := conformance.Encode(abi.CmdCreateID, 4, &abi.CreateID{UID: 1, Response: createResp})
	destroy := conformance.Encode(abi.CmdDestroyID, 4, &abi.DestroyID{Response: destroyResp})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ff.Write(create); err != nil {
			b.Fatal(err)
		}
		id := binary.NativeEndian.Uint32(c.Mem.Read(createResp, 4))
		binary.NativeEndian.PutUint32(destroy[abi.HeaderSize+8:], id)
		if _, err := ff.Write(destroy); err != nil {
			b.Fatal(err)
		}
	}
}
