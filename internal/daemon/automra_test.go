package daemon_test

import (
	"net"
	"testing"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
)

// Config.AutoMRA (serve --auto-mra) reaches the CM: a REQ whose listener's
// application never accepts it is retransmitted, and the served CM answers
// the retransmission with an MRA of that service timeout by itself, so the
// active side gets MRA_RECEIVED. Without it the REQ runs out of its retries
// (REQ_ERROR), as with the kernel's ib_cm.
func TestAutoMRA(t *testing.T) {
	for _, tc := range []struct {
		auto uint8
		want abi.CMEvent
	}{{24, abi.CMMRAReceived}, {0, abi.CMREQError}} {
		f := daemontest.New(t)
		run := t.TempDir()
		start(t, f, daemon.Config{SimDevices: 1, RuntimeDir: run, AutoMRA: tc.auto})
		gid := net.ParseIP(fetch(t, run).Devices[0].Ports[0].GID0).To16()
		if gid == nil {
			t.Fatal("no GID 0 in status")
		}
		path := conformance.LoopbackPath([16]byte(gid), 0)
		dut, err := f.DUT("infiniband/ucm0", &path)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := conformance.NewClient(dut, false)
		must(t, err)
		cli, err := conformance.NewClient(dut, false)
		must(t, err)
		l, err := srv.CreateID(1)
		must(t, err)
		must(t, srv.Listen(l, 0x5151, 0))
		id, err := cli.CreateID(2)
		must(t, err)
		req := cli.REQ(id, 0x5151, path, 0x100)
		// A REQ every 2·1 + 16 ms, 15 retries: REQ_ERROR after ~290 ms
		// unless the MRA answering the first retransmission (at 18 ms)
		// extends the wait to the MRA's 69 s; the margin keeps a loaded
		// machine from turning one into the other.
		req.RemoteCMResponseTimeout, req.MaxCMRetries = 12, 15
		must(t, cli.SendREQ(req))
		if _, err := srv.Expect(abi.CMREQReceived, waitFor); err != nil {
			t.Fatal(err) // and never accepted
		}
		ev, err := cli.WaitEvent(waitFor)
		must(t, err)
		if ev.Event != tc.want {
			t.Errorf("AutoMRA %d: active side got %v, want %v", tc.auto, ev.Event, tc.want)
		}
		if ev.Event == abi.CMMRAReceived {
			if got := ev.U.MRA().Timeout; got != tc.auto {
				t.Errorf("MRA service timeout %d, want %d", got, tc.auto)
			}
		}
		srv.Close()
		cli.Close()
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
