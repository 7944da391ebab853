package main

import (
	"math"
	"os"
	"strings"
	"testing"
)

// testdata/one-mad.txt is 3 ms of a real trace (the test VM, CM-only
// connections through ucmd): one MAD whole, parts of two others.
func TestOneMAD(t *testing.T) {
	f, err := os.Open("testdata/one-mad.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if rep.mads != 1 {
		t.Fatalf("whole MADs = %d, want 1", rep.mads)
	}
	// ib_umad_write 11.778476, ib_mad_ib_send_mad 11.779056,
	// ib_mad_recv_done_handler 11.779978, ib_umad_read_recv 11.780913
	want := []float64{580, 922, 935, 2437}
	for i, w := range want {
		if got := rep.stages[i]; len(got) != 1 || math.Abs(got[0]-w) > 0.5 {
			t.Errorf("%s = %v µs, want %v", stageNames[i], got, w)
		}
	}
	// ksoftirqd/0 woken at 11.779097 by the write, on its CPU at 11.779389
	if got := rep.wakes["ksoftirqd"]; len(got) != 1 || math.Abs(got[0]-292) > 0.5 {
		t.Errorf("ksoftirqd wake-ups = %v µs, want [292]", got)
	}
	if rep.ncpu != 2 {
		t.Errorf("CPUs = %d, want 2", rep.ncpu)
	}
}

// A resend (a second write of the same TID and attribute) starts a MAD
// of its own; one that never arrives is not counted.
func TestResendAndLoss(t *testing.T) {
	const tr = `
 ucmd-1 [000] ..... 1.000000: ib_umad_write: 0:1 MAD: tid 0x00000000df383b53 attr_id 0x0010 attr_mod 0x0
 ucmd-1 [000] d..1. 1.000100: ib_mad_ib_send_mad: 0:1 QP1 tid 0x8df383b53 attr_id 0x10 attr_mod 0x0
 ucmd-1 [000] ..... 1.100000: ib_umad_write: 0:1 MAD: tid 0x00000000df383b53 attr_id 0x0010 attr_mod 0x0
 ucmd-1 [000] d..1. 1.100200: ib_mad_ib_send_mad: 0:1 QP1 tid 0x8df383b53 attr_id 0x10 attr_mod 0x0
 kworker/u5:0-67 [001] ..... 1.100500: ib_mad_recv_done_handler: 1:1 QP1 tid 0x00000008df383b53 attr_id 0x0010 attr_mod 0x0
 ucmd-2 [001] ..... 1.101000: ib_umad_read_recv: 1:1 MAD: tid 0x00000008df383b53 attr_id 0x0010 attr_mod 0x0
`
	rep, err := parse(strings.NewReader(tr))
	if err != nil {
		t.Fatal(err)
	}
	if rep.mads != 1 {
		t.Fatalf("whole MADs = %d, want 1 (the resend)", rep.mads)
	}
	if got := rep.stages[3][0]; math.Abs(got-1000) > 0.5 {
		t.Errorf("write -> read = %v µs, want 1000 (from the resend)", got)
	}
	// the steps between umad records: write, write again, read
	for k, w := range map[string]float64{"write REQ -> write REQ": 100000, "write REQ -> read REQ": 1000} {
		if got := rep.steps[k]; len(got) != 1 || math.Abs(got[0]-w) > 0.5 {
			t.Errorf("step %q = %v µs, want [%v]", k, got, w)
		}
	}
	if len(rep.steps) != 2 {
		t.Errorf("steps = %v, want only those two", rep.steps)
	}
}

func TestMalformedMADRecord(t *testing.T) {
	_, err := parse(strings.NewReader(" ucmd-1 [000] ..... 1.0: ib_umad_write: 0:1 no header\n"))
	if err == nil {
		t.Fatal("a umad record without tid and attr_id parsed")
	}
}

func TestClass(t *testing.T) {
	for _, c := range []struct{ comm, pid, want string }{
		{"kworker/u5:2", "207", "kworker"},
		{"ksoftirqd/0", "14", "ksoftirqd"},
		{"swapper/1", "0", "idle"},
		{"ucmd", "172", "ucmd"},
	} {
		if got := class(c.comm, c.pid); got != c.want {
			t.Errorf("class(%q, %s) = %q, want %q", c.comm, c.pid, got, c.want)
		}
	}
}

// Each CPU's time is counted from its first switch to the last record of
// the trace, and given to whoever had the CPU.
func TestCPUTime(t *testing.T) {
	const tr = `
 <idle>-0 [000] d..2. 1.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=a next_pid=5 next_prio=120
 <idle>-0 [001] dNh4. 1.050000: sched_wakeup: comm=b pid=6 prio=120 target_cpu=001
 <idle>-0 [001] d..2. 1.100000: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=b next_pid=6 next_prio=120
 a-5 [000] d..2. 1.300000: sched_switch: prev_comm=a prev_pid=5 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
 b-6 [001] d..2. 1.500000: sched_switch: prev_comm=b prev_pid=6 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
`
	rep, err := parse(strings.NewReader(tr))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"a": 0.3, "b": 0.4, "idle": 0.2}
	for c, w := range want {
		if got := rep.cpu[c]; math.Abs(got-w) > 1e-9 {
			t.Errorf("CPU time of %s = %v s, want %v", c, got, w)
		}
	}
	if math.Abs(rep.seen-0.9) > 1e-9 || math.Abs(rep.span-0.5) > 1e-9 || rep.ncpu != 2 {
		t.Errorf("seen %v s, span %v s, %d CPUs; want 0.9, 0.5, 2", rep.seen, rep.span, rep.ncpu)
	}
	if got := rep.wakes["b"]; len(got) != 1 || math.Abs(got[0]-50000) > 0.5 {
		t.Errorf("b woken -> running = %v µs, want [50000]", got)
	}
}
