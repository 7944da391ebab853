package metrics_test

import (
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/internal/metrics"
	"github.com/ucmd/ucmd/internal/status"
)

// BenchmarkObserveCommand is what metrics add to one command when on:
// the two clock reads ucm's Write makes around it and the histogram.
// (Off, Write makes neither: ucm's BenchmarkCommandObserver.)
func BenchmarkObserveCommand(b *testing.B) {
	d := metrics.New(status.ProviderFunc(func() status.Snapshot { return status.Snapshot{} })).Device("sim0")
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		d.ObserveCommand(abi.CmdAttrID, time.Since(start), nil)
	}
}

// BenchmarkObserveMAD is what metrics add to one CM MAD when on.
func BenchmarkObserveMAD(b *testing.B) {
	m := metrics.New(status.ProviderFunc(func() status.Snapshot { return status.Snapshot{} }))
	ev := &cmcore.MADEvent{Device: fakeDev{"rxe0"}, Port: 1, Dir: cmcore.MADSent, MAD: cmMAD(wire.AttrREQ)}
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveMAD(ev)
	}
}
