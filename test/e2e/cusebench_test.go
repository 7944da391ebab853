//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkCUSEWriteThreads measures the cuse package's server through the
// real kernel the way the performance notes measured libfuse: N client
// threads (OS threads, raw write(2)) each write 24-byte commands to
// /dev/infiniband/ucmtest as fast as they are answered. Beside ns/op (the
// wall time per write, so 1/throughput with N threads) it reports, per
// write:
//
//	us/write     wall time of one write seen by one client thread
//	srv-cpu-us   CPU of the process minus the client threads' own CPU
//	srv-csw      context switches of the process minus the client threads'
//	cli-csw      context switches of the client threads
//	writes/s     aggregate throughput
//
// With CUSE_BENCH_PROFILE=<dir> (e.g. $UCMD_VM_SCRATCH) it writes a CPU
// profile per sub-benchmark there.
//
//	test/vm/run.sh -r -- env UCMD_VM_GUEST=1 bin/e2e/e2e.test -test.run=^$ -test.bench=CUSEWriteThreads
func BenchmarkCUSEWriteThreads(b *testing.B) {
	for _, threads := range []int{1, 4} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			benchWriteThreads(b, threads)
		})
	}
}

type threadUsage struct {
	cpu time.Duration
	csw int64
}

func rusage(who int) threadUsage {
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		panic(err)
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return threadUsage{cpu: cpu, csw: ru.Nvcsw + ru.Nivcsw}
}

func benchWriteThreads(b *testing.B, threads int) {
	_, stop := serveUcmtest(b)
	defer stop()
	fd, err := unix.Open(ucmtestPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatalf("open %s: %v", ucmtestPath, err)
	}
	defer unix.Close(fd)

	if dir := os.Getenv("CUSE_BENCH_PROFILE"); dir != "" {
		name := filepath.Join(dir, fmt.Sprintf("cpu-%d-%d.pprof", threads, b.N))
		pf, err := os.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		defer pf.Close()
		pprof.StartCPUProfile(pf)
		defer pprof.StopCPUProfile()
	}

	// Each client thread writes its share; all start together.
	var (
		start   = make(chan struct{})
		ready   sync.WaitGroup
		done    sync.WaitGroup
		mu      sync.Mutex
		cliUse  threadUsage
		errs    []error
		perThrd = b.N / threads
	)
	if perThrd == 0 {
		perThrd = 1
	}
	cmd := make([]byte, 24)
	for i := 0; i < threads; i++ {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread() // the thread exits with the goroutine
			ready.Done()
			<-start
			u0 := rusage(unix.RUSAGE_THREAD)
			var err error
			for j := 0; j < perThrd; j++ {
				if err = rawWrite(fd, cmd); err != nil {
					break
				}
			}
			u1 := rusage(unix.RUSAGE_THREAD)
			mu.Lock()
			cliUse.cpu += u1.cpu - u0.cpu
			cliUse.csw += u1.csw - u0.csw
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		}()
	}
	ready.Wait()
	p0 := rusage(unix.RUSAGE_SELF)
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	done.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	p1 := rusage(unix.RUSAGE_SELF)
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	writes := float64(perThrd * threads)
	b.ReportMetric(float64(elapsed.Microseconds())*float64(threads)/writes, "us/write")
	b.ReportMetric(writes/elapsed.Seconds(), "writes/s")
	b.ReportMetric(float64((p1.cpu-p0.cpu-cliUse.cpu).Microseconds())/writes, "srv-cpu-us")
	b.ReportMetric(float64(p1.csw-p0.csw-cliUse.csw)/writes, "srv-csw")
	b.ReportMetric(float64(cliUse.csw)/writes, "cli-csw")
}

// TestCUSEServeUntilSignal serves /dev/infiniband/ucmtest for an external
// client to measure (a C client under perf stat -p), until SIGUSR2. Unlike
// TestCUSEServeForBenchmark it polls nothing while it serves, so the
// process's CPU time and context switches are the server's alone. Skipped
// unless CUSE_BENCH_SIGNAL=1.
func TestCUSEServeUntilSignal(t *testing.T) {
	if os.Getenv("CUSE_BENCH_SIGNAL") != "1" {
		t.Skip("set CUSE_BENCH_SIGNAL=1 to serve until SIGUSR2 for an external benchmark")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGUSR2)
	defer signal.Stop(sig)
	_, stop := serveUcmtest(t)
	defer stop()
	if err := os.Chmod(ucmtestPath, 0o666); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sig:
	case <-time.After(10 * time.Minute):
		t.Error("no SIGUSR2 within 10 minutes")
	}
}
