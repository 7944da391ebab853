package ucm

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// enter takes a slot as call.enterCopy takes each of its two, waiting for
// one if all are taken; the wait ends with ctx or done, and then enter
// returns the cause and holds no slot.
func (s *copySlots) enter(ctx context.Context, done <-chan struct{}) error {
	if s.take() {
		return nil
	}
	return s.wait(ctx, done, nil)
}

// Slots go to waiters in the order they came, handed over by leave; a
// waiter that gives up leaves the queue, and one that gives up as its
// slot arrives passes the slot on.
func TestCopySlotsOrderAndCancel(t *testing.T) {
	s := &copySlots{max: 1}
	done := make(chan struct{})
	if err := s.enter(context.Background(), done); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 3)
	ctxs := make([]context.CancelFunc, 3)
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		go func() {
			if err := s.enter(ctx, done); err != nil {
				got <- -1 - i
				return
			}
			got <- i
		}()
		for _, w := s.counts(); w != i+1; _, w = s.counts() {
			time.Sleep(time.Millisecond) // each queued before the next starts
		}
	}
	ctxs[1]() // the second gives up
	if g := <-got; g != -2 {
		t.Fatalf("cancelled waiter: %d, want -2", g)
	}
	s.leave()
	if g := <-got; g != 0 {
		t.Fatalf("first slot handed to waiter %d, want 0", g)
	}
	s.leave()
	if g := <-got; g != 2 {
		t.Fatalf("second slot handed to waiter %d, want 2", g)
	}
	if n, w := s.counts(); n != 1 || w != 0 {
		t.Fatalf("%d in progress, %d waiting; want 1, 0", n, w)
	}

	// Released while waiting: errReleased, and the slot a late handover
	// gave is passed on, never lost.
	for range 100 {
		gone := make(chan struct{})
		res := make(chan error, 1)
		go func() { res <- s.enter(context.Background(), gone) }()
		for _, w := s.counts(); w != 1; _, w = s.counts() {
			time.Sleep(10 * time.Microsecond)
		}
		close(gone)
		s.leave() // races the release
		err := <-res
		if err != nil && !errors.Is(err, errReleased) {
			t.Fatal(err)
		}
		if err != nil {
			// gave up: the slot went back
			if n, w := s.counts(); n != 0 || w != 0 {
				t.Fatalf("after a release: %d in progress, %d waiting; want 0, 0", n, w)
			}
		} else if n, w := s.counts(); n != 1 || w != 0 {
			t.Fatalf("after a handover: %d in progress, %d waiting; want 1, 0", n, w)
		}
		if n, _ := s.counts(); n == 0 {
			if err := s.enter(context.Background(), done); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Many copies at once, some of them giving up while they wait: never more
// than max hold a slot, and once all are done none does and none waits.
func TestCopySlotsStress(t *testing.T) {
	const max, workers, rounds = 3, 16, 300
	s := &copySlots{max: max}
	var in, most atomic.Int32
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				ctx, cancel := context.WithCancel(context.Background())
				if (w+r)%7 == 0 {
					cancel() // gives up at once if it has to wait
				}
				if s.take() || s.wait(ctx, done, nil) == nil {
					n := in.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					runtime.Gosched()
					in.Add(-1)
					if !s.give() {
						s.handOver()
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > max {
		t.Errorf("%d copies held slots at once, max %d", m, max)
	}
	if n, w := s.counts(); n != 0 || w != 0 {
		t.Errorf("after all: %d in progress, %d waiting; want 0, 0", n, w)
	}
}
