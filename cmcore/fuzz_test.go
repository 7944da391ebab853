package cmcore

import (
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

// FuzzReceive feeds arbitrary CM MADs to a CM that has ids in many states:
// nothing from the wire may panic, hang, or leave the CM inconsistent
// (every id still destroyable, timers drained, no id or event left).
func FuzzReceive(f *testing.F) {
	h0 := &harness{}
	seeds := []wire.Message{
		peerREQ(0x1234), h0.peerREP(&ID{localID: 0x1001}),
		&wire.RTU{LocalCommID: peerComm, RemoteCommID: 0x1001},
		&wire.DREQ{LocalCommID: peerComm, RemoteCommID: 0x1002, RemoteQPN: localQPN},
		&wire.DREP{LocalCommID: peerComm, RemoteCommID: 0x1002},
		&wire.REJ{RemoteCommID: 0x1001, Reason: 4, ARI: []byte{0, 2, 0xc9, 3, 0, 0, 0, 2}},
		&wire.MRA{LocalCommID: peerComm, RemoteCommID: 0x1001, ServiceTimeout: 31},
		h0.peerLAP(&ID{localID: 0x1002}),
		&wire.APR{LocalCommID: peerComm, RemoteCommID: 0x1002},
		&wire.SIDRREQ{RequestID: 1, ServiceID: 0x4444},
		&wire.SIDRREP{RequestID: 0x1003},
	}
	for _, m := range seeds {
		var mad hw.MAD
		if err := wire.Encode(&mad, 1, m); err != nil {
			f.Fatal(err)
		}
		f.Add(mad[:])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t)
		var ids []*ID
		// States that can coexist (each peer connection only once).
		for _, st := range []string{"REQ_SENT", "ESTABLISHED/LAP_SENT", "SIDR_REQ_SENT", "LISTEN"} {
			ids = append(ids, h.reach(st))
		}
		l := h.newID()
		must(t, l.Listen(0x1234, 0))
		ids = append(ids, l)
		var r hw.Received
		copy(r.MAD[:], data)
		r.Src = peerAddr
		for range 2 { // and once more as a duplicate
			h.injectMAD(&r)
		}
		h.clk.Advance(time.Hour)
		for _, ev := range h.events {
			ids = append(ids, ev.ID)
		}
		for _, id := range ids {
			id.Destroy()
		}
		h.clk.Advance(time.Hour)
		if n := h.clk.Pending(); n != 0 {
			t.Fatalf("%d timers left", n)
		}
		// A peer's MADs leave nothing behind once every id is destroyed
		// (growth a peer could drive), and what the CM answered decodes.
		if ids, evs := h.cm.Count(); ids != 0 || evs != 0 {
			t.Fatalf("%d ids, %d events left after destroying every id", ids, evs)
		}
		h.sent() // fails on an undecodable MAD
	})
}
