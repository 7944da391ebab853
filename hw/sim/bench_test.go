package sim

import (
	"context"
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

// BenchmarkSendParallel measures contention on the fabric lock: many
// senders, one receiver draining.
func BenchmarkSendParallel(b *testing.B) {
	f := New(Config{Seed: 1})
	pa := mustDev(b)(f.AddIB("a", 1)).Port(1)
	pb := mustDev(b)(f.AddIB("b", 1)).Port(1)
	ea := open(b, pa, cmReg)
	eb := open(b, pb, cmReg)
	ba, _ := pb.Attr()
	dst := hw.Address{LID: ba.LID, QPN: 1}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := eb.Recv(ctx); err != nil {
				return
			}
		}
	}()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mad := cmMAD(1, 0x10)
		for pb.Next() {
			if err := ea.Send(ctx, dst, mad); err != nil {
				b.Error(err)
				return
			}
		}
	})
	cancel()
	<-done
}
