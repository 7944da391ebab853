// Command madtrace reads the kernel's ftrace text (tracefs "trace") of a
// run with the ib_umad, ib_mad and sched tracepoints on, and prints where
// each MAD's time went between umad files, the time from each umad record
// to the next (with one connection at a time, the critical path: trips and
// turnarounds), which task waited how long for a CPU once woken, and which
// tasks had the CPUs (docs/perf.md, "Where a MAD waits"):
//
//	go run ./test/perf/madtrace [-check] TRACE...
//
// A MAD is followed by its TID's low 32 bits (the MAD layer replaces the
// high ones with the sending agent's) and its attribute ID, from umad's
// write(2) through the MAD layer's post to the QP and its receive
// completion on the other port to umad's read(2) there. -check (make
// perf-check) fails unless every trace holds at least one whole MAD.
package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The four points of a MAD's way, in order.
var points = [...]string{"ib_umad_write", "ib_mad_ib_send_mad", "ib_mad_recv_done_handler", "ib_umad_read_recv"}

var stageNames = [...]string{
	"umad write -> MAD layer posts it",
	"posted -> receive completion",
	"receive completion -> umad read",
	"umad write -> umad read",
}

// line is one trace record: "COMM-PID [CPU] FLAGS SECONDS: EVENT: ARGS".
var line = regexp.MustCompile(`^\s*(.+)-(\d+)\s+\[(\d+)\]\s+\S+\s+(\d+\.\d+): (\w+): (.*)$`)

var (
	tidArg  = regexp.MustCompile(`\btid 0x([0-9a-f]+)`)
	attrArg = regexp.MustCompile(`\battr_id 0x([0-9a-f]+)`)
	wakeArg = regexp.MustCompile(`\bcomm=(.*) pid=(\d+) `)
	swArg   = regexp.MustCompile(`prev_comm=(.*) prev_pid=(\d+) .* ==> next_comm=(.*) next_pid=(\d+)`)
)

type madKey struct {
	tid  uint32
	attr uint16
}

// report is what one trace holds.
type report struct {
	mads   int                        // MADs seen at all four points
	steps  map[string][]float64       // "read REQ -> write REP": µs between consecutive umad records
	stages [len(stageNames)][]float64 // µs, one per whole MAD
	wakes  map[string][]float64       // task class -> wake-up to running, µs
	cpu    map[string]float64         // task class -> running time, s
	ncpu   int
	span   float64 // s, first to last scheduler record
	seen   float64 // CPU-s accounted: each CPU from its first switch on
}

// class names a task without its instance: kworker/u5:2 and ksoftirqd/0
// are kworker and ksoftirqd; the idle task is idle.
func class(comm string, pid string) string {
	if pid == "0" {
		return "idle"
	}
	if i := strings.IndexAny(comm, "/:"); i > 0 {
		return comm[:i]
	}
	return comm
}

// onCPU is the task a CPU runs, since when.
type onCPU struct {
	pid   string
	since float64
}

func parse(r io.Reader) (*report, error) {
	rep := &report{wakes: map[string][]float64{}, cpu: map[string]float64{}, steps: map[string][]float64{}}
	var prevStep string // the last umad record, as "write REQ"
	var prevAt float64
	mads := map[madKey][]*[len(points)]float64{}
	woken := map[string]float64{} // pid -> when woken
	running := map[int]onCPU{}    // cpu -> task
	comm := map[string]string{}   // pid -> latest name
	first, last := -1.0, 0.0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		cpu, _ := strconv.Atoi(m[3])
		t, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			return nil, fmt.Errorf("time %q: %w", m[4], err)
		}
		event, args := m[5], m[6]
		switch event {
		case "sched_wakeup":
			if w := wakeArg.FindStringSubmatch(args); w != nil {
				woken[w[2]] = t
				comm[w[2]] = w[1]
			}
		case "sched_switch":
			s := swArg.FindStringSubmatch(args)
			if s == nil {
				continue
			}
			if first < 0 {
				first = t
			}
			last = t
			comm[s[2]] = s[1]
			if cur, ok := running[cpu]; ok {
				rep.cpu[class(comm[cur.pid], cur.pid)] += t - cur.since
			}
			running[cpu] = onCPU{s[4], t}
			if _, ok := comm[s[4]]; !ok {
				comm[s[4]] = s[3]
			}
			rep.ncpu = max(rep.ncpu, cpu+1)
			if w, ok := woken[s[4]]; ok {
				delete(woken, s[4])
				c := class(s[3], s[4])
				rep.wakes[c] = append(rep.wakes[c], (t-w)*1e6)
			}
		default:
			i := slices.Index(points[:], event)
			if i < 0 {
				continue
			}
			tm, am := tidArg.FindStringSubmatch(args), attrArg.FindStringSubmatch(args)
			if tm == nil || am == nil {
				return nil, fmt.Errorf("%s without a tid and attr_id: %q", event, args)
			}
			tid, err1 := strconv.ParseUint(tm[1], 16, 64)
			attr, err2 := strconv.ParseUint(am[1], 16, 16)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("%s: %w", event, err)
			}
			k := madKey{uint32(tid), uint16(attr)}
			if i == 0 || i == len(points)-1 {
				step := "write " + attrName(k.attr)
				if i > 0 {
					step = "read " + attrName(k.attr)
				}
				if prevStep != "" {
					key := prevStep + " -> " + step
					rep.steps[key] = append(rep.steps[key], (t-prevAt)*1e6)
				}
				prevStep, prevAt = step, t
			}
			if i == 0 { // a write starts a MAD (a resend starts another)
				mads[k] = append(mads[k], &[len(points)]float64{t, -1, -1, -1})
				continue
			}
			if ws := mads[k]; len(ws) > 0 && ws[len(ws)-1][i] < 0 {
				ws[len(ws)-1][i] = t
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, ws := range mads {
		for _, w := range ws {
			if slices.Contains(w[:], -1) {
				continue
			}
			rep.mads++
			for i := 0; i < 3; i++ {
				rep.stages[i] = append(rep.stages[i], (w[i+1]-w[i])*1e6)
			}
			rep.stages[3] = append(rep.stages[3], (w[3]-w[0])*1e6)
		}
	}
	for _, cur := range running { // still running at the last record
		rep.cpu[class(comm[cur.pid], cur.pid)] += last - cur.since
	}
	for _, v := range rep.cpu {
		rep.seen += v
	}
	if first >= 0 {
		rep.span = last - first
	}
	return rep, nil
}

