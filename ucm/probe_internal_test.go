package ucm

import (
	"sync"
	"testing"
	"time"
)

// Probe waits for each lock a command takes, and only for those held:
// what makes it the daemon's deadlock check.
func TestProbeWaitsForEachLock(t *testing.T) {
	f, _ := newQueueFile(t)
	d := f.d
	d.Probe() // nothing held
	for name, mu := range map[string]*sync.Mutex{
		"files": &d.filesMu, "a file's": &f.mu, "the id table's": &d.ids.mu, "the failures'": &d.fails.mu,
	} {
		mu.Lock()
		done := make(chan struct{})
		go func() {
			d.Probe()
			close(done)
		}()
		select {
		case <-done:
			t.Errorf("Probe returned while %s lock was held", name)
		case <-time.After(20 * time.Millisecond):
		}
		mu.Unlock()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Probe did not return once %s lock was let go", name)
		}
	}
}
