package storm

import (
	"context"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/ucm"
)

// Settings no storm can run are refused with the flag's name, before
// anything starts: a negative spread panicked in rand.Int64N, an accept
// rate of 1e9 per second or more hung (a zero tick re-arming itself within
// one Advance, past any context).
func TestBadSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Nodes: 4, Pattern: RingOnDemand, OnDemandSpread: -time.Millisecond}, "--on-demand-spread -1ms: cannot be negative"},
		{Config{Nodes: 4, StartSpread: -1}, "--start-spread -1ns: cannot be negative"},
		{Config{Nodes: 4, Loss: 1.5}, "--loss 1.5: want a probability from 0 to 1"},
		{Config{Nodes: 4, Reorder: math.NaN()}, "--reorder NaN: want a probability"},
		{Config{Nodes: 4, OnDemand: -2, Latency: -time.Second}, "--on-demand -2: cannot be negative\n--latency -1s: cannot be negative"},
	} {
		if _, err := Run(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
	for _, c := range []struct {
		cfg  ListenerConfig
		want string
	}{
		{ListenerConfig{Requests: 10, Senders: 2, AcceptRate: 2e9}, "--accept-rate 2e+09: want 0 to 1e+06 per second"},
		{ListenerConfig{Requests: 10, Senders: 2, AcceptRate: math.Inf(1)}, "--accept-rate +Inf"},
		{ListenerConfig{Requests: 10, Senders: 2, AcceptRate: -1}, "--accept-rate -1"},
		{ListenerConfig{Requests: -5}, "--requests -5: cannot be negative"},
		{ListenerConfig{Requests: 10, MRAServiceTimeout: 32}, "--mra-timeout 32: want a 5-bit IBTA time"},
		{ListenerConfig{Requests: 10, Within: -time.Millisecond}, "--within -1ms"},
	} {
		if _, err := RunListener(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunListener(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
}

// An event left in a file's queue is one leak: the Budget's count of the
// user's events and the file's queue both hold it, and leaks counted it
// in each.
func TestLeakedEventCountedOnce(t *testing.T) {
	n := newSimNet(1, sim.Knobs{}, 0)
	mem := callermem.NewFake()
	a, err := n.addStack(0, mem, 0, ucm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.addStack(1, mem, 0, ucm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	id, err := a.createID(1)
	if err == nil {
		err = a.sendREQ(id, b, 0, DefaultTimeouts)
	}
	a.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	n.settle() // the REQ reaches b's listener; b's application reads nothing
	if l := b.leaks(); l.ucmEvents != 1 {
		t.Errorf("b holds one REQ event: leaks %+v, want 1 ucm event", l)
	}
}

// QueueLen is the listener port's receive queue; the senders' ports get
// room for their own connections' MADs, not the listener's: every port
// made the listener's queue up front (280 bytes a slot), 101 × Requests
// slots, 141 MB for 5,000 REQs and 28 GB for a million.
func TestListenerQueueOnlyAtTheListener(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := RunListener(t.Context(), ListenerConfig{Requests: 5000, Senders: 100, AcceptRate: 0})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if res.Established != 5000 {
		t.Errorf("%d of 5000 established", res.Established)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 100<<20 {
		t.Errorf("a storm of 5000 REQs from 100 senders allocated %d MB, want under 100", grew>>20)
	}
}
