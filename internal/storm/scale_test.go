package storm

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkMesh runs one all-to-all storm per op with 100 µs latency and
// 0.1% loss; STORM_NODES (default 64) sets N.
func BenchmarkMesh(b *testing.B) {
	n := 64
	if s := os.Getenv("STORM_NODES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for b.Loop() {
		res, err := Run(context.Background(), Config{
			Nodes: n, Pattern: AllToAll, Latency: 100 * time.Microsecond, Loss: 0.001, Seed: 1,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Connections), "conns")
		b.ReportMetric(res.ConnsPerSec, "conns/s")
		b.ReportMetric(res.BytesPerConn, "B/conn")
		b.ReportMetric(res.SimTime.Seconds(), "sim-s")
	}
}
