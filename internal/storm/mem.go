package storm

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
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

// peakPerConn is what one connection costs the process at the peak of a
// wire-up, both ends: the 1,024-node all-to-all storm of RESULTS.md peaked
// at 3.3 GiB of RSS for 523,776 connections. Run refuses a storm whose
// connections would need more than the machine has available, rather
// than be killed for it halfway.
const peakPerConn = 6656

// maxConnections bounds the connections cfg plans (defaults applied).
func maxConnections(cfg Config) uint64 {
	n := uint64(cfg.Nodes)
	all := n * (n - 1) / 2
	if cfg.Pattern == RingOnDemand && cfg.OnDemand >= 0 && uint64(cfg.OnDemand) < all/n {
		return min(all, n*(1+uint64(cfg.OnDemand)))
	}
	return all
}

// memAvailable is the kernel's estimate of the memory available to start
// new work without swapping (MemAvailable), or 0 if it cannot be read.
func memAvailable() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// checkMemory refuses a storm of what, planning up to conns connections,
// if their peak would not fit in avail bytes (0: unknown, not checked).
func checkMemory(what string, conns, avail uint64) error {
	if avail == 0 || conns <= avail/peakPerConn {
		return nil
	}
	return fmt.Errorf("storm: %s plan up to %d connections, about %.1f GiB at %.1f KiB each during the wire-up, more than the %.1f GiB available",
		what, conns, float64(conns)*peakPerConn/(1<<30), float64(peakPerConn)/(1<<10), float64(avail)/(1<<30))
}
