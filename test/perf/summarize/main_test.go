package main

import (
	"bytes"
	"math"
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
		if want := map[bool]int{false: 2, true: 1}[fig.Once]; len(fig.Values) != want {
			t.Errorf("%s: %d values, want %d (one per repetition, or one a boot)", fig.Name, len(fig.Values), want)
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

// The 50-in-flight bound is the rate the guest's CPUs would carry if a
// connection cost what it costs at the floors (5 MADs through umad and
// the commands both clients counted, each at the CUSE floor's CPU per
// write), over the kernel's rate; all from one repetition.
func TestWin50CPUBound(t *testing.T) {
	in := `rep=1 guest label=guest cpus=2
rep=2 guest label=guest cpus=2
rep=1 rdmaconn label=k-win50 conn_per_s=1000 guest_cpu_us=2000
rep=1 umadping label=umad-w50 mads_per_s=4000 guest_cpu_us=200
rep=1 cmdbench label=floor-conn threads=4 guest_cpu_us=100
rep=1 ucmclient label=u-win50 n=100 cmds=700 conn_per_s=150 guest_cpu_us=9000 daemon_cpu_us=6000
rep=1 ucmclient label=u-srv n=50 cmds=300
rep=2 rdmaconn label=k-win50 conn_per_s=1000 guest_cpu_us=3000
rep=2 umadping label=umad-w50 mads_per_s=4000 guest_cpu_us=200
rep=2 cmdbench label=floor-conn threads=4 guest_cpu_us=100
rep=2 ucmclient label=u-win50 n=100 cmds=700 conn_per_s=150 guest_cpu_us=9000 daemon_cpu_us=6000
rep=2 ucmclient label=u-srv n=50 cmds=300
`
	got := figureValues(t, in)
	// 7 + 6 commands a connection; 5 × 200 + 13 × 100 = 2,300 µs at the
	// floors: two CPUs carry 869.6 such connections a second
	want := map[string][]float64{
		"ucmd_cmds_per_conn":          {13, 13},
		"conn_ratio_win50_cpu_bound":  {2e6 / 2300 / 1000, 2e6 / 2300 / 1000},
		"ucmd_win50_cpu_ceiling":      {2e6 / 9000 / 1000, 2e6 / 9000 / 1000},
		"conn_ratio_win50_umad_bound": {0.8, 0.8},
		"ucmd_cpu_us_per_conn_win50":  {9000, 9000},
	}
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Errorf("%s = %v, want %v", name, g, w)
			continue
		}
		for i := range w {
			if math.Abs(g[i]-w[i]) > 1e-9 {
				t.Errorf("%s = %v, want %v", name, g, w)
				break
			}
		}
	}
}

// The one-at-a-time floor model puts 4 umad trips and 7 CUSE exchanges
// (half a pvw floor pair each) on a connection's critical path.
func TestSeqFloorModel(t *testing.T) {
	in := `rep=1 rdmaconn label=k-seq conn_per_s=250
rep=1 umadping label=umad us_per_trip=700
rep=1 cmdbench label=floorpvw threads=1 us_per_pair=400
`
	got := figureValues(t, in)
	// 4 × 700 + 7 × 200 = 4,200 µs against the kernel's 4,000
	wantOne(t, got, map[string]float64{"conn_ratio_seq_floor_model": 4000.0 / 4200})
}

// 50 at once: each side's connect rate of its burst (start → all
// ESTABLISHED), not its whole run's, which holds the disconnects too;
// with QPs as without.
func TestBurst50Ratio(t *testing.T) {
	in := `rep=1 rdmaconn label=k-burst50 conn_per_s=900 burst_conn_per_s=2000
rep=1 ucmclient label=u-burst50 n=50 conn_per_s=140 burst_conn_per_s=250
rep=1 rdmaconn label=k-burst50-qp conn_per_s=400 burst_conn_per_s=600
rep=1 ucmclient label=u-burst50-qp n=50 conn_per_s=80 burst_conn_per_s=120
rep=1 rdmaconn label=k-win50-qp conn_per_s=400
rep=1 ucmclient label=u-win50-qp n=50 conn_per_s=90
`
	got := figureValues(t, in)
	wantOne(t, got, map[string]float64{
		"conn_ratio_burst50": 0.125, "ucmd_burst50_connect_per_s": 250,
		"conn_ratio_burst50_qp": 0.2, "conn_ratio_win50_qp": 0.225,
	})
}

