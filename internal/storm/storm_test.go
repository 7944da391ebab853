package storm

import (
	"context"
	"testing"
	"time"
)

// TestMesh32 is the short storm of make check: 32 nodes all-to-all (496
// connections) with 100 µs latency, 20 µs jitter and 1% loss, every
// connection established on both sides, then torn down with no id, event
// or timer left.
func TestMesh32(t *testing.T) {
	res, err := Run(context.Background(), Config{
		Nodes: 32, Pattern: AllToAll, Latency: 100 * time.Microsecond, Jitter: 20 * time.Microsecond,
		Loss: 0.01, Seed: 1,
	})
	if res != nil {
		t.Logf("%+v", *res)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Established != res.Connections || res.NotBothSides != 0 || res.Failed != 0 {
		t.Fatalf("established %d of %d (failed %d, not on both sides %d)", res.Established, res.Connections, res.Failed, res.NotBothSides)
	}
}

// TestListenerStorm: 10,000 REQs within 10 ms at one listener that accepts
// 2,000 a second (5 s of backlog, beyond the 4.224 s REQ interval): with
// rdma_cm's delayed MRA no REQ times out and each retransmitted REQ is
// answered by an MRA.
func TestListenerStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	res, err := RunListener(context.Background(), ListenerConfig{
		AcceptRate: 2000, MRA: MRADelayed, Latency: 100 * time.Microsecond, Seed: 1,
	})
	if res != nil {
		t.Logf("%+v", *res)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Timeouts != 0 || res.Established != res.Config.Requests {
		t.Fatalf("%d established of %d, %d timeouts", res.Established, res.Config.Requests, res.Timeouts)
	}
}
