package ucm_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/ucm"
)

// closeBenchIDs is the size of the file BenchmarkCloseManyIDs closes
// (issue 12: "closing 100,000 ids").
const closeBenchIDs = 100_000

// BenchmarkCloseManyIDs is the RELEASE of a file holding 100,000 ids
// (ns/op is one close), while another file of the same daemon runs
// ATTR_ID in a loop: attr-p50-ns and attr-p99-ns are that command's
// round trip during the close, the delay a close imposes on every other
// client. runq-wait-ns/op is how long the process's threads waited,
// runnable, for a CPU during the close (where the kernel keeps schedstat):
// on a 2-CPU host it matches the ATTR_ID stalls, which are the operating
// system's scheduling, not the daemon's locks (docs/perf.md, "Memory").
// Setup (100,000 CREATE_IDs) is not timed.
//
//	go test -run '^$' -bench CloseManyIDs -benchtime 3x ./ucm/
func BenchmarkCloseManyIDs(b *testing.B) {
	d, attrID := attrIDProbe(b)

	var lat []time.Duration
	var runqWait time.Duration
	schedstat := true
	b.StopTimer()
	for range b.N {
		c, err := conformance.NewClient(d, false)
		must(b, err)
		fillIDs(b, c, closeBenchIDs)

		stop := make(chan struct{})
		samples := make(chan []time.Duration)
		go func() {
			var s []time.Duration
			for {
				select {
				case <-stop:
					samples <- s
					return
				default:
				}
				s = append(s, attrID())
			}
		}()
		w0, ok0 := threadsRunqWait()
		b.StartTimer()
		p := fake(c).F.ReleaseAsync()
		<-p.Done()
		b.StopTimer()
		w1, ok1 := threadsRunqWait()
		schedstat = schedstat && ok0 && ok1
		runqWait += w1 - w0
		close(stop)
		lat = append(lat, <-samples...)
		if n := d.IDs.Len(); n != 1 {
			b.Fatalf("%d ids left after close, want 1", n)
		}
	}
	if len(lat) > 0 {
		reportLatency(b, lat)
		b.ReportMetric(float64(len(lat))/float64(b.N), "attrs/op")
	}
	if schedstat {
		b.ReportMetric(float64(runqWait.Nanoseconds())/float64(b.N), "runq-wait-ns/op")
	}
}

// threadsRunqWait is the time the process's threads have spent runnable
// and waiting for a CPU: the second field of each thread's
// /proc/self/task/TID/schedstat (CONFIG_SCHED_INFO). A thread that exits
// in between takes its share with it, which only makes a difference
// smaller. ok is false where the kernel has no schedstat.
func threadsRunqWait() (d time.Duration, ok bool) {
	paths, err := filepath.Glob("/proc/self/task/*/schedstat")
	if err != nil || len(paths) == 0 {
		return 0, false
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, false
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, false
		}
		d += time.Duration(ns)
	}
	return d, true
}

// benchLimits lets one file (and its user) hold n ids, and the other file
// its one.
func benchLimits(n int) ucm.Limits {
	return ucm.Limits{MaxIDs: n + 1, UserIDs: n + 2}
}

// fillIDs creates n ids on c with raw writes, as fast as the fake kernel
// goes.
func fillIDs(tb testing.TB, c *conformance.Client, n int) {
	tb.Helper()
	ff := fake(c)
	resp := c.Mem.Alloc(abi.CreateIDRespSize)
	create := conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: resp})
	for i := range n {
		binary.NativeEndian.PutUint64(create[abi.HeaderSize:], uint64(i))
		if _, errno := ff.F.Write(ff.Caller, create); errno != 0 {
			tb.Fatalf("CREATE_ID %d: %v", i, errno)
		}
	}
}

// BenchmarkAttrIDIdle is BenchmarkCloseManyIDs's ATTR_ID loop with no
// close running, on a daemon that holds as many ids: the baseline that the
// latency during a close is compared with (ns/op is one ATTR_ID).
//
//	go test -run '^$' -bench 'CloseManyIDs|AttrIDIdle' -benchtime 3x ./ucm/
func BenchmarkAttrIDIdle(b *testing.B) {
	d, attrID := attrIDProbe(b)
	c, err := conformance.NewClient(d, false)
	must(b, err)
	fillIDs(b, c, closeBenchIDs)

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		lat = append(lat, attrID())
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// attrIDProbe is a daemon with one other file holding one id, and a
// function that runs ATTR_ID on it and returns the round trip.
//
// The benchmark runs with the Ps ucmd serve gives the daemon: GOMAXPROCS
// raised by the CUSE server's MaxBlockedReaders (cmd/ucmd spareProcs),
// restored at the end. At the test binary's default of one P per CPU, two
// readers blocked in read(2) hold every P, and the probe's goroutines
// (its client and the fake kernel's reply reader, which in the daemon are
// other processes) queue behind them and behind the close: on a 2-CPU
// host the median ATTR_ID during a close was then 190 µs against 8 µs
// with the daemon's Ps (docs/perf.md, "Memory").
func attrIDProbe(b *testing.B) (*fakedut.DUT, func() time.Duration) {
	d := fakedut.New(b, &fakedut.Options{Limits: benchLimits(closeBenchIDs)})
	base := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(base + d.Kernel.Server().MaxBlockedReaders())
	b.Cleanup(func() { runtime.GOMAXPROCS(base) })
	other, err := conformance.NewClient(d, false)
	must(b, err)
	oid, err := other.CreateID(1)
	must(b, err)
	of := fake(other)
	attrResp := other.Mem.Alloc(abi.AttrIDRespSize)
	attr := conformance.Encode(abi.CmdAttrID, abi.AttrIDRespSize, &abi.AttrID{Response: attrResp, ID: oid})
	return d, func() time.Duration {
		t0 := time.Now()
		p := of.F.WriteAsync(of.Caller, attr)
		<-p.Done()
		if r := p.Wait(); r.Errno != 0 {
			b.Errorf("ATTR_ID: %v", r.Errno)
		}
		return time.Since(t0)
	}
}

// reportLatency reports the median, 99th percentile and maximum of lat,
// how many per op took over 1 ms, and the Ps they ran with.
func reportLatency(b *testing.B, lat []time.Duration) {
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "attr-p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "attr-p99-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "attr-max-ns")
	slow := len(lat) - sort.Search(len(lat), func(i int) bool { return lat[i] > time.Millisecond })
	b.ReportMetric(float64(slow)/float64(b.N), "attrs-over-1ms/op")
}
