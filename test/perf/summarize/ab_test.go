package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// -ab pairs new with base inside each round and counts the rounds where new
// did better, on the side of 1 that is better for each figure.
func TestABPairsByRound(t *testing.T) {
	in := `rep=1 cmdbench label=floor threads=1 us_per_pair=200
rep=1 cmdbench label=base threads=1 us_per_pair=300 daemon_cpu_us_per_cmd=100
rep=1 cmdbench label=new threads=1 us_per_pair=270 daemon_cpu_us_per_cmd=110
rep=1 ucmclient label=base-seq n=100 conn_per_s=100 daemon_cpu_us=5000
rep=1 ucmclient label=new-seq n=100 conn_per_s=110 daemon_cpu_us=4000
rep=2 cmdbench label=floor threads=1 us_per_pair=400
rep=2 cmdbench label=base threads=1 us_per_pair=600 daemon_cpu_us_per_cmd=100
rep=2 cmdbench label=new threads=1 us_per_pair=660 daemon_cpu_us_per_cmd=90
rep=2 ucmclient label=base-seq n=100 conn_per_s=100 daemon_cpu_us=5000
rep=2 ucmclient label=new-seq n=100 conn_per_s=120 daemon_cpu_us=6000
`
	samples, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	s := summarizeWith(samples, abFigures())
	got := map[string]*figure{}
	for _, f := range s.Figures {
		got[f.Name] = f
	}
	for _, c := range []struct {
		name    string
		values  []float64
		nBetter int
	}{
		{"ab_pair_t1", []float64{0.9, 1.1}, 1},
		{"ab_cpu_t1", []float64{1.1, 0.9}, 1},
		{"ab_conn_seq", []float64{1.1, 1.2}, 2},            // higher is better
		{"ab_conn_cpu_seq", []float64{0.8, 1.2}, 1},        // lower is better
		{"ab_new_pair_ratio_t1", []float64{1.35, 1.65}, 0}, // no pairing: no count
	} {
		f := got[c.name]
		if f == nil {
			t.Fatalf("no figure %s", c.name)
		}
		if len(f.Values) != len(c.values) || f.NBetter != c.nBetter {
			t.Errorf("%s: values %v, %d better; want %v, %d", c.name, f.Values, f.NBetter, c.values, c.nBetter)
			continue
		}
		for i, v := range c.values {
			if d := f.Values[i] - v; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: values %v, want %v", c.name, f.Values, c.values)
			}
		}
	}
	var buf bytes.Buffer
	if err := writeTable(&buf, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "new higher in 2 of 2 (sign test p = 0.50)") {
		t.Errorf("table does not count the rounds new did better:\n%s", buf.String())
	}
	if err := check(s); err == nil || !strings.Contains(err.Error(), "ab_pair_t4") {
		t.Errorf("check = %v, want the 4-thread figures named as missing", err)
	}
}

func TestSignTest(t *testing.T) {
	for _, c := range []struct {
		k, n int
		p    float64
	}{
		{6, 12, 1}, {0, 0, 1}, {10, 12, 0.0386}, {2, 12, 0.0386}, {12, 12, 0.000488}, {7, 10, 0.344},
	} {
		if got := signTest(c.k, c.n); math.Abs(got-c.p) > 0.0005 {
			t.Errorf("signTest(%d, %d) = %.4f, want %.4f", c.k, c.n, got, c.p)
		}
	}
}
