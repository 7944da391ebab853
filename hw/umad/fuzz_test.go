package umad

import (
	"testing"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad/uapi"
)

// FuzzDeliver: whatever read() returns is counted exactly once and never
// panics the reader.
func FuzzDeliver(f *testing.F) {
	good := make([]byte, uapi.SizeofUserMADHdr+hw.MADSize)
	(&uapi.UserMADHdr{QPN: 1, GRHPresent: 1}).Encode(good)
	f.Add(good)
	f.Add(good[:70])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e := &Endpoint{q: make(chan queued, 1)}
		e.deliver(b)
		e.deliver(b) // the second may overflow the queue of one
		s := e.Stats()
		if s.Received+s.Overflow+s.Malformed+s.SendFailures != 2 {
			t.Fatalf("two packets, stats %+v", s)
		}
		if s.Received == 1 {
			q := <-e.q
			r := q.received()
			if r.Src.GRH == nil && len(b) > 32 && b[32] != 0 {
				t.Fatal("grh_present set but no GRH decoded")
			}
		}
	})
}
