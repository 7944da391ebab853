package ucm_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/ucm"
)

// histObserver is what `ucmd serve --metrics-listen` attaches
// (internal/metrics.Device, which ucm may not import): a Prometheus
// histogram per command, found by index.
type histObserver struct {
	cmds  [abi.NumCmds + 1]prometheus.Histogram
	setup prometheus.Histogram
}

func newHistObserver() *histObserver {
	o := &histObserver{setup: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "setup", Buckets: prometheus.ExponentialBuckets(100e-6, 4, 11)})}
	for i := range o.cmds {
		o.cmds[i] = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cmd", Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10)})
	}
	return o
}

func (o *histObserver) ObserveCommand(cmd abi.Cmd, took time.Duration, _ error) {
	if !cmd.Valid() {
		cmd = abi.NumCmds
	}
	o.cmds[cmd].Observe(took.Seconds())
}

func (o *histObserver) ObserveSetup(_ bool, took time.Duration) { o.setup.Observe(took.Seconds()) }

// BenchmarkCommandObserver is BenchmarkCreateDestroyID (two commands per
// op through the fake kernel) with no Observer, as ucmd serve runs without
// --metrics-listen, and with the metrics endpoint's histograms: what
// timing every command costs, and that off costs nothing.
//
//	go test -run '^$' -bench CommandObserver -count 5 ./ucm/
func BenchmarkCommandObserver(b *testing.B) {
	for _, tc := range []struct {
		name string
		obs  ucm.Observer
	}{{"metrics=off", nil}, {"metrics=on", newHistObserver()}} {
		b.Run(tc.name, func(b *testing.B) { benchCreateDestroy(b, &fakedut.Options{Observer: tc.obs}) })
	}
}

// BenchmarkWriteObserver is one ATTR_ID served by the device's Write
// itself, without the fake kernel's round trip around it, so that the
// observer's share is visible: off (no Observer: one nil check) and on
// (two clock reads and a histogram).
//
//	go test -run '^$' -bench WriteObserver -count 5 ./ucm/
func BenchmarkWriteObserver(b *testing.B) {
	for _, tc := range []struct {
		name string
		obs  ucm.Observer
	}{{"metrics=off", nil}, {"metrics=on", newHistObserver()}} {
		b.Run(tc.name, func(b *testing.B) {
			d := fakedut.New(b, &fakedut.Options{Observer: tc.obs})
			req := cuse.Request{Caller: d.Caller}
			h, err := d.Device.Open(b.Context(), req, nopWaker{})
			must(b, err)
			defer h.Release(context.Background())
			mem := d.Mem()
			createResp := mem.Alloc(abi.CreateIDRespSize)
			if _, err := h.Write(b.Context(), req, conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: createResp})); err != nil {
				b.Fatal(err)
			}
			id := binary.NativeEndian.Uint32(mem.Read(createResp, 4))
			attr := conformance.Encode(abi.CmdAttrID, abi.AttrIDRespSize, &abi.AttrID{Response: mem.Alloc(abi.AttrIDRespSize), ID: id})
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.Write(ctx, req, attr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
