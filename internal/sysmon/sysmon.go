// Package sysmon tunes the Go runtime for a daemon whose threads wait in
// read(2) holding their Ps, as the CUSE readers do (package cuse): the
// Ps they need beside the machine's cores, and the timer slack of the
// runtime's monitor thread (sysmon), which otherwise wakes every 20 µs
// while they wait (docs/perf.md, "The request path" and "The runtime
// monitor's sleeps"). ucmd serve sets both, and so does make perf's Go
// floor (test/perf/gofloor), to run as the daemon runs.
package sysmon

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSlack is the timer slack ucmd gives the Go runtime's
// monitor thread (sysmon).
//
// The monitor sleeps 20 µs between looks at the Ps after any look that
// found something to do, and only after 50 idle looks in a row starts
// doubling the sleep towards 10 ms. ucmd's CUSE readers wait in read(2)
// holding their Ps (cuse.Server), and the monitor takes the P of one that
// waited 10 ms: under a steady trickle of commands that happens so often
// that the monitor spends most of its time in its 20 µs steps, each a
// nanosleep, a wake-up and clock reads. In the test VM that was 15% of the
// daemon's CPU during a connection loop (docs/perf.md, "The runtime
// monitor's sleeps"). A slack of 1 ms lets the kernel end each of those
// sleeps up to 1 ms late, so the 50 steps take 50 ms instead of 1 ms: the
// monitor's sleeps per connection fell by half. What waits on the monitor
// then waits up to 1 ms longer: a P held by a thread blocked in a system
// call while work is queued on it (the runtime's spinning threads usually
// take such work first), and the preemption of a goroutine running for
// 10 ms. It is set on the monitor only: on every thread it would also
// stretch the runtime's 3 µs pause before stealing a running P's next
// goroutine (runqgrab) to up to 1 ms. But a thread begins with its
// creator's slack, and the monitor starts threads when it hands a P taken
// from a blocked system call to a new one (retake, handoffp, startm); in
// the test VM about half the daemon's threads had the slack after a
// connection loop. Sweeping it off them every 2 s measured the same and
// woke an idle daemon twice as often, so they keep it (docs/perf.md, "The
// runtime monitor's sleeps"). go.dev/issue/18236 is the runtime's side:
// its tick is fixed, and too short for slow machines.
const DefaultSlack = time.Millisecond

// SetSlack sets the timer slack of the runtime's monitor thread to d (0:
// leaves it) and returns the thread's id; the threads it starts from then
// on inherit d. Writing another thread's /proc/TID/timerslack_ns takes
// CAP_SYS_NICE.
func SetSlack(d time.Duration) (int, error) {
	if d <= 0 {
		return 0, nil
	}
	tid, err := monitorThread()
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(slackPath(tid), []byte(strconv.FormatInt(d.Nanoseconds(), 10)), 0); err != nil {
		return tid, fmt.Errorf("timer slack of the runtime's monitor thread %d: %w", tid, err)
	}
	return tid, nil
}

// SpareProcs raises GOMAXPROCS so that blocked, the CUSE reader threads
// that can wait in read(2) at once, each holding one of the runtime's Ps
// (at most MaxReaderProcs of them counted), leave WorkProcs of them free:
// with no P left idle, the runtime's monitor thread retakes one from a
// blocked reader every 20 µs and wakes a thread for it, about 1.4 extra context switches per request in the test VM
// (docs/perf.md, "The request path"). The readers use no CPU while they
// wait, so the Ps they hold are not counted against the machine's cores.
// An explicit GOMAXPROCS is left as it is. base is the setting before
// serving, restored when serving ends; devices added and removed while
// serving change blocked. GOMAXPROCS never falls below base.
func SpareProcs(base, blocked int) (procs int, raised bool) {
	if os.Getenv("GOMAXPROCS") != "" || blocked <= 0 {
		return runtime.GOMAXPROCS(0), false
	}
	procs = spareProcs(base, blocked, runtime.NumCPU())
	runtime.GOMAXPROCS(procs)
	return procs, true
}

func spareProcs(base, blocked, cpus int) int {
	return max(base, readerProcs(blocked)+workProcs(base, cpus))
}

// MaxReaderProcs caps the Ps SpareProcs adds for waiting readers. A reader
// that waits keeps its P only until the runtime's monitor takes it back,
// after 10 ms at most; so the readers of a device idle that long hold no P,
// and the Ps provisioned for them only sit idle, where every P costs the
// whole process (WorkProcs). Sixty-four are the waiting readers of 7 to 12
// devices busy at once (5 to 9 a device): a host with more RDMA devices
// than that, as with SR-IOV functions, rarely has them all busy. In the
// test VM, 150 simulated devices got 752 Ps uncapped and 66 capped, and
// the capped daemon's CREATE_ID+DESTROY_ID pair on one device took 0.91
// times as long (docs/perf.md, "Ps for many devices"). Fewer devices than
// 7 to 12 are sized as before.
const MaxReaderProcs = 64

func readerProcs(blocked int) int { return min(blocked, MaxReaderProcs) }

// WorkProcs bounds the Ps SpareProcs keeps free for work beside the
// waiting readers: one per CPU, up to this many. Sixteen run sixteen
// commands or received MADs at once, each tens of µs of CPU (about 80 in
// the test VM under TCG), some 200,000 a second before one waits for a
// P. Every P costs the whole process, however idle: the scheduler's
// search for work and the garbage collector cover every P, and the
// runtime keeps a thread for many of them. One P per CPU on top of the
// readers' Ps, as before, gave a host of 224 CPUs and 10 RDMA devices
// 2,474 Ps; in the test VM booted with 32 vCPUs, 98 Ps against 34 made
// the daemon keep twice the threads and a third more memory
// (docs/perf.md, "Ps on a large host").
const WorkProcs = 16