// Against the floor with the copy: ucmd's pair over that floor's, and
// that floor's over the plain one's, at each thread count.
func TestPVWFloorRatios(t *testing.T) {
	in := `rep=1 cmdbench label=floor threads=1 us_per_pair=200
rep=1 cmdbench label=floorpvw threads=1 us_per_pair=250
rep=1 cmdbench label=ucmd threads=1 us_per_pair=300
rep=1 cmdbench label=floor threads=4 us_per_pair=400
rep=1 cmdbench label=floorpvw threads=4 us_per_pair=600
rep=1 cmdbench label=ucmd threads=4 us_per_pair=540
`
	got := figureValues(t, in)
	want := map[string]float64{
		"pvw_floor_ratio_t1":    1.25,
		"cmd_pair_pvw_ratio_t1": 1.2,
		"pvw_floor_ratio_t4":    1.5,
		"cmd_pair_pvw_ratio_t4": 0.9,
	}
	wantOne(t, got, want)
}

// The Go floor against the plain floor, and splitting the pair against
// the floor with the copy: the server's part (Go floor ÷ that floor) and
// ucm's (the pair ÷ Go floor).
func TestGoFloorRatios(t *testing.T) {
	in := `rep=1 cmdbench label=floor threads=1 us_per_pair=200
rep=1 cmdbench label=floor threads=4 us_per_pair=450
rep=1 cmdbench label=floorpvw threads=1 us_per_pair=250 daemon_cpu_us_per_cmd=80
rep=1 cmdbench label=gofloor threads=1 us_per_pair=275 daemon_cpu_us_per_cmd=90
rep=1 cmdbench label=ucmd threads=1 us_per_pair=330
rep=1 cmdbench label=floorpvw threads=4 us_per_pair=600
rep=1 cmdbench label=gofloor threads=4 us_per_pair=540
rep=1 cmdbench label=ucmd threads=4 us_per_pair=648
`
	got := figureValues(t, in)
	wantOne(t, got, map[string]float64{
		"gofloor_ratio_t1":           1.375,
		"gofloor_ratio_t4":           1.2,
		"gofloor_pvw_ratio_t1":       1.1,
		"cmd_pair_gofloor_ratio_t1":  1.2,
		"gofloor_pvw_ratio_t4":       0.9,
		"cmd_pair_gofloor_ratio_t4":  1.2,
		"floorpvw_cpu_us_per_cmd_t1": 80,
		"gofloor_cpu_us_per_cmd_t1":  90,
	})
}

// The RSS per held connection comes from guest.sh's memconn line.
func TestHeldConnectionRSS(t *testing.T) {
	in := `rep=1 memconn label=mem-conn held=1000 rss_half_kib=30000 rss_kib=35000 rss_bytes_per_conn=10240
`
	if g := figureValues(t, in)["rss_bytes_per_conn"]; len(g) != 1 || g[0] != 10240 {
		t.Errorf("rss_bytes_per_conn = %v, want [10240]", g)
	}
}

// The one-at-a-time command figures come from the active client's
// ucmclient-cmdtime lines of the same repetition.
func TestSeqCommandTimes(t *testing.T) {
	in := `rep=1 ucmclient label=u-seq n=100 conn_per_s=100
rep=1 ucmclient-cmdtime label=u-seq-CREATE_ID role=client cmd=CREATE_ID n=100 p10_us=200 p50_us=300 p90_us=900
rep=1 ucmclient-cmdtime label=u-seq-SEND_REQ role=client cmd=SEND_REQ n=100 p10_us=500 p50_us=1200 p90_us=2000
rep=1 ucmclient-cmdtime label=u-seq-SEND_RTU role=client cmd=SEND_RTU n=100 p10_us=500 p50_us=900 p90_us=2000
rep=1 ucmclient-cmdtime label=u-seq-SEND_DREQ role=client cmd=SEND_DREQ n=100 p10_us=500 p50_us=1500 p90_us=2000
`
	got := figureValues(t, in)
	// a SEND is the median of 1,200, 900 and 1,500 µs; the three take
	// 3,600 µs of the 10,000 a connection lasts at 100 a second
	want := map[string]float64{
		"ucmd_seq_create_id_us":       300,
		"ucmd_seq_send_over_create":   4,
		"ucmd_seq_active_sends_share": 0.36,
	}
	wantOne(t, got, want)
}

// wantOne checks that each figure named in want has exactly one value,
// the one wanted.
func wantOne(t *testing.T, got map[string][]float64, want map[string]float64) {
	t.Helper()
	for name, w := range want {
		if g := got[name]; len(g) != 1 || math.Abs(g[0]-w) > 1e-9 {
			t.Errorf("%s = %v, want [%v]", name, g, w)
		}
	}
}

// figureValues summarizes guest.sh lines: each figure's values by name.
func figureValues(t *testing.T, in string) map[string][]float64 {
	t.Helper()
	samples, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float64{}
	for _, f := range summarize(samples).Figures {
		got[f.Name] = f.Values
	}
	return got
}
