package clock

import (
	"testing"
	"time"
)

func TestFakeFiresInOrderAndOnlyWhenDue(t *testing.T) {
	c := NewFake(time.Unix(1000, 0))
	var got []string
	c.AfterFunc(30*time.Millisecond, func() { got = append(got, "c") })
	c.AfterFunc(10*time.Millisecond, func() { got = append(got, "a") })
	c.AfterFunc(10*time.Millisecond, func() { got = append(got, "b") })
	stopped := c.AfterFunc(20*time.Millisecond, func() { got = append(got, "never") })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	if stopped.Stop() {
		t.Fatal("second Stop returned true")
	}
	c.Advance(9 * time.Millisecond)
	if len(got) != 0 {
		t.Fatalf("fired early: %v", got)
	}
	c.Advance(25 * time.Millisecond)
	if want := "abc"; join(got) != want {
		t.Fatalf("fired %q, want %q", join(got), want)
	}
	if now := c.Now(); !now.Equal(time.Unix(1000, 0).Add(34 * time.Millisecond)) {
		t.Fatalf("Now = %v after advancing 34ms", now)
	}
}

func TestFakeTimerSetFromCallbackFiresInSameAdvance(t *testing.T) {
	c := NewFake(time.Unix(0, 0))
	var at []time.Duration
	var tick func()
	tick = func() {
		at = append(at, c.Now().Sub(time.Unix(0, 0)))
		if len(at) < 3 {
			c.AfterFunc(time.Second, tick)
		}
	}
	c.AfterFunc(time.Second, tick)
	c.Advance(10 * time.Second)
	if len(at) != 3 || at[0] != time.Second || at[2] != 3*time.Second {
		t.Fatalf("callbacks at %v, want 1s 2s 3s", at)
	}
	if c.Pending() != 0 {
		t.Fatalf("Pending = %d", c.Pending())
	}
}

func join(s []string) string {
	out := ""
	for _, x := range s {
		out += x
	}
	return out
}
