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

// BenchmarkListener is the listener storm: 10,000 REQs within 10 ms
// from 100 senders at one listener accepting 1,000 a second, with
// rdma_cm's delayed MRA (STORM_MRA=off, immediate to change).
func BenchmarkListener(b *testing.B) {
	mra := MRADelayed
	if s := os.Getenv("STORM_MRA"); s != "" {
		mra = MRAMode(s)
	}
	for b.Loop() {
		res, err := RunListener(context.Background(), ListenerConfig{
			AcceptRate: 1000, MRA: mra, Latency: 100 * time.Microsecond, Seed: 1,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Timeouts), "timeouts")
		b.ReportMetric(float64(res.MRAs), "MRAs")
		b.ReportMetric(float64(res.REQRetransmits), "REQ-rexmits")
		b.ReportMetric(res.HeapPerQueued, "B/queued")
	}
}
