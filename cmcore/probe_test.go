package cmcore

import (
	"testing"
	"time"
)

// Probe waits for the CM's lock, and only while it is held.
func TestProbe(t *testing.T) {
	h := newHarness(t)
	h.cm.Probe()
	h.cm.mu.Lock()
	done := make(chan struct{})
	go func() {
		h.cm.Probe()
		close(done)
	}()
	select {
	case <-done:
		t.Error("Probe returned while the CM's lock was held")
	case <-time.After(20 * time.Millisecond):
	}
	h.cm.mu.Unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Probe did not return once the lock was let go")
	}
}
