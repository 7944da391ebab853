package sysmon

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// slackOf reads a thread's timer slack in ns.
func slackOf(t *testing.T, tid int) (int64, bool) {
	t.Helper()
	b, err := os.ReadFile(slackPath(tid))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false // the thread exited
	}
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return ns, true
}

// busy keeps a goroutine running until the returned function is called,
// so that not every P is idle and the monitor polls (nanosleep).
func busy() (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	return func() { close(done) }
}

// setSlackRuns makes each run of TestSetSlack in one process set a slack
// of its own: the threads the monitor started during an earlier run
// inherited that run's.
var setSlackRuns int64

// The monitor is found (the first thread after the main one, waiting in a
// timed sleep) and it alone of the threads there gets the slack.
func TestSetSlack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("another thread's timer slack takes CAP_SYS_NICE")
	}
	defer busy()()
	setSlackRuns++
	want := 1234567 + setSlackRuns
	slacks := func() map[int]int64 {
		tids, err := threads()
		if err != nil {
			t.Fatal(err)
		}
		m := make(map[int]int64)
		for _, tid := range tids {
			if ns, ok := slackOf(t, tid); ok {
				m[tid] = ns
			}
		}
		return m
	}
	before := slacks()
	tid, err := SetSlack(time.Duration(want))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(slackPath(tid), []byte("0"), 0) })
	for other, ns := range before {
		if other != os.Getpid() && other < tid {
			t.Errorf("thread %d, before the monitor %d, is not the main thread", other, tid)
		}
		if other != tid && ns == want {
			t.Errorf("thread %d had the slack already", other)
		}
	}
	for other, ns := range slacks() {
		switch {
		case other == tid && ns != want:
			t.Errorf("monitor thread %d: timer slack %d ns, want %d", tid, ns, want)
		case other != tid && ns != before[other] && before[other] != 0:
			t.Errorf("thread %d: timer slack %d ns, was %d: only the monitor's may change", other, ns, before[other])
		}
	}
}

func TestSetSlackZeroLeavesIt(t *testing.T) {
	if tid, err := SetSlack(0); tid != 0 || err != nil {
		t.Fatalf("SetSlack(0) = %d, %v; want nothing done", tid, err)
	}
}

func TestMonitorWait(t *testing.T) {
	for _, tc := range []struct {
		line string
		want threadWait
	}{
		{"running", waitRunning},
		{"-1 0x7ffd 0x4667", waitRunning},
		{fmt.Sprintf("%d 0xc000012345 0x0 0x0 0x0 0x0 0x0 0x7f 0x46", unix.SYS_NANOSLEEP), waitTimed},
		{fmt.Sprintf("%d 0xc000 0x80 0x0 0xc00004ff30 0x0 0x0 0x7f 0x46", unix.SYS_FUTEX), waitTimed},
		{fmt.Sprintf("%d 0xc000 0x80 0x0 0x0 0x0 0x0 0x7f 0x46", unix.SYS_FUTEX), waitOther}, // an idle thread
		{fmt.Sprintf("%d 0x3 0xc000 0x80 0x0 0x0 0x0 0x7f 0x46", unix.SYS_READ), waitOther},
		{"", waitRunning},
	} {
		if got := monitorWait(tc.line); got != tc.want {
			t.Errorf("monitorWait(%q) = %d, want %d", tc.line, got, tc.want)
		}
	}
}

// The monitor caught blocked on the scheduler's lock (an untimed futex
// wait) is looked at again, and taken once it sleeps with a timeout; a
// thread never seen in a timed wait is refused, with what it did last.
func TestAwaitTimedWait(t *testing.T) {
	untimed := fmt.Sprintf("%d 0xc000 0x80 0x0 0x0 0x0 0x0 0x7f 0x46", unix.SYS_FUTEX)
	sleeping := fmt.Sprintf("%d 0xc000012345 0x0 0x0 0x0 0x0 0x0 0x7f 0x46", unix.SYS_NANOSLEEP)
	seq := func(lines ...string) (func() (string, error), *int) {
		n := 0
		return func() (string, error) {
			l := lines[min(n, len(lines)-1)]
			n++
			return l, nil
		}, &n
	}
	look, n := seq(untimed, "running", sleeping)
	if err := awaitTimedWait(look, 5, 0); err != nil || *n != 3 {
		t.Errorf("untimed, running, sleeping: %v after %d looks; want the thread after 3", err, *n)
	}
	look, n = seq(untimed)
	if err := awaitTimedWait(look, 5, 0); err == nil || *n != 5 || !strings.Contains(err.Error(), "0x80 0x0 0x0") {
		t.Errorf("always untimed: %v after %d looks; want refused after 5, naming the wait", err, *n)
	}
	look, _ = seq("running")
	if err := awaitTimedWait(look, 3, 0); err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("always running: %v; want refused", err)
	}
	failing := func() (string, error) { return "", os.ErrNotExist }
	if err := awaitTimedWait(failing, 3, 0); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unreadable: %v; want the read's error", err)
	}
}