// attrName names the CM's attributes (the MADs of a CM trace).
func attrName(a uint16) string {
	names := map[uint16]string{0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU",
		0x15: "DREQ", 0x16: "DREP", 0x17: "SIDR_REQ", 0x18: "SIDR_REP", 0x19: "LAP", 0x1a: "APR"}
	if n, ok := names[a]; ok {
		return n
	}
	return fmt.Sprintf("%#x", a)
}

// quantile of sorted xs, nearest rank.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[min(len(xs)-1, int(q*float64(len(xs))))]
}

// total is a name's sum (of µs, or of CPU seconds).
type total struct {
	name string
	v    float64
}

// sums adds up each name's values.
func sums(m map[string][]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, xs := range m {
		for _, x := range xs {
			out[k] += x
		}
	}
	return out
}

// byTotal lists m's names, the largest total first (ties by name, so the
// output is stable).
func byTotal(m map[string]float64) []total {
	out := make([]total, 0, len(m))
	for k, v := range m {
		out = append(out, total{k, v})
	}
	slices.SortFunc(out, func(a, b total) int {
		if c := cmp.Compare(b.v, a.v); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

func (rep *report) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s: %d whole MADs\n", name, rep.mads)
	fmt.Fprintf(w, "  %-34s %6s %7s %7s %7s\n", "stage (µs)", "n", "median", "p10", "p90")
	for i, s := range rep.stages {
		slices.Sort(s)
		fmt.Fprintf(w, "  %-34s %6d %7.0f %7.0f %7.0f\n", stageNames[i], len(s), quantile(s, 0.5), quantile(s, 0.1), quantile(s, 0.9))
	}
	// The steps between consecutive umad records: with one exchange at a
	// time, the critical path of the trace, trips and turnarounds alike.
	// Rare ones (fewer than one in 20 MADs) are left out of the table but
	// not out of the shares.
	stepSums := sums(rep.steps)
	var all float64
	for _, v := range stepSums {
		all += v
	}
	var steps []total
	for _, st := range byTotal(stepSums) {
		if len(rep.steps[st.name]) >= max(2, rep.mads/20) {
			steps = append(steps, st)
		}
	}
	if len(steps) > 0 {
		fmt.Fprintf(w, "  %-34s %6s %7s %7s %7s %6s\n", "umad record -> next one (µs)", "n", "median", "p10", "p90", "share")
	}
	for _, st := range steps[:min(len(steps), 12)] {
		xs := rep.steps[st.name]
		slices.Sort(xs)
		fmt.Fprintf(w, "  %-34s %6d %7.0f %7.0f %7.0f %5.0f%%\n", st.name, len(xs), quantile(xs, 0.5), quantile(xs, 0.1), quantile(xs, 0.9), 100*st.v/all)
	}
	ws := byTotal(sums(rep.wakes))
	fmt.Fprintf(w, "  %-34s %6s %7s %7s %9s\n", "woken -> running (µs), by task", "n", "median", "p90", "total ms")
	for _, t := range ws[:min(len(ws), 8)] {
		xs := rep.wakes[t.name]
		slices.Sort(xs)
		fmt.Fprintf(w, "  %-34s %6d %7.0f %7.0f %9.1f\n", t.name, len(xs), quantile(xs, 0.5), quantile(xs, 0.9), t.v/1e3)
	}
	if rep.seen > 0 {
		cs := byTotal(rep.cpu)
		var parts []string
		for _, c := range cs[:min(len(cs), 8)] {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", c.name, 100*c.v/rep.seen))
		}
		fmt.Fprintf(w, "  CPU time (%d CPUs, %.0f ms): %s\n", rep.ncpu, rep.span*1e3, strings.Join(parts, ", "))
	}
}

func main() {
	check := flag.Bool("check", false, "fail unless every trace holds a whole MAD")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: madtrace [-check] TRACE...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "madtrace:", err)
			os.Exit(1)
		}
		rep, err := parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "madtrace: %s: %v\n", name, err)
			os.Exit(1)
		}
		rep.write(os.Stdout, name)
		if *check && rep.mads == 0 {
			fmt.Fprintf(os.Stderr, "madtrace: %s: no MAD seen at all four points\n", name)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
