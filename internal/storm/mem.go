package storm

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"syscall"
	"time"
)

// memSampler records the peak of the heap's live-and-unswept object bytes
// and the Go runtime's total mapped memory, sampled every few milliseconds
// of wall clock.
type memSampler struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	peakHeap  uint64
	peakTotal uint64
}

func startMemSampler() *memSampler {
	m := &memSampler{stop: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			m.mu.Lock()
			m.peakHeap = max(m.peakHeap, s[0].Value.Uint64())
			m.peakTotal = max(m.peakTotal, s[1].Value.Uint64())
			m.mu.Unlock()
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// end stops sampling and returns the peaks.
func (m *memSampler) end() (heap, total uint64) {
	close(m.stop)
	m.wg.Wait()
	return m.peakHeap, m.peakTotal
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