func TestSpareProcs(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(base)
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	want := spareProcs(base, 6, runtime.NumCPU())
	procs, raised := SpareProcs(base, 6)
	if !raised || procs != want || runtime.GOMAXPROCS(0) != want {
		t.Fatalf("SpareProcs(%d, 6) = %d, %v with GOMAXPROCS now %d; want %d, true", base, procs, raised, runtime.GOMAXPROCS(0), want)
	}
	// A device gone: its readers' Ps are given back.
	want = spareProcs(base, 2, runtime.NumCPU())
	if procs, _ := SpareProcs(base, 2); procs != want || runtime.GOMAXPROCS(0) != want {
		t.Fatalf("SpareProcs(%d, 2) after 6 = %d with GOMAXPROCS now %d; want %d", base, procs, runtime.GOMAXPROCS(0), want)
	}
	runtime.GOMAXPROCS(base)
	t.Setenv("GOMAXPROCS", strconv.Itoa(base)) // the operator's choice stands
	if _, raised := SpareProcs(base, 6); raised || runtime.GOMAXPROCS(0) != base {
		t.Fatalf("SpareProcs with GOMAXPROCS set raised it to %d", runtime.GOMAXPROCS(0))
	}
}

// The Ps and readers serve sets, on the test VM's two CPUs and on larger
// hosts: blocked is every device's idle readers and one more.
func TestProcsAndReadersByHost(t *testing.T) {
	for _, c := range []struct {
		cpus, devices    int
		readers, procs   int
		before, beforeRd int // the sizes before WorkProcs and MaxIdleReaders
	}{
		{cpus: 1, devices: 1, readers: 4, procs: 6, before: 6, beforeRd: 4},
		{cpus: 2, devices: 1, readers: 4, procs: 7, before: 7, beforeRd: 4},   // the test VM, one device
		{cpus: 2, devices: 2, readers: 4, procs: 12, before: 12, beforeRd: 4}, // and two
		{cpus: 8, devices: 2, readers: 8, procs: 26, before: 26, beforeRd: 8},
		{cpus: 32, devices: 2, readers: 8, procs: 34, before: 98, beforeRd: 32},
		{cpus: 128, devices: 4, readers: 8, procs: 128, before: 644, beforeRd: 128},
		{cpus: 224, devices: 10, readers: 8, procs: 224, before: 2474, beforeRd: 224},
		// Many devices: the readers' Ps capped (MaxReaderProcs).
		{cpus: 2, devices: 12, readers: 4, procs: 62, before: 62, beforeRd: 4},
		{cpus: 2, devices: 13, readers: 4, procs: 66, before: 67, beforeRd: 4},
		{cpus: 2, devices: 150, readers: 4, procs: 66, before: 752, beforeRd: 4},
		{cpus: 64, devices: 256, readers: 8, procs: 80, before: 16704, beforeRd: 64},
	} {
		base := c.cpus // GOMAXPROCS's default
		readers := idleReaders(base, c.cpus)
		blocked := c.devices * (readers + 1)
		procs := spareProcs(base, blocked, c.cpus)
		if readers != c.readers || procs != c.procs {
			t.Errorf("%d CPUs, %d devices: %d idle readers a device and GOMAXPROCS %d, want %d and %d",
				c.cpus, c.devices, readers, procs, c.readers, c.procs)
		}
		if got := base + c.devices*(c.beforeRd+1); got != c.before {
			t.Errorf("%d CPUs, %d devices: the old sizing gives %d, the table says %d", c.cpus, c.devices, got, c.before)
		}
		if short := procsShort(procs, blocked, c.cpus); short != 0 {
			t.Errorf("%d CPUs, %d devices: GOMAXPROCS %d is %d short of its own rule", c.cpus, c.devices, procs, short)
		}
		if free := procs - readerProcs(blocked); free < min(c.cpus, WorkProcs) {
			t.Errorf("%d CPUs, %d devices: %d Ps free beside %d waiting readers", c.cpus, c.devices, free, blocked)
		}
	}
}

func TestIdleReaders(t *testing.T) {
	for _, c := range []struct{ base, cpus, want int }{
		{1, 1, 4},
		{2, 2, 4},
		// Ps beyond the CPUs (an explicit GOMAXPROCS, or one SpareProcs
		// raised) add no reader.
		{12, 2, 4},
		{6, 6, 6},
		{64, 8, 8},
		{128, 128, MaxIdleReaders},
	} {
		if got := idleReaders(c.base, c.cpus); got != c.want {
			t.Errorf("idleReaders(%d) with %d CPUs = %d, want %d", c.base, c.cpus, got, c.want)
		}
	}
}

func TestProcsShort(t *testing.T) {
	for _, c := range []struct{ procs, blocked, cpus, want int }{
		{12, 10, 2, 0}, // what SpareProcs sets for 10 readers on 2 CPUs
		{12, 11, 2, 1},
		{2, 10, 2, 10},
		{1, 5, 2, 5}, // one P: all of it is the CPU's
		{5, 0, 2, 0},
		{128, 36, 128, 0}, // 16 free for work are enough
		{40, 36, 128, 12},
		{66, 750, 2, 0}, // 150 devices' readers, their Ps capped
		{40, 750, 2, 26},
	} {
		if got := procsShort(c.procs, c.blocked, c.cpus); got != c.want {
			t.Errorf("procsShort(%d, %d) with %d CPUs = %d, want %d", c.procs, c.blocked, c.cpus, got, c.want)
		}
	}
}
