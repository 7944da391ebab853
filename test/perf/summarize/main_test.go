package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestSummarizeRealRun(t *testing.T) {
	f, err := os.Open("testdata/short.txt") // two repetitions of test/perf/guest.sh in one boot
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	samples, err := parse(f)
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(samples)
	if s.Reps != 2 {
		t.Fatalf("repetitions = %d, want 2", s.Reps)
	}
	if err := check(s); err != nil {
		t.Fatal(err)
	}
	for _, fig := range s.Figures {
		if len(fig.Values) != 2 {
			t.Errorf("%s: %d values, want one per repetition", fig.Name, len(fig.Values))
		}
		if fig.Min > fig.Median || fig.Median > fig.Max {
			t.Errorf("%s: min %v median %v max %v out of order", fig.Name, fig.Min, fig.Median, fig.Max)
		}
	}
	var buf bytes.Buffer
	if err := writeTable(&buf, s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "missing") {
		t.Errorf("table has a missing figure:\n%s", buf.String())
	}
}

func TestRatioIsPerRepetition(t *testing.T) {
	in := `rep=1 cmdbench label=ucmd threads=1 us_per_pair=300
rep=1 cmdbench label=floor threads=1 us_per_pair=200
rep=2 cmdbench label=ucmd threads=1 us_per_pair=600
rep=2 cmdbench label=floor threads=1 us_per_pair=300
guest log lines are ignored
`
	samples, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(samples)
	fig := s.Figures[0]
	if fig.Name != "cmd_pair_ratio_t1" {
		t.Fatalf("first figure %s", fig.Name)
	}
	// 1.5 and 2.0 (not 900/500 = 1.8 over pooled values)
	if len(fig.Values) != 2 || fig.Values[0] != 1.5 || fig.Values[1] != 2 || fig.Median != 1.75 {
		t.Fatalf("values %v median %v, want [1.5 2] 1.75", fig.Values, fig.Median)
	}
	if err := check(s); err == nil || !strings.Contains(err.Error(), "conn_ratio_seq") {
		t.Fatalf("check = %v, want the missing connection figures named", err)
	}
}

func TestParseRejectsBrokenLines(t *testing.T) {
	for _, in := range []string{"rep=x cmdbench label=a", "rep=1 cmdbench label=a junk", "rep=1 cmdbench k=v"} {
		if _, err := parse(strings.NewReader(in)); err == nil {
			t.Errorf("parse(%q) succeeded", in)
		}
	}
}
