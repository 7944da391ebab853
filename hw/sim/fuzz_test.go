package sim

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/ucmd/ucmd/hw"
)

// FuzzSend: any address and MAD either fail Send cleanly or are accounted
// for exactly once: unroutable at the source or arrived at a destination.
func FuzzSend(f *testing.F) {
	f.Add(false, []byte{0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, []byte{1, 7, 2, 3})
	f.Add(true, []byte{0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 64, 0}, []byte{1, 7, 2, 3})
	f.Fuzz(func(t *testing.T, roce bool, addr []byte, mad []byte) {
		fab := New(Config{Seed: 1, QueueLen: 1})
		add := fab.AddIB
		if roce {
			add = fab.AddRoCE
		}
		a := mustDev(t)(add("a", 1)).Port(1)
		b := mustDev(t)(add("b", 1)).Port(1)
		ea := open(t, a, cmReg)
		open(t, b, cmReg)

		var raw [12]byte
		copy(raw[:], addr)
		dst := hw.Address{
			LID:       binary.BigEndian.Uint16(raw[0:]),
			SL:        raw[2],
			PathBits:  raw[3],
			QPN:       uint32(raw[4])<<8 | uint32(raw[5]),
			PKeyIndex: uint16(raw[6]),
		}
		if raw[7]&1 != 0 || roce {
			g := hw.GRH{SGIDIndex: raw[8], HopLimit: raw[10], TrafficClass: raw[11], FlowLabel: uint32(raw[9]) << 12}
			if raw[7]&2 == 0 { // aim at b's GID most of the time
				bb, _ := b.Attr()
				g.GID = bb.GIDs[0].GID
			}
			dst.GRH = &g
		}
		var m hw.MAD
		copy(m[:], mad)
		if err := ea.Send(context.Background(), dst, &m); err != nil {
			return
		}
		ca, cb := a.Counters(), b.Counters()
		arrived := ca.Received + ca.NoAgent + ca.Overflow + cb.Received + cb.NoAgent + cb.Overflow
		if ca.Sent != 1 || ca.Unroutable+arrived != 1 {
			t.Fatalf("one MAD sent, counters a %+v b %+v", ca, cb)
		}
	})
}
