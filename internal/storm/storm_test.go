package storm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/ucm"
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

// TestMeshRealClock: 16 nodes all-to-all on the real clock, every CM on
// its own receive goroutine concurrently (what the race detector needs to
// see); no loss, so the outcome does not depend on timing.
func TestMeshRealClock(t *testing.T) {
	res, err := Run(context.Background(), Config{
		Nodes: 16, Latency: 100 * time.Microsecond, Jitter: 50 * time.Microsecond, RealClock: true, Seed: 1,
		Deadline: time.Minute,
	})
	if res != nil {
		t.Logf("%+v", *res)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestMeshHostile: a fabric that loses 10% of the MADs, duplicates and
// reorders 5%, with one CM retry, so that connections fail half-way in
// every state. The storm must report them (and fail), and the teardown
// must still leave no id, event or timer behind.
func TestMeshHostile(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		to := DefaultTimeouts
		to.MaxCMRetries = 1
		res, err := Run(context.Background(), Config{
			Nodes: 24, Latency: 100 * time.Microsecond, Jitter: 50 * time.Microsecond,
			Loss: 0.1, Duplicate: 0.05, Reorder: 0.05, Seed: seed, Timeouts: to,
		})
		if res == nil {
			t.Fatal(err)
		}
		if res.Failed == 0 || err == nil {
			t.Errorf("seed %d: no connection failed (%v)", seed, err)
		}
		if res.LeakedIDs != 0 || res.LeakedEvents != 0 || res.LeakedTimers != 0 || res.Established+res.Failed != res.Connections {
			t.Errorf("seed %d: %+v", seed, *res)
		}
	}
}

// TestListenerStorm is the listener storm scaled down for make check:
// 2,000 REQs within 2 ms at one listener. Accepting 400 a second (5 s of
// backlog, beyond the 4.224 s REQ interval), rdma_cm's delayed MRA answers
// each retransmitted REQ and none times out. With REQs every 384 ms
// (response timeout 16, 16 sends: 6.1 s) and 200 accepted a second (10 s),
// the later REQs time out without MRA, and none does with it.
func TestListenerStorm(t *testing.T) {
	short := Timeouts{PacketLifeTime: 14, RemoteCMResponseTimeout: 16, LocalCMResponseTimeout: 20, MaxCMRetries: 15}
	for _, tc := range []struct {
		name     string
		rate     float64
		mra      MRAMode
		to       Timeouts
		timeouts bool
	}{
		{"delayed", 400, MRADelayed, DefaultTimeouts, false},
		{"short-off", 200, MRAOff, short, true},
		{"short-delayed", 200, MRADelayed, short, false},
		{"short-immediate", 200, MRAImmediate, short, false},
		{"short-cm", 200, MRACM, short, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := RunListener(context.Background(), ListenerConfig{
				Requests: 2000, Within: 2 * time.Millisecond, Senders: 20,
				AcceptRate: tc.rate, MRA: tc.mra, Timeouts: tc.to, Latency: 100 * time.Microsecond, Seed: 1,
			})
			if res != nil {
				t.Logf("%+v", *res)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Timeouts > 0; got != tc.timeouts {
				t.Fatalf("%d REQs timed out, want timeouts: %v", res.Timeouts, tc.timeouts)
			}
			if !tc.timeouts && res.Established != res.Config.Requests {
				t.Fatalf("%d established of %d", res.Established, res.Config.Requests)
			}
			if res.Established+res.Failed != res.Config.Requests {
				t.Fatalf("%d established + %d failed of %d", res.Established, res.Failed, res.Config.Requests)
			}
			if tc.mra != MRAOff && res.MRAsReceived == 0 {
				t.Fatal("no MRA arrived")
			}
			// Every REQ went through ucm at its default limits: none
			// rejected, and where the application reads a REQ only to
			// accept it (off, cm) they waited in ucm's event queue.
			if res.UCMRejected != 0 || res.UCMLimits.UserEvents != ucm.DefaultUserEvents {
				t.Fatalf("ucm rejected %d new connections (limits %+v)", res.UCMRejected, res.UCMLimits)
			}
			if paced := tc.mra == MRAOff || tc.mra == MRACM; paced && res.UCMPeakEvents < res.Config.Requests*9/10 {
				t.Fatalf("at most %d events queued in ucm, want about %d", res.UCMPeakEvents, res.Config.Requests)
			}
			if res.UCMPeakIDs != res.Config.Requests+1 {
				t.Fatalf("ucm held at most %d ids, want every connection's and the listener's", res.UCMPeakIDs)
			}
		})
	}
}

// TestListenerUCMBudget: the storm's REQs are queued by ucm and charged to
// the listening user's Budget: with --user-events 500 instead of the
// default, ucm queues at most 500 and rejects the REQs past it (REJ
// consumer defined), which fail at their senders; nothing leaks.
func TestListenerUCMBudget(t *testing.T) {
	res, err := RunListener(context.Background(), ListenerConfig{
		Requests: 2000, Within: 2 * time.Millisecond, Senders: 20, AcceptRate: 400, MRA: MRACM,
		Latency: 100 * time.Microsecond, Seed: 1, Limits: ucm.Limits{UserEvents: 500},
	})
	if res != nil {
		t.Logf("%+v", *res)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.UCMPeakEvents != 500 || res.UCMRejected == 0 || res.REJs == 0 || res.Failed == 0 || res.Established+res.Failed != res.Config.Requests {
		t.Fatalf("with 500 events per user: %d queued at most, %d rejected by ucm, %d REJ, %d failed, %d established",
			res.UCMPeakEvents, res.UCMRejected, res.REJs, res.Failed, res.Established)
	}
}

// TestNodeCountBounds: a subnet too large for its LIDs is refused before
// any node is built, with the limit in the error, in both storms.
func TestNodeCountBounds(t *testing.T) {
	for _, n := range []int{-5, 1, MaxNodes + 1, 10_000_000} {
		if res, err := Run(context.Background(), Config{Nodes: n}); err == nil || res != nil {
			t.Errorf("Run with %d nodes = %v, %v; want an error and no result", n, res, err)
		} else if !strings.Contains(err.Error(), "49151") {
			t.Errorf("Run with %d nodes: %v; want the limit in the error", n, err)
		}
	}
	if _, err := RunListener(context.Background(), ListenerConfig{Senders: MaxNodes}); err == nil || !strings.Contains(err.Error(), "49150") {
		t.Errorf("RunListener with %d senders: %v; want an error with the limit", MaxNodes, err)
	}
}

// TestMemoryBound: a storm whose connections cannot fit is refused before
// any node is built, with its numbers; one that fits is not.
func TestMemoryBound(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		cfg   Config
		avail uint64
		ok    bool
	}{
		{Config{Nodes: 1024, Pattern: AllToAll}, 4 * gib, true}, // 523,776 connections, 3.3 GiB
		{Config{Nodes: 1024, Pattern: AllToAll}, 3 * gib, false},
		{Config{Nodes: 40_000, Pattern: AllToAll}, 64 * gib, false}, // 799,980,000
		{Config{Nodes: 40_000, Pattern: RingOnDemand, OnDemand: 8}, 64 * gib, true},
		{Config{Nodes: 40_000, Pattern: RingOnDemand, OnDemand: 1 << 62}, 64 * gib, false}, // bounded by all pairs, no overflow
		{Config{Nodes: 40_000, Pattern: AllToAll}, 0, true},                                // unknown: not checked
	} {
		err := checkMemory("test", maxConnections(c.cfg), c.avail)
		if (err == nil) != c.ok {
			t.Errorf("%d nodes %s, on demand %d, %d GiB available: %v, want ok=%v", c.cfg.Nodes, c.cfg.Pattern, c.cfg.OnDemand, c.avail/gib, err, c.ok)
		}
	}
	if memAvailable() == 0 {
		t.Fatal("MemAvailable not read from /proc/meminfo")
	}
	// Refused before the nodes are built: 49,151 of them would take minutes.
	_, err := Run(context.Background(), Config{Nodes: MaxNodes})
	if err == nil || !strings.Contains(err.Error(), "1207885825 connections") {
		t.Fatalf("Run with %d nodes all-to-all: %v; want it refused for its 1,207,885,825 connections", MaxNodes, err)
	}
	_, err = RunListener(context.Background(), ListenerConfig{Requests: 1 << 40})
	if err == nil || !strings.Contains(err.Error(), "1099511627776 REQs at one listener plan up to 1099511627776 connections") {
		t.Fatalf("RunListener with 2^40 REQs: %v; want it refused", err)
	}
}
