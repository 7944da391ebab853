package sim

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
)

// sendAsync runs Send on its own goroutine: with Resolve set it blocks
// until the fake clock moves.
func sendAsync(ep hw.Endpoint, dst hw.Address) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- ep.Send(context.Background(), dst, cmMAD(1, 0x10)) }()
	return errc
}

func waitPending(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Pending() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers pending, want %d", clk.Pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func returned(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Send still blocked")
		return nil
	}
}

func TestResolve(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	f := New(Config{Seed: 1, Clock: clk, Knobs: Knobs{Resolve: time.Second}})
	a := mustDev(t)(f.AddRoCE("rxe0", 1)).Port(1)
	b := mustDev(t)(f.AddRoCE("rxe1", 1)).Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)
	toB := hw.Address{QPN: 1, GRH: &hw.GRH{GID: gid0(t, b), HopLimit: 64}}

	// Two sends to an unresolved peer share one resolution.
	first, second := sendAsync(ea, toB), sendAsync(ea, toB)
	waitPending(t, clk, 1)
	clk.Advance(time.Second - time.Nanosecond)
	select {
	case err := <-first:
		t.Fatalf("send returned before resolution finished: %v", err)
	default:
	}
	clk.Advance(time.Nanosecond)
	if returned(t, first) != nil || returned(t, second) != nil {
		t.Fatal("sends after resolution failed")
	}
	// Resolved: the next send does not wait.
	if err := returned(t, sendAsync(ea, toB)); err != nil {
		t.Fatal(err)
	}
	if c := b.Counters(); c.Received != 3 {
		t.Errorf("b counters %+v, want 3 received", c)
	}
	recvNow(t, eb)

	// A GID nobody owns: ETIMEDOUT after the delay, and tried afresh each time.
	nowhere := toB
	nowhere.GRH = &hw.GRH{GID: hw.GID{0xfe, 0x80, 15: 0x99}, HopLimit: 64}
	for range 2 {
		errc := sendAsync(ea, nowhere)
		waitPending(t, clk, 1)
		clk.Advance(time.Second)
		if err := returned(t, errc); !errors.Is(err, syscall.ETIMEDOUT) {
			t.Fatalf("send to an unowned GID: %v, want ETIMEDOUT", err)
		}
	}

	// Flushed, the peer is resolved again; the other direction has its own table.
	f.FlushNeighbours()
	errc := sendAsync(ea, toB)
	waitPending(t, clk, 1)
	clk.Advance(time.Second)
	if err := returned(t, errc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := eb.Send(ctx, hw.Address{QPN: 1, GRH: &hw.GRH{GID: gid0(t, a)}}, cmMAD(2, 0x13)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled send: %v", err)
	}
}

func TestResolveSkipsIB(t *testing.T) {
	f := New(Config{Seed: 1, Clock: clock.NewFake(time.Unix(0, 0)), Knobs: Knobs{Resolve: time.Hour}})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	ea := open(t, a, cmReg)
	aa, _ := a.Attr()
	if err := returned(t, sendAsync(ea, hw.Address{LID: aa.LID, QPN: 1, GRH: &hw.GRH{GID: aa.GIDs[0].GID}})); err != nil {
		t.Fatal(err)
	}
}
