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
	procs, raised := SpareProcs(base, 6)
	if !raised || procs != base+6 || runtime.GOMAXPROCS(0) != base+6 {
		t.Fatalf("SpareProcs(%d, 6) = %d, %v with GOMAXPROCS now %d; want %d, true", base, procs, raised, runtime.GOMAXPROCS(0), base+6)
	}
	// A device gone: its readers' Ps are given back.
	if procs, _ := SpareProcs(base, 2); procs != base+2 || runtime.GOMAXPROCS(0) != base+2 {
		t.Fatalf("SpareProcs(%d, 2) after 6 = %d with GOMAXPROCS now %d; want %d", base, procs, runtime.GOMAXPROCS(0), base+2)
	}
	runtime.GOMAXPROCS(base)
	t.Setenv("GOMAXPROCS", strconv.Itoa(base)) // the operator's choice stands
	if _, raised := SpareProcs(base, 6); raised || runtime.GOMAXPROCS(0) != base {
		t.Fatalf("SpareProcs with GOMAXPROCS set raised it to %d", runtime.GOMAXPROCS(0))
	}
}

func TestIdleReaders(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, c := range []struct{ base, want int }{
		{1, 4},
		{min(2, cpus), 4},
		// Ps beyond the CPUs (an explicit GOMAXPROCS, or one SpareProcs
		// raised) add no reader.
		{cpus + 10, max(4, cpus)},
		{cpus, max(4, cpus)},
	} {
		if got := IdleReaders(c.base); got != c.want {
			t.Errorf("IdleReaders(%d) with %d CPUs = %d, want %d", c.base, cpus, got, c.want)
		}
	}
}

func TestProcsShort(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, c := range []struct{ procs, blocked, want int }{
		{cpus + 10, 10, 0}, // what SpareProcs sets for 10 readers
		{cpus + 10, 11, 1},
		{cpus, 10, 10},
		{1, 5, 5}, // one P: all of it is the CPU's
		{cpus + 3, 0, 0},
	} {
		if got := ProcsShort(c.procs, c.blocked); got != c.want {
			t.Errorf("ProcsShort(%d, %d) with %d CPUs = %d, want %d", c.procs, c.blocked, cpus, got, c.want)
		}
	}
}
