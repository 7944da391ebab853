package main

import "math"

// abFigures are the figures of make perf-ab (test/perf/ab-guest.sh): the
// daemon "new" against the daemon "base", each figure new ÷ base within one
// round, where the two ran one after the other; then each daemon against
// the libfuse3 floor of its round, as make perf reports it.
func abFigures() []*figure {
	pair := pairTime
	cpu := func(l, t string) func(rep) (float64, bool) { return field(key(l, t), "daemon_cpu_us_per_cmd") }
	conns := func(l string) func(rep) (float64, bool) { return field(l, "conn_per_s") }
	connCPU := func(l string) func(rep) (float64, bool) { return field(l, "daemon_cpu_us") }
	paired := func(name, what, better string, f func(string) func(rep) (float64, bool)) *figure {
		return &figure{Name: name, What: what, Better: better, value: ratio(f("new"), f("base"))}
	}
	figs := []*figure{
		paired("ab_pair_t1", "new ÷ base: µs per CREATE_ID+DESTROY_ID pair, 1 client thread", "lower",
			func(d string) func(rep) (float64, bool) { return pair(d, "1") }),
		paired("ab_pair_t4", "same, 4 client threads", "lower",
			func(d string) func(rep) (float64, bool) { return pair(d, "4") }),
		paired("ab_cpu_t1", "new ÷ base: daemon CPU per command, 1 client thread", "lower",
			func(d string) func(rep) (float64, bool) { return cpu(d, "1") }),
		paired("ab_cpu_t4", "same, 4 client threads", "lower",
			func(d string) func(rep) (float64, bool) { return cpu(d, "4") }),
		paired("ab_conn_seq", "new ÷ base: CM-only connections/s, one at a time", "higher",
			func(d string) func(rep) (float64, bool) { return conns(d + "-seq") }),
		paired("ab_conn_win50", "same, 50 in flight", "higher",
			func(d string) func(rep) (float64, bool) { return conns(d + "-win50") }),
		paired("ab_conn_cpu_seq", "new ÷ base: daemon CPU per connection, one at a time", "lower",
			func(d string) func(rep) (float64, bool) { return connCPU(d + "-seq") }),
		paired("ab_conn_cpu_win50", "same, 50 in flight", "lower",
			func(d string) func(rep) (float64, bool) { return connCPU(d + "-win50") }),
	}
	for _, d := range []string{"base", "new"} {
		figs = append(figs,
			&figure{Name: "ab_" + d + "_pair_ratio_t1", What: d + ": pair ÷ two libfuse3 writes, 1 client thread",
				value: ratio(pair(d, "1"), pair("floor", "1"))},
			&figure{Name: "ab_" + d + "_pair_ratio_t4", What: d + ": same, 4 client threads",
				value: ratio(pair(d, "4"), pair("floor", "4"))},
			&figure{Name: "ab_" + d + "_conn_per_s_seq", What: d + ": CM-only connections/s, one at a time",
				value: conns(d + "-seq")},
			&figure{Name: "ab_" + d + "_conn_per_s_win50", What: d + ": same, 50 in flight",
				value: conns(d + "-win50")},
		)
	}
	return figs
}

// signTest is the two-sided p-value of k rounds of n going one way when
// either way is as likely (the binomial sign test): how often two identical
// daemons split at least this unevenly. Ties count as not better, which
// makes the test conservative only in new's favour.
func signTest(k, n int) float64 {
	if n == 0 {
		return 1
	}
	extreme := min(k, n-k)
	tail := 0.0
	for i := 0; i <= extreme; i++ {
		tail += binom(n, i)
	}
	return math.Min(1, 2*tail/math.Pow(2, float64(n)))
}

func binom(n, k int) float64 {
	c := 1.0
	for i := 1; i <= k; i++ {
		c = c * float64(n-k+i) / float64(i)
	}
	return c
}
