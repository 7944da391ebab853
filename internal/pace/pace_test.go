package pace

import (
	"testing"
	"time"
)

func TestSpacerWaitsTenTimesTheWalk(t *testing.T) {
	var s Spacer
	const walk = 20 * time.Millisecond
	t0 := time.Now()
	s.Run(time.Second, func() { time.Sleep(walk) })
	var second time.Time
	s.Run(time.Second, func() { second = time.Now() })
	// Sleeps last at least as long as asked: the bound holds on any load.
	if got := second.Sub(t0); got < 10*walk {
		t.Fatalf("second walk %v after the first began, want at least %v", got, 10*walk)
	}
}

func TestSpacerWaitBounded(t *testing.T) {
	var slept []time.Duration
	s := Spacer{sleep: func(d time.Duration) { slept = append(slept, d) }}
	s.Run(time.Second, func() { time.Sleep(300 * time.Millisecond) }) // the next not before 3 s
	s.Run(10*time.Millisecond, func() {})
	if len(slept) != 1 || slept[0] != 10*time.Millisecond {
		t.Fatalf("slept %v with a bound of 10 ms, want [10ms]", slept)
	}
}
