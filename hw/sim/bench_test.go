package sim

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ucmd/ucmd/hw"
)

// benchRoundTrip measures one MAD a → b and its echo b → a, both received,
// on a perfect fabric (the path cmcore's benchmarks run on). RoCE costs one
// allocation per received MAD: hw.Address holds the GRH by pointer.
func benchRoundTrip(b *testing.B, roce bool) {
	f := New(Config{Seed: 1})
	add := f.AddIB
	if roce {
		add = f.AddRoCE
	}
	pa := mustDev(b)(add("a", 1)).Port(1)
	pb := mustDev(b)(add("b", 1)).Port(1)
	ea, eb := open(b, pa, cmReg), open(b, pb, cmReg)
	ba, _ := pb.Attr()
	dst := hw.Address{LID: ba.LID, QPN: 1}
	if roce {
		dst.GRH = &hw.GRH{GID: ba.GIDs[0].GID, HopLimit: 64}
	}
	ctx := context.Background()
	mad, reply := cmMAD(1, 0x10), new(hw.MAD)
	b.ReportAllocs()
	for b.Loop() {
		if err := ea.Send(ctx, dst, mad); err != nil {
			b.Fatal(err)
		}
		r, err := eb.Recv(ctx)
		if err != nil {
			b.Fatal(err)
		}
		*reply = r.MAD // &r.MAD would make r escape: measure the fabric, not that
		if err := eb.Send(ctx, r.Src, reply); err != nil {
			b.Fatal(err)
		}
		if _, err := ea.Recv(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRoundTripIB(b *testing.B)   { benchRoundTrip(b, false) }
func BenchmarkRoundTripRoCE(b *testing.B) { benchRoundTrip(b, true) }

// BenchmarkRoundTripParallel: round trips on one fabric from every
// goroutine, each on its own pair of ports: the cost of sharing the
// fabric's lock.
func BenchmarkRoundTripParallel(b *testing.B) {
	f := New(Config{Seed: 1})
	var n atomic.Int32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := n.Add(1) // FailNow is not allowed here: report and return
		da, err1 := f.AddIB(fmt.Sprintf("a%d", i), 1)
		dc, err2 := f.AddIB(fmt.Sprintf("c%d", i), 1)
		if err1 != nil || err2 != nil {
			b.Error(err1, err2)
			return
		}
		ea, err1 := da.Port(1).OpenMAD(cmReg)
		ec, err2 := dc.Port(1).OpenMAD(cmReg)
		if err1 != nil || err2 != nil {
			b.Error(err1, err2)
			return
		}
		defer ea.Close()
		defer ec.Close()
		ca, _ := dc.Port(1).Attr()
		dst := hw.Address{LID: ca.LID, QPN: 1}
		ctx := context.Background()
		mad, reply := cmMAD(1, 0x10), new(hw.MAD)
		for pb.Next() {
			if err := ea.Send(ctx, dst, mad); err != nil {
				b.Error(err)
				return
			}
			r, err := ec.Recv(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			*reply = r.MAD
			if err := ec.Send(ctx, r.Src, reply); err != nil {
				b.Error(err)
				return
			}
			if _, err := ea.Recv(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
