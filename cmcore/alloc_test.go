package cmcore

import "testing"

// TestHandshakeAllocs keeps a full connection lifecycle on hw/sim (REQ,
// REP, RTU, DREQ, DREP, timewait; BenchmarkHandshake) within the
// allocations the performance issue set: 30 per handshake (29 today,
// docs/perf.md "The CM on the simulated fabric"). A variable of the
// receive loop that escapes costs one allocation per MAD, five per
// handshake, as recvLoop's error once did.
func TestHandshakeAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the handshake benchmark for about a second")
	}
	r := testing.Benchmark(BenchmarkHandshake)
	if r.N == 0 {
		t.Fatal("the handshake benchmark failed")
	}
	if got := r.AllocsPerOp(); got > 30 {
		t.Errorf("%d allocations per handshake over %d handshakes, want at most 30", got, r.N)
	}
}
