package sim_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
	"github.com/ucmd/ucmd/hw/sim"
)

// Two InfiniBand hosts, a lossy slow fabric, and a reply to the received
// source address.
func Example() {
	clk := clock.NewFake(time.Unix(0, 0))
	f := sim.New(sim.Config{Seed: 1, Clock: clk, Knobs: sim.Knobs{Delay: time.Millisecond}})
	a, _ := f.AddIB("mlx5_0", 1)
	b, _ := f.AddIB("mlx5_1", 1)
	reg := hw.Registration{MgmtClass: 0x07, ClassVersion: 2, Methods: []uint8{0x03}}
	ea, _ := a.Port(1).OpenMAD(reg)
	eb, _ := b.Port(1).OpenMAD(reg)

	var req hw.MAD
	req[0], req[1], req[2], req[3] = 1, 0x07, 2, 0x03
	binary.BigEndian.PutUint16(req[16:], 0x0010) // REQ
	battr, _ := b.Port(1).Attr()
	ea.Send(context.Background(), hw.Address{LID: battr.LID, QPN: 1}, &req)

	clk.Advance(time.Millisecond) // the MAD arrives
	r, _ := eb.Recv(context.Background())
	fmt.Printf("REQ from LID %d\n", r.Src.LID)

	// "Drop the next REP", then answer twice.
	dropped := false
	f.SetFilter(func(src, dst hw.Port, m *hw.MAD) sim.Verdict {
		if binary.BigEndian.Uint16(m[16:]) == 0x0013 && !dropped {
			dropped = true
			return sim.Drop
		}
		return sim.Pass
	})
	rep := r.MAD
	binary.BigEndian.PutUint16(rep[16:], 0x0013)
	eb.Send(context.Background(), r.Src, &rep)
	eb.Send(context.Background(), r.Src, &rep)
	clk.Advance(time.Millisecond)
	back, _ := ea.Recv(context.Background())
	fmt.Printf("REP from LID %d\n", back.Src.LID)
	fmt.Printf("b: %+v\n", b.Port(1).Counters())
	// Output:
	// REQ from LID 1
	// REP from LID 2
	// b: {Sent:2 Received:1 Duplicated:0 Reordered:0 Lost:0 Partitioned:0 Filtered:1 Unroutable:0 NoAgent:0 Overflow:0}
}