func workProcs(procs, cpus int) int { return min(procs, cpus, WorkProcs) }

// IdleReaders is how many CUSE readers of each device may wait in read(2)
// at once (cuse.Config.IdleReaders) in a process whose GOMAXPROCS before
// SpareProcs is base: one per CPU among base, at least 4 and at most
// MaxIdleReaders. It counts CPUs, not Ps. cuse's own default, max(4,
// GOMAXPROCS), read after SpareProcs has added Ps for the first devices'
// readers, gave a device served later (a rescan) a reader for every P
// added; and under an explicit GOMAXPROCS, which SpareProcs leaves alone,
// it gave every device as many readers as there are Ps, enough to hold
// all of them while they wait: in the test VM, GOMAXPROCS=12 in the
// environment made a pair of commands from four client threads take
// 1.3-1.5 times as long as with the same 12 Ps set by SpareProcs
// (docs/perf.md, "The request path").
func IdleReaders(base int) int { return idleReaders(base, runtime.NumCPU()) }

func idleReaders(base, cpus int) int { return min(max(4, min(base, cpus)), MaxIdleReaders) }

// MaxIdleReaders caps IdleReaders. The kernel wakes one reader per
// request and a request holds it for tens of µs, so more than a few
// waiting readers only wait; a burst beyond them starts readers, each a
// goroutine whose buffer the Server keeps (libfuse3 runs at most 10
// threads a session by default). Without the cap, each device held one
// waiting reader, and one P, per CPU.
const MaxIdleReaders = 8

// ProcsShort is how many Ps procs lacks to keep WorkProcs free for work
// (one per CPU, up to WorkProcs) while blocked readers wait in read(2),
// each holding one (0 when none lacks): the Ps SpareProcs adds unless
// GOMAXPROCS is set. ucmd serve warns when an explicit GOMAXPROCS is
// short.
func ProcsShort(procs, blocked int) int { return procsShort(procs, blocked, runtime.NumCPU()) }

func procsShort(procs, blocked, cpus int) int {
	return max(0, readerProcs(blocked)+workProcs(procs, cpus)-procs)
}

// slackPath is where thread tid's timer slack is read and written, in ns.
func slackPath(tid int) string { return fmt.Sprintf("/proc/%d/timerslack_ns", tid) }

// monitorThread finds the runtime's monitor thread. The runtime starts it
// before any other (runtime.main, before the packages' init), so it has
// the lowest thread id after the main thread's, unless the kernel's ids
// wrapped around in between; and it waits in nanosleep, or in a futex wait
// with a timeout when every P is idle, where the runtime's idle threads
// wait in futex waits without one. The lowest id must show that in one of
// a few looks at its system call, or it is not taken for the monitor.
func monitorThread() (int, error) {
	pid := os.Getpid()
	tids, err := threads()
	if err != nil {
		return 0, err
	}
	tids = slices.DeleteFunc(tids, func(t int) bool { return t == pid })
	if len(tids) == 0 {
		return 0, errors.New("runtime monitor thread: the process has one thread")
	}
	tid := slices.Min(tids)
	look := func() (string, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", tid))
		return string(b), err
	}
	if err := awaitTimedWait(look, monitorLooks, time.Millisecond); err != nil {
		return 0, fmt.Errorf("runtime monitor thread: thread %d, the first after the main thread: %w", tid, err)
	}
	return tid, nil
}

// monitorLooks is how many times monitorThread looks at the thread.
const monitorLooks = 50

// awaitTimedWait looks up to n times, pause apart, until look shows a
// timed wait. One look at anything else proves nothing: the monitor also
// runs, and blocks briefly without a timeout on the scheduler's lock
// (lock2's futex wait) when another thread holds it, which a loaded
// machine's `go test -race` caught.
func awaitTimedWait(look func() (string, error), n int, pause time.Duration) error {
	last := ""
	for i := range n {
		line, err := look()
		if err != nil {
			return err
		}
		if monitorWait(line) == waitTimed {
			return nil
		}
		last = strings.TrimSpace(line)
		if i < n-1 {
			time.Sleep(pause)
		}
	}
	return fmt.Errorf("never in a timed wait in %d looks (last: %q)", n, last)
}

// threadWait is what a thread was doing when monitorThread looked.
type threadWait int

const (
	waitRunning threadWait = iota // not in a system call: look again
	waitTimed                     // the monitor's sleeps
	waitOther
)

// monitorWait classifies a /proc/TID/syscall line: "running", or the
// system call's number and arguments in hex ("202 0x... 0x80 0x0 0x0 ...";
// a futex's timeout is the fourth argument).
func monitorWait(line string) threadWait {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] == "running" || f[0] == "-1" {
		return waitRunning
	}
	nr, err := strconv.Atoi(f[0])
	if err != nil {
		return waitOther
	}
	switch nr {
	case unix.SYS_NANOSLEEP, unix.SYS_CLOCK_NANOSLEEP:
		return waitTimed
	case unix.SYS_FUTEX:
		if len(f) > 4 && f[4] != "0x0" {
			return waitTimed
		}
	}
	return waitOther
}

// threads lists the thread ids of the process.
func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
