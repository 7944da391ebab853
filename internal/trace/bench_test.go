package trace

import (
	"io"
	"testing"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/hw"
)

func benchEvent() *cmcore.MADEvent {
	dev, _ := roceDev()
	var m hw.MAD
	copy(m[:], testMAD(commA, testREQ()))
	g := peerGRH
	return &cmcore.MADEvent{Time: t0, Device: dev, Port: 1, Dir: cmcore.MADSent, MAD: &m, Peer: hw.Address{QPN: 1, GRH: &g}}
}

// BenchmarkObserveIdle: the hub's cost per MAD on the CM's path with no
// `ucmd trace` running (one atomic load).
func BenchmarkObserveIdle(b *testing.B) {
	h := NewHub(nil, nil)
	ev := benchEvent()
	b.ReportAllocs()
	for b.Loop() {
		h.ObserveMAD(ev)
	}
}

// BenchmarkObserveSubscribed: the cost on the CM's path with one
// subscriber (the copy into its buffer; its goroutine decodes and writes
// JSON to io.Discard, and what it cannot keep up with is lost, not
// waited for).
func BenchmarkObserveSubscribed(b *testing.B) {
	h := NewHub(nil, nil)
	ev := benchEvent()
	done, stop := h.Subscribe(Request{}, io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		h.ObserveMAD(ev)
	}
	b.StopTimer()
	stop()
	<-done
}
