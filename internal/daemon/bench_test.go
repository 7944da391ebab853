package daemon_test

import (
	"testing"

	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
)

// The status snapshot (ucmd status, and the metrics endpoint at most once
// a second) of one file holding 60,000 ids, near the default limit of
// 65,536 a file: B/op and allocs/op are what one snapshot makes the daemon
// allocate. Before the per-id maps of ucm's Files became slices and the
// results were sized up front: 54.6 MB, about 840 allocations and 22–25
// ms a snapshot on this project's 2-core host; after: 9.9 MB, 24
// allocations and 5–7 ms.
func BenchmarkSnapshot60kIDs(b *testing.B) {
	d := daemonWith60kIDs(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d.Snapshot()
	}
}

// The health check before each ping of systemd's watchdog, on the same
// file of 60,000 ids: every lock once, nothing allocated per id.
func BenchmarkProbe60kIDs(b *testing.B) {
	d := daemonWith60kIDs(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d.Probe()
	}
}

// daemonWith60kIDs is a daemon of one device with one file holding 60,000
// ids.
func daemonWith60kIDs(b *testing.B) *daemon.Daemon {
	f := daemontest.New(b)
	run := b.TempDir()
	d := start(b, f, daemon.Config{SimDevices: 1, RuntimeDir: run})
	p := newPair(b, f, run)
	for i := range 60000 {
		if _, err := p.cli.CreateID(uint64(i)); err != nil {
			b.Fatal(i, err)
		}
	}
	return d
}
