package ucm_test

import (
	"context"
	"encoding/binary"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"golang.org/x/sys/unix"
)

// The memory benchmarks drive ucm.Device through its own API (Open, then
// Handle.Write with a command), not through the fake kernel, whose own
// bookkeeping of every request would be counted as the daemon's. Every
// command reuses the same client buffers, so the fake client memory does
// not grow either. Run them with -benchtime 1x; the figures are B/id and
// B/conn of live heap after GC.

// liveHeap is the heap's object bytes after a full collection.
func liveHeap() float64 {
	runtime.GC()
	runtime.GC() // the first may leave the previous cycle's finalizers
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64())
}

// memIDs and memConns are how many ids and connections the memory
// benchmarks hold: enough that per-item figures are not noise.
const memIDs, memConns = 20000, 5000

type nopWaker struct{}

func (nopWaker) Wake() {}

// handle is one open file of the device, written to directly.
type handle struct {
	b   *testing.B
	h   cuse.Handle
	req cuse.Request
}

func openHandle(b *testing.B, d *fakedut.DUT) *handle {
	req := cuse.Request{Caller: d.Caller, Flags: unix.O_RDWR}
	h, err := d.Device.Open(context.Background(), req, nopWaker{})
	must(b, err)
	return &handle{b: b, h: h, req: req} // the caller releases it, once, as the kernel would

}

func (h *handle) cmd(c abi.Cmd, out uint16, s abi.Struct) {
	if _, err := h.h.Write(context.Background(), h.req, conformance.Encode(c, out, s)); err != nil {
		h.b.Fatalf("%v: %v", c, err)
	}
}

// BenchmarkLiveHeapPerID is the Go heap an idle id costs the daemon
// (ucm's context, the id table, cmcore's id and comm-ID entry).
func BenchmarkLiveHeapPerID(b *testing.B) {
	d := fakedut.New(b, nil)
	mem := d.Mem()
	resp := mem.Alloc(abi.CreateIDRespSize)
	for b.Loop() {
		h := openHandle(b, d)
		before := liveHeap()
		for i := range memIDs {
			h.cmd(abi.CmdCreateID, 4, &abi.CreateID{UID: uint64(i), Response: resp})
		}
		b.ReportMetric((liveHeap()-before)/memIDs, "B/id")
		b.StopTimer()
		h.h.Release(context.Background())
		b.StartTimer()
	}
}

// BenchmarkLiveHeapPerConnection is the Go heap an established RC
// connection costs with both of its ends in this daemon (two files on one
// device: each end's ucm context and cmcore id, the comm-ID, remote-ID
// and remote-QPN table entries), after REQ, REP and RTU.
func BenchmarkLiveHeapPerConnection(b *testing.B) {
	d := fakedut.New(b, nil)
	mem := d.Mem()
	path, _ := d.LoopbackPath()
	const sid = 0x1000
	createResp := mem.Alloc(abi.CreateIDRespSize)
	pathAddr := mem.Alloc(abi.PathRecSize)
	pb := make([]byte, abi.PathRecSize)
	path.Encode(pb)
	mem.Write(pathAddr, pb)
	ev := &abi.EventGet{Response: mem.Alloc(abi.EventRespSize), Data: mem.Alloc(255), Info: mem.Alloc(255), DataLen: 255, InfoLen: 255}
	for b.Loop() {
		a, p := openHandle(b, d), openHandle(b, d)
		p.cmd(abi.CmdCreateID, 4, &abi.CreateID{UID: 0xb0, Response: createResp})
		lid := binary.NativeEndian.Uint32(mem.Read(createResp, 4))
		p.cmd(abi.CmdListen, 0, &abi.Listen{ID: lid, ServiceID: sid})
		event := func(h *handle, want abi.CMEvent) uint32 {
			h.cmd(abi.CmdEvent, abi.EventRespSize, ev) // blocks until one is queued
			var r abi.EventResp
			r.Decode(mem.Read(ev.Response, abi.EventRespSize))
			if r.Event != want {
				b.Fatalf("event %v, want %v", r.Event, want)
			}
			return r.ID
		}
		before := liveHeap()
		for i := range memConns {
			a.cmd(abi.CmdCreateID, 4, &abi.CreateID{UID: uint64(i), Response: createResp})
			id := binary.NativeEndian.Uint32(mem.Read(createResp, 4))
			qpn := uint32(0x100 + i)
			a.cmd(abi.CmdSendREQ, 0, &abi.REQ{ // as conformance.Client.REQ
				ID: id, QPN: qpn, QPType: abi.QPTypeRC, PSN: qpn + 1, SID: sid,
				PrimaryPath:        pathAddr,
				ResponderResources: 1, InitiatorDepth: 1,
				RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20,
				RetryCount: 5, RNRRetryCount: 7, MaxCMRetries: 5, FlowControl: 1,
			})
			child := event(p, abi.CMREQReceived)
			p.cmd(abi.CmdSendREP, 0, &abi.REP{UID: uint64(i), ID: child, QPN: uint32(0x800000 + i), PSN: 1})
			event(a, abi.CMREPReceived)
			a.cmd(abi.CmdSendRTU, 0, &abi.PrivateData{ID: id})
			event(p, abi.CMRTUReceived)
		}
		b.ReportMetric((liveHeap()-before)/memConns, "B/conn")
		b.StopTimer()
		a.h.Release(context.Background())
		p.h.Release(context.Background())
		b.StartTimer()
	}
}

// BenchmarkLiveHeapPerBlockedGetEvent is the Go heap a GET_EVENT costs
// while it waits for an event, through the whole CUSE server (the fake
// kernel's record of each request included): what a client's event
// thread costs the daemon between connections.
func BenchmarkLiveHeapPerBlockedGetEvent(b *testing.B) {
	d := fakedut.New(b, nil)
	for b.Loop() {
		c, err := conformance.NewClient(d, false)
		must(b, err)
		const n = 500
		get, _ := eventGet(c)
		before := liveHeap()
		pending := make([]*cusetest.Pending, 0, n)
		for range n {
			pending = append(pending, fake(c).WriteAsync(get))
		}
		// Every GET_EVENT read by the server; a moment for the last
		// handlers to reach their wait.
		d.Kernel.Sync()
		time.Sleep(50 * time.Millisecond)
		b.ReportMetric((liveHeap()-before)/n, "B/GET_EVENT")
		c.Close() // release answers them
		for _, p := range pending {
			p.Wait()
		}
	}
}
