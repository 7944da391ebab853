package main

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ucmd/ucmd/internal/syncbuf"
)

// The watchdog pings after every check that returns, none while a check
// hangs (a deadlock: systemd then restarts ucmd), says so once, and pings
// again when the check comes back.
func TestWatchdog(t *testing.T) {
	const period = 2 * time.Millisecond
	var pings, checks atomic.Int64
	hang := make(chan struct{})
	hanging := make(chan struct{})
	var blockAt atomic.Int64
	blockAt.Store(-1)
	check := func() {
		if checks.Add(1) == blockAt.Load() {
			close(hanging)
			<-hang
		}
	}
	logs := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		watchdog(ctx, period, check, func() error { pings.Add(1); return nil }, slog.New(slog.NewTextHandler(logs, nil)))
	}()
	waitCount := func(c *atomic.Int64, n int64, what string) {
		t.Helper()
		for deadline := time.Now().Add(waitFor); c.Load() < n; time.Sleep(period) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d, want %d", what, c.Load(), n)
			}
		}
	}
	waitCount(&pings, 3, "pings while the checks return")
	blockAt.Store(checks.Load() + 1)
	<-hanging
	before := pings.Load()
	// A healthy check slower than the period (a loaded machine) logs
	// both lines; the hung one only the first. Wait for it, then check
	// no second comes.
	unanswered := func() int {
		l := logs.String()
		return strings.Count(l, "has not returned") - strings.Count(l, "returned late")
	}
	for deadline := time.Now().Add(waitFor); unanswered() < 1 && time.Now().Before(deadline); {
		time.Sleep(period)
	}
	time.Sleep(50 * period)
	if got := pings.Load(); got != before {
		t.Fatalf("%d pings while the check hung", got-before)
	}
	if n := unanswered(); n != 1 {
		t.Fatalf("%d errors logged for the hung check and not followed by its late return, want 1:\n%s", n, logs.String())
	}
	close(hang)
	waitCount(&pings, before+3, "pings after the check returned")
	if !strings.Contains(logs.String(), "returned late") {
		t.Errorf("the late return is not logged:\n%s", logs.String())
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(waitFor):
		t.Fatal("the watchdog did not stop with its context")
	}
}
