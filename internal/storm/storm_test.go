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
