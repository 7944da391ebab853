// Command summarize turns the measurement lines of test/perf/guest.sh (one
// boot of the test VM) into the ratio table of docs/perf.md and its JSON.
//
//	go run ./test/perf/summarize [-check] [-json FILE] < bin/perf/raw.txt
//	go run ./test/perf/summarize -ab [-check] [-json FILE] < bin/perf-ab/raw.txt
//
// -ab reads test/perf/ab-guest.sh's lines instead (two daemons, "base"
// and "new", taking turns) and reports new ÷ base paired by round, and in
// how many rounds new did better.
//
// Every ratio is computed inside one repetition (adjacent measurements of
// the same boot) and then reported as min, median and max over the
// repetitions. -check (make perf-check) fails unless every figure got a
// value; it applies no thresholds: CI machines are too noisy for them.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// sample is one measurement line: its tool, label and key=value fields.
type sample struct {
	rep    int
	tool   string
	label  string
	fields map[string]string
}

func (s sample) num(key string) (float64, bool) {
	v, ok := s.fields[key]
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
}

// parse reads guest.sh's lines ("rep=R TOOL label=L k=v ..."); other
// lines (the guest's log) are ignored.
func parse(r io.Reader) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || !strings.HasPrefix(f[0], "rep=") {
			continue
		}
		rep, err := strconv.Atoi(strings.TrimPrefix(f[0], "rep="))
		if err != nil {
			return nil, fmt.Errorf("line %q: bad repetition: %w", sc.Text(), err)
		}
		s := sample{rep: rep, tool: f[1], fields: map[string]string{}}
		for _, kv := range f[2:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("line %q: field %q is not key=value", sc.Text(), kv)
			}
			s.fields[k] = v
		}
		s.label = s.fields["label"]
		if s.label == "" {
			return nil, fmt.Errorf("line %q: no label", sc.Text())
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// rep is one repetition's measurements, by label and thread count.
type rep map[string]sample

func key(label string, threads string) string {
	if threads == "" {
		return label
	}
	return label + "/t" + threads
}

func byRep(samples []sample) map[int]rep {
	reps := map[int]rep{}
	for _, s := range samples {
		if reps[s.rep] == nil {
			reps[s.rep] = rep{}
		}
		reps[s.rep][key(s.label, s.fields["threads"])] = s
	}
	return reps
}

// figure is one row of the table: a value computed from one repetition.
type figure struct {
	Name string `json:"name"`
	What string `json:"what"`
	Goal string `json:"goal,omitempty"`
	Once bool   `json:"once,omitempty"` // measured once a boot, in its last repetition
	// Better is "lower" or "higher" for a new ÷ base figure of -ab:
	// which side of 1 is new doing better, counted in NBetter.
	Better  string `json:"better,omitempty"`
	NBetter int    `json:"n_better,omitempty"`
	value   func(rep) (float64, bool)
	N       int       `json:"n"`
	Values  []float64 `json:"values"`
	Min     float64   `json:"min"`
	Median  float64   `json:"median"`
	Max     float64   `json:"max"`
}

// field is a measured value; ratio, a quotient of two in one repetition.
func field(k, f string) func(rep) (float64, bool) {
	return func(r rep) (float64, bool) {
		s, ok := r[k]
		if !ok {
			return 0, false
		}
		return s.num(f)
	}
}

func ratio(num, den func(rep) (float64, bool)) func(rep) (float64, bool) {
	return func(r rep) (float64, bool) {
		a, ok1 := num(r)
		b, ok2 := den(r)
		if !ok1 || !ok2 || b == 0 {
			return 0, false
		}
		return a / b, true
	}
}

// per turns a rate into the time of one (1e6 / rate: µs from per-second
// figures); times scales a value.
func per(f func(rep) (float64, bool)) func(rep) (float64, bool) {
	return func(r rep) (float64, bool) {
		v, ok := f(r)
		if !ok || v == 0 {
			return 0, false
		}
		return 1e6 / v, true
	}
}

func times(k float64, f func(rep) (float64, bool)) func(rep) (float64, bool) {
	return func(r rep) (float64, bool) {
		v, ok := f(r)
		return k * v, ok
	}
}

// over applies agg to values of one repetition, which must all be there.
func over(agg func([]float64) float64, fs ...func(rep) (float64, bool)) func(rep) (float64, bool) {
	return func(r rep) (float64, bool) {
		v := make([]float64, 0, len(fs))
		for _, f := range fs {
			x, ok := f(r)
			if !ok {
				return 0, false
			}
			v = append(v, x)
		}
		return agg(v), true
	}
}

// sum adds values of one repetition; medianOf is their median.
func sum(fs ...func(rep) (float64, bool)) func(rep) (float64, bool) { return over(total, fs...) }

func medianOf(fs ...func(rep) (float64, bool)) func(rep) (float64, bool) { return over(median, fs...) }

func total(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

func product(a, b func(rep) (float64, bool)) func(rep) (float64, bool) {
	return func(r rep) (float64, bool) {
		x, ok1 := a(r)
		y, ok2 := b(r)
		return x * y, ok1 && ok2
	}
}

// ceiling is the most connections per second the guest's CPUs carry
// when each costs cpuPerConn µs of their time: a rate cannot pass it.
func ceiling(cpuPerConn func(rep) (float64, bool)) func(rep) (float64, bool) {
	return ratio(times(1e6, field("guest", "cpus")), cpuPerConn)
}

// madsPerConn are the MADs of a CM-only connection: REQ, REP, RTU, DREQ,
// DREP.
const madsPerConn = 5

// The critical path of a CM-only connection one at a time, with clients
// that wait in GET_EVENT as libibcm's do (docs/perf.md, "A connection at
// the floors"): the REQ, REP, DREQ and DREP trips (the RTU's overlaps the
// DREQ's), and 7 CUSE exchanges' worth of turnarounds: CREATE_ID,
// SEND_RTU and DESTROY_ID whole, and the request half of each of the four
// SENDs that start a trip and the reply half of each of the four
// GET_EVENTs that a trip ends.
const (
	seqPathTrips     = 4
	seqPathExchanges = 7
)

func figures() []*figure {
	pair := pairTime
	rate := func(l, t string) func(rep) (float64, bool) { return field(key(l, t), "pairs_per_s") }
	cpu := func(l, t string) func(rep) (float64, bool) { return field(key(l, t), "daemon_cpu_us_per_cmd") }
	conns := func(l string) func(rep) (float64, bool) { return field(l, "conn_per_s") }
	// a burst's connect rate: start → all ESTABLISHED
	burst := func(l string) func(rep) (float64, bool) { return field(l, "burst_conn_per_s") }
	// ucm commands of one CM-only connection: the active client's and the
	// passive server's, each from its own count
	cmdsPerConn := sum(ratio(field("u-win50", "cmds"), field("u-win50", "n")), ratio(field("u-srv", "cmds"), field("u-srv", "n")))
	guestCPU := func(l string) func(rep) (float64, bool) { return field(l, "guest_cpu_us") }
	// the median latency of one of the active client's commands inside
	// the CM-only connections one at a time (ucmclient --cmd-times)
	seqCmd := func(cmd string) func(rep) (float64, bool) { return field("u-seq-"+cmd, "p50_us") }
	activeSends := []func(rep) (float64, bool){seqCmd("SEND_REQ"), seqCmd("SEND_RTU"), seqCmd("SEND_DREQ")}
	figs := []*figure{
		{Name: "cmd_pair_ratio_t1", What: "CREATE_ID+DESTROY_ID ÷ two no-op libfuse3 CUSE writes, 1 client thread", Goal: "≤ 1.4",
			value: ratio(pair("ucmd", "1"), pair("floor", "1"))},
		{Name: "cmd_pair_ratio_t4", What: "same, 4 client threads on one fd", Goal: "≤ 1.25",
			value: ratio(pair("ucmd", "4"), pair("floor", "4"))},
	}
	// Every ucm command copies its answer into the caller at least once:
	// against the libfuse3 floor that makes the same copy, what is left
	// is ucmd's own. The Go floor is ucmd's CUSE server making that copy
	// and nothing else: what the server costs against libfuse's loop,
	// and what ucm's commands add to it.
	figs = append(figs, pairRatios("pvw_floor_ratio", "libfuse3 floor with one process_vm_writev ÷ without", "floorpvw", "floor")...)
	figs = append(figs, pairRatios("cmd_pair_pvw_ratio", "CREATE_ID+DESTROY_ID ÷ two libfuse3 writes with process_vm_writev", "ucmd", "floorpvw")...)
	figs = append(figs, pairRatios("gofloor_ratio", "Go floor ÷ two no-op libfuse3 writes: what ucmd's CUSE server reaches with a device that does nothing but the copy", "gofloor", "floor")...)
	figs = append(figs, pairRatios("gofloor_pvw_ratio", "Go floor (ucmd's CUSE server, a no-op device making the same copy) ÷ the libfuse3 floor with process_vm_writev", "gofloor", "floorpvw")...)
	figs = append(figs, pairRatios("cmd_pair_gofloor_ratio", "CREATE_ID+DESTROY_ID ÷ two writes of the Go floor (what ucm's commands add)", "ucmd", "gofloor")...)
	return append(figs, []*figure{
		{Name: "ucmd_us_per_pair_t1", What: "ucmd: µs per CREATE_ID+DESTROY_ID pair, 1 thread", value: pair("ucmd", "1")},
		{Name: "floor_us_per_pair_t1", What: "libfuse3 floor: µs per two writes, 1 thread", value: pair("floor", "1")},
		{Name: "cpu_ratio_t1", What: "daemon CPU per command: ucmd ÷ libfuse3, 1 client thread", Goal: "≤ 2.5",
			value: ratio(cpu("ucmd", "1"), cpu("floor", "1"))},
		{Name: "ucmd_cpu_us_per_cmd_t1", What: "ucmd: daemon CPU µs per command, 1 thread", value: cpu("ucmd", "1")},
		{Name: "floor_cpu_us_per_cmd_t1", What: "libfuse3: daemon CPU µs per command, 1 thread", value: cpu("floor", "1")},
		{Name: "floorpvw_cpu_us_per_cmd_t1", What: "libfuse3 with process_vm_writev: daemon CPU µs per command, 1 thread", value: cpu("floorpvw", "1")},
		{Name: "gofloor_cpu_us_per_cmd_t1", What: "Go floor: daemon CPU µs per command, 1 thread", value: cpu("gofloor", "1")},
		{Name: "ucmd_ctxsw_per_cmd_t1", What: "ucmd: context switches per command (all its threads), 1 thread", Goal: "report",
			value: field(key("ucmd", "1"), "ctxsw_per_cmd")},
		{Name: "floor_ctxsw_per_cmd_t1", What: "libfuse3: context switches per command, 1 thread",
			value: field(key("floor", "1"), "ctxsw_per_cmd")},
		{Name: "ucmd_scaling_t4", What: "ucmd: pairs/s with 4 client threads ÷ 1 thread", value: ratio(rate("ucmd", "4"), rate("ucmd", "1"))},
		{Name: "floor_scaling_t4", What: "libfuse3: writes/s with 4 client threads ÷ 1 thread", value: ratio(rate("floor", "4"), rate("floor", "1"))},
		{Name: "scaling_ratio_t4", What: "ucmd's 4-thread scaling ÷ libfuse3's", Goal: "≥ 0.9",
			value: ratio(ratio(rate("ucmd", "4"), rate("ucmd", "1")), ratio(rate("floor", "4"), rate("floor", "1")))},
		{Name: "conn_ratio_seq", What: "RC connections/s, CM only: ucmd ÷ kernel rdma_cm, one at a time", Goal: "≥ 0.5",
			value: ratio(conns("u-seq"), conns("k-seq"))},
		{Name: "conn_ratio_win50", What: "same, 50 in flight", Goal: "≥ 0.4",
			value: ratio(conns("u-win50"), conns("k-win50"))},
		{Name: "conn_ratio_seq_qp", What: "same with an RC QP on both sides, no data, one at a time", Goal: "≥ 0.5",
			value: ratio(conns("u-seq-qp"), conns("k-seq-qp"))},
		{Name: "ucmd_conn_per_s_seq", What: "ucmd: connections/s, CM only, one at a time", value: conns("u-seq")},
		{Name: "kernel_conn_per_s_seq", What: "kernel rdma_cm: connections/s, CM only, one at a time", value: conns("k-seq")},
		{Name: "ucmd_conn_per_s_win50", What: "ucmd: connections/s, CM only, 50 in flight", value: conns("u-win50")},
		{Name: "kernel_conn_per_s_win50", What: "kernel rdma_cm: connections/s, CM only, 50 in flight", value: conns("k-win50")},
		{Name: "conn_ratio_burst50", What: "same, 50 at once: start → all ESTABLISHED", Goal: "report",
			value: ratio(burst("u-burst50"), burst("k-burst50"))},
		{Name: "ucmd_burst50_connect_per_s", What: "ucmd: 50 at once, start → all ESTABLISHED, conn/s",
			value: burst("u-burst50")},
		{Name: "kernel_burst50_connect_per_s", What: "kernel rdma_cm: 50 at once, start → all ESTABLISHED, conn/s",
			value: burst("k-burst50")},
		{Name: "ucmd_conn_per_s_seq_qp", What: "ucmd: connections/s with QPs, one at a time", value: conns("u-seq-qp")},
		{Name: "kernel_conn_per_s_seq_qp", What: "kernel rdma_cm: connections/s with QPs, one at a time", value: conns("k-seq-qp")},
		{Name: "conn_ratio_win50_qp", What: "with QPs: ucmd ÷ kernel rdma_cm, 50 in flight", Goal: "report",
			value: ratio(conns("u-win50-qp"), conns("k-win50-qp"))},
		{Name: "conn_ratio_burst50_qp", What: "with QPs: same, 50 at once: start → all ESTABLISHED", Goal: "report",
			value: ratio(burst("u-burst50-qp"), burst("k-burst50-qp"))},
		{Name: "ucmd_conn_per_s_win50_qp", What: "ucmd: connections/s with QPs, 50 in flight", value: conns("u-win50-qp")},
		{Name: "kernel_conn_per_s_win50_qp", What: "kernel rdma_cm: connections/s with QPs, 50 in flight", value: conns("k-win50-qp")},
		{Name: "ucmd_seq_create_id_us", What: "inside a CM-only connection, one at a time: the active client's CREATE_ID, µs (median)",
			value: seqCmd("CREATE_ID")},
		{Name: "ucmd_seq_send_over_create", What: "same: a SEND (median of SEND_REQ's, SEND_RTU's, SEND_DREQ's medians) ÷ a CREATE_ID",
			value: ratio(medianOf(activeSends...), seqCmd("CREATE_ID"))},
		{Name: "ucmd_seq_active_sends_share", What: "same: the active client's three SENDs (medians) ÷ a connection's time",
			value: ratio(sum(activeSends...), per(conns("u-seq")))},
		{Name: "umad_us_per_trip", What: "umad floor: one CM MAD, write(2) on rxe0's umad file → read(2) on rxe1's, µs",
			value: field("umad", "us_per_trip")},
		{Name: "kernel_us_per_conn_seq", What: "kernel rdma_cm: µs per connection, CM only, one at a time",
			value: per(conns("k-seq"))},
		{Name: "conn_ratio_seq_umad_bound", What: "bound on the CM-only ratio for any CM whose 5 MADs per connection go through umad: kernel µs per connection ÷ 5 umad trips",
			value: ratio(per(conns("k-seq")), times(madsPerConn, field("umad", "us_per_trip")))},
		{Name: "conn_ratio_seq_floor_model", What: "the CM-only ratio, one at a time, of a CM at the floors: kernel µs per connection ÷ its critical path of 4 umad trips and 7 CUSE exchanges at the libfuse3 floor with process_vm_writev",
			value: ratio(per(conns("k-seq")), sum(times(seqPathTrips, field("umad", "us_per_trip")), times(seqPathExchanges/2.0, pair("floorpvw", "1"))))},
		{Name: "conn_ratio_seq_floor_chain", What: "the same, measured: a chain of the 4 umad trips and the 7 CUSE writes on the libfuse3 floor with process_vm_writev, in a connection's order (umadping -x) ÷ the kernel",
			value: ratio(conns("floor-chain"), conns("k-seq"))},
		{Name: "floor_chain_us_per_conn", What: "that chain: µs per connection", value: field("floor-chain", "us_per_conn")},
		{Name: "kernel_cpu_us_per_conn_win50", What: "kernel rdma_cm: the guest's busy CPU per connection, CM only, 50 in flight, µs",
			value: guestCPU("k-win50")},
		{Name: "ucmd_cpu_us_per_conn_win50", What: "ucmd: the guest's busy CPU per connection, CM only, 50 in flight, µs",
			value: guestCPU("u-win50")},
		{Name: "ucmd_daemon_cpu_us_per_conn_win50", What: "ucmd: of which the daemon's, µs",
			value: field("u-win50", "daemon_cpu_us")},
		{Name: "ucmd_cmds_per_conn", What: "ucm commands per CM-only connection, both clients",
			value: cmdsPerConn},
		{Name: "umad_mads_per_s_w50", What: "umad: MADs/s through rxe0 ↔ rxe1 with 50 in flight (both ways)",
			value: field("umad-w50", "mads_per_s")},
		{Name: "umad_cpu_us_per_mad_w50", What: "umad: the guest's busy CPU per MAD with 50 in flight, µs",
			value: guestCPU("umad-w50")},
		{Name: "floor_cpu_us_per_write_t4", What: "libfuse3 floor: the guest's busy CPU per write, 4 client threads, µs",
			value: guestCPU(key("floor-conn", "4"))},
		{Name: "conn_ratio_win50_umad_bound", What: "bound on the 50-in-flight ratio from umad's capacity alone: MADs/s with 50 in flight ÷ 5 ÷ the kernel's connections/s",
			value: ratio(times(1.0/madsPerConn, field("umad-w50", "mads_per_s")), conns("k-win50"))},
		{Name: "conn_ratio_win50_cpu_bound", What: "bound on the 50-in-flight ratio for any CM behind CUSE and umad: the guest's CPUs ÷ (5 umad MADs + the commands, each at its floor's CPU) ÷ the kernel's connections/s",
			value: ratio(ceiling(sum(times(madsPerConn, guestCPU("umad-w50")), product(cmdsPerConn, guestCPU(key("floor-conn", "4"))))), conns("k-win50"))},
		{Name: "ucmd_win50_cpu_ceiling", What: "ucmd's own ceiling there at its CPU per connection: the guest's CPUs ÷ ucmd's CPU per connection ÷ the kernel's connections/s",
			value: ratio(ceiling(guestCPU("u-win50")), conns("k-win50"))},
		{Name: "ids_cost_ratio", What: "per-command cost with many live ids ÷ with 1,000", Goal: "≤ 1.2",
			value: ratio(field(key("ids-many", "1"), "us_per_pair"), field(key("ids-1k", "1"), "us_per_pair"))},
		{Name: "rss_bytes_per_id", What: "ucmd RSS growth per idle id (many-ids prefill, in a fresh daemon)",
			value: field(key("ids-many", "1"), "rss_bytes_per_id")},
		{Name: "rss_bytes_per_conn", What: "ucmd RSS growth per established connection, both ends, from half to all of the held ones (fresh daemon, no THP)",
			Once: true, value: field("mem-conn", "rss_bytes_per_conn")},
	}...)
}

// pairRatios is two rows, at 1 and at 4 client threads: the time per
// pair of num ÷ that of den, each in one repetition.
func pairRatios(name, what, num, den string) []*figure {
	return []*figure{
		{Name: name + "_t1", What: what + ", 1 client thread", value: ratio(pairTime(num, "1"), pairTime(den, "1"))},
		{Name: name + "_t4", What: "same, 4 client threads", value: ratio(pairTime(num, "4"), pairTime(den, "4"))},
	}
}

// pairTime is cmdbench's µs per pair of the run labelled l with t client
// threads.
func pairTime(l, t string) func(rep) (float64, bool) { return field(key(l, t), "us_per_pair") }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// summary is the JSON document.
type summary struct {
	Reps    int       `json:"samples"` // distinct sample numbers (rep=) in the input
	Figures []*figure `json:"figures"`
	// PerThread is the context switches per command of each busy daemon
	// thread in the last repetition, busiest first.
	PerThread map[string]string `json:"ctxsw_per_thread_last_rep"`
}

func summarize(samples []sample) summary { return summarizeWith(samples, figures()) }

func summarizeWith(samples []sample, figs []*figure) summary {
	reps := byRep(samples)
	nums := make([]int, 0, len(reps))
	for n := range reps {
		nums = append(nums, n)
	}
	slices.Sort(nums)
	for _, f := range figs {
		f.Values = []float64{}
		for _, n := range nums {
			if v, ok := f.value(reps[n]); ok {
				f.Values = append(f.Values, v)
			}
		}
		f.N = len(f.Values)
		for _, v := range f.Values {
			if f.Better == "lower" && v < 1 || f.Better == "higher" && v > 1 {
				f.NBetter++
			}
		}
		if len(f.Values) > 0 {
			f.Min, f.Max, f.Median = slices.Min(f.Values), slices.Max(f.Values), median(f.Values)
		}
	}
	s := summary{Reps: len(nums), Figures: figs, PerThread: map[string]string{}}
	if len(nums) > 0 {
		for k, smp := range reps[nums[len(nums)-1]] {
			if v, ok := smp.fields["ctxsw_per_thread"]; ok {
				s.PerThread[k] = v
			}
		}
	}
	return s
}

func format(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func writeTable(w io.Writer, s summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "figure (one boot; n samples, each from adjacent measurements)\tn\tmedian\t[min, max]\tgoal\n")
	for _, f := range s.Figures {
		if len(f.Values) == 0 {
			fmt.Fprintf(tw, "%s\t0\tmissing\t\t%s\n", f.What, f.Goal)
			continue
		}
		goal := f.Goal
		if f.Better != "" {
			goal = fmt.Sprintf("new %s in %d of %d (sign test p = %.2f)", f.Better, f.NBetter, f.N, signTest(f.NBetter, f.N))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t[%s, %s]\t%s\n", f.What, f.N, format(f.Median), format(f.Min), format(f.Max), goal)
	}
	keys := make([]string, 0, len(s.PerThread))
	for k := range s.PerThread {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "context switches per command per busy thread, %s (last sample)\t\t%s\t\t\n", k, s.PerThread[k])
	}
	return tw.Flush()
}

// check reports every figure that got no value.
func check(s summary) error {
	var missing []string
	for _, f := range s.Figures {
		if len(f.Values) == 0 {
			missing = append(missing, f.Name)
		}
	}
	if s.Reps == 0 {
		return errors.New("no measurement lines in the input")
	}
	if len(missing) > 0 {
		return fmt.Errorf("figures without a value: %s", strings.Join(missing, ", "))
	}
	return nil
}

func main() {
	jsonPath := flag.String("json", "", "also write the summary as JSON to this file")
	checkOnly := flag.Bool("check", false, "fail unless every figure has a value (no thresholds)")
	ab := flag.Bool("ab", false, "two daemons in turn (test/perf/ab-guest.sh): new ÷ base")
	flag.Parse()
	samples, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "summarize:", err)
		os.Exit(1)
	}
	figs := figures()
	if *ab {
		figs = abFigures()
	}
	s := summarizeWith(samples, figs)
	if err := writeTable(os.Stdout, s); err != nil {
		fmt.Fprintln(os.Stderr, "summarize:", err)
		os.Exit(1)
	}
	if *jsonPath != "" {
		b, err := json.MarshalIndent(s, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "summarize: writing JSON:", err)
			os.Exit(1)
		}
	}
	if *checkOnly {
		if err := check(s); err != nil {
			fmt.Fprintln(os.Stderr, "summarize:", err)
			os.Exit(1)
		}
		fmt.Println("perf-check: every figure and the JSON were produced (no thresholds)")
	}
}
