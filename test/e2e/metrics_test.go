//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/metrics"
	"github.com/ucmd/ucmd/internal/metrics/metricstest"
)

// Issue 15 points 3 and 4 on the real kernel: `ucmd serve
// --metrics-listen` on rxe0/rxe1, its endpoint against `ucmd status
// --json` after a connection through ucmd, and failed commands whose
// debug log line names their cause chain.

// metricsAddr waits for the daemon's "serving metrics" log line (it
// listens on 127.0.0.1:0, so the kernel picked the port) and returns the
// address.
func (d *daemon) metricsAddr(t *testing.T) string {
	t.Helper()
	m := d.log.wait(regexp.MustCompile(`msg="serving metrics" addr=(127\.0\.0\.1:\d+) path=/metrics`))
	if m == nil {
		t.Fatalf("no \"serving metrics\" line in the log:\n%s", d.log.String())
	}
	return m[1]
}

// scrapeMetrics GETs /metrics and returns its text and families. The
// connection is closed after the answer: a kept-alive one would hold a
// file and a goroutine of the daemon's (TestDaemonChurnLeavesNothing
// counts them).
func scrapeMetrics(t *testing.T, addr string) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	c := http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s, %v\n%s", resp.Status, err, b)
	}
	fams, err := metricstest.Parse(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b), fams
}

// metric is the total of the series of name whose labels include every
// "k=v" of labels (a histogram's sample count); -1 if none.
func metric(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	ms := metricstest.Find(fams, name, labels...)
	if len(ms) == 0 {
		return -1
	}
	var total float64
	for _, m := range ms {
		total += metricstest.Value(m)
	}
	return total
}

// fullStatus is the part of `ucmd status --json` the metrics export.
type fullStatus struct {
	Version string `json:"version"`
	Devices []struct {
		Name     string `json:"name"`
		Counters struct {
			Sent          uint64 `json:"sent"`
			Received      uint64 `json:"received"`
			Retransmitted uint64 `json:"retransmitted"`
			TimedOut      uint64 `json:"timed_out"`
			Dropped       uint64 `json:"dropped"`
			SendFailed    uint64 `json:"send_failed"`
		} `json:"counters"`
		Files []struct {
			Events int `json:"queued_events"`
			IDs    []struct {
				State string `json:"state"`
			} `json:"ids"`
		} `json:"files"`
		Errors map[string]uint64 `json:"errors"`
	} `json:"devices"`
}

func (d *daemon) fullStatus(t *testing.T) fullStatus {
	t.Helper()
	out, err := d.ucmd("status", "--json")
	if err != nil {
		t.Fatalf("ucmd status --json: %v\n%s", err, out)
	}
	var s fullStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("ucmd status --json: %v\n%s", err, out)
	}
	return s
}

// checkMatch compares every number status has with the endpoint's. The
// status is taken between two scrapes: each counter must lie between the
// two scrapes' values (equal when nothing moved, as on a quiet fabric),
// each gauge equal one of them.
func checkMatch(t *testing.T, before, after map[string]*dto.MetricFamily, s fullStatus) {
	t.Helper()
	between := func(what string, got uint64, name string, labels ...string) {
		t.Helper()
		lo, hi := metric(before, name, labels...), metric(after, name, labels...)
		if lo < 0 || hi < 0 || float64(got) < lo || float64(got) > hi {
			t.Errorf("%s: status %d, %s%v %v then %v", what, got, name, labels, lo, hi)
		}
	}
	for _, dev := range s.Devices {
		dl := "device=" + dev.Name
		c := dev.Counters
		between(dev.Name+" sent", c.Sent, "ucmd_cm_mads_sent_total", dl)
		between(dev.Name+" received", c.Received, "ucmd_cm_mads_received_total", dl)
		between(dev.Name+" retransmitted", c.Retransmitted, "ucmd_cm_retransmissions_total", dl)
		between(dev.Name+" timed_out", c.TimedOut, "ucmd_cm_timeouts_total", dl)
		between(dev.Name+" dropped", c.Dropped, "ucmd_cm_mads_dropped_total", dl)
		between(dev.Name+" send_failed", c.SendFailed, "ucmd_cm_send_errors_total", dl)
		for errno, n := range dev.Errors {
			between(dev.Name+" "+errno, n, "ucmd_command_errors_total", dl, "errno="+errno)
		}
		// The observers' per-type counts add up to status's totals.
		typed := func(fams map[string]*dto.MetricFamily, dirs ...string) float64 {
			var sum float64
			for _, dir := range dirs {
				if v := metric(fams, "ucmd_mads_total", dl, "direction="+dir); v > 0 {
					sum += v
				}
			}
			return sum
		}
		if lo, hi := typed(before, "sent", "retransmitted", "send-failed"), typed(after, "sent", "retransmitted", "send-failed"); float64(c.Sent) < lo || float64(c.Sent) > hi {
			t.Errorf("%s: ucmd_mads_total sent+retransmitted+send-failed %v..%v, status sent %d", dev.Name, lo, hi, c.Sent)
		}
		if lo, hi := typed(before, "received", "dropped"), typed(after, "received", "dropped"); float64(c.Received) < lo || float64(c.Received) > hi {
			t.Errorf("%s: ucmd_mads_total received+dropped %v..%v, status received %d", dev.Name, lo, hi, c.Received)
		}
		states := map[string]int{}
		events := 0
		for _, f := range dev.Files {
			events += f.Events
			for _, id := range f.IDs {
				states[id.State]++
			}
		}
		gauge := func(what string, got int, name string, labels ...string) {
			t.Helper()
			if a, b := metric(before, name, labels...), metric(after, name, labels...); float64(got) != a && float64(got) != b {
				t.Errorf("%s: status %d, %s%v %v then %v", what, got, name, labels, a, b)
			}
		}
		for _, st := range []string{"IDLE", "LISTEN", "REQ_SENT", "ESTABLISHED", "TIMEWAIT"} {
			gauge(dev.Name+" ids "+st, states[st], "ucmd_ids", dl, "state="+st)
		}
		gauge(dev.Name+" files", len(dev.Files), "ucmd_open_files", dl)
		gauge(dev.Name+" queued events", events, "ucmd_queued_events", dl)
	}
}

// A connection through ucmd (ucmclient on rxe1 and rxe0, RC QPs, data,
// disconnect): the endpoint's counters match `ucmd status --json`, and the
// observers saw the handshake, the commands and one setup per side.
func TestMetricsMatchStatus(t *testing.T) {
	d := startDaemon(t, "--metrics-listen", "127.0.0.1:0")
	addr := d.metricsAddr(t)
	clientPair(t, d, "0x1501", []string{"-d", "rxe1", "-n", "1"}, []string{"-d", "rxe0", "-g", "fe80::ff:fe00:2", "-n", "1"})

	_, before := scrapeMetrics(t, addr)
	s := d.fullStatus(t)
	time.Sleep(metrics.SnapshotMaxAge) // so that after is a new snapshot, not before's
	text, after := scrapeMetrics(t, addr)
	checkMatch(t, before, after, s)
	for _, dev := range s.Devices {
		if dev.Counters.Sent == 0 || dev.Counters.Received == 0 {
			t.Errorf("%s: status counters %+v: the connection sent nothing?", dev.Name, dev.Counters)
		}
	}

	for _, c := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"ucmd_mads_total", []string{"device=rxe0", "port=1", "type=REQ", "direction=sent"}, 1},
		{"ucmd_mads_total", []string{"device=rxe1", "port=1", "type=REQ", "direction=received"}, 1},
		{"ucmd_mads_total", []string{"device=rxe1", "port=1", "type=REP", "direction=sent"}, 1},
		{"ucmd_mads_total", []string{"device=rxe0", "port=1", "type=RTU", "direction=sent"}, 1},
		{"ucmd_command_duration_seconds", []string{"device=rxe0", "command=SEND_REQ"}, 1},
		{"ucmd_command_duration_seconds", []string{"device=rxe1", "command=SEND_REP"}, 1},
		{"ucmd_command_duration_seconds", []string{"device=rxe1", "command=EVENT"}, 1},
		{"ucmd_connection_setup_duration_seconds", []string{"device=rxe0", "side=active"}, 1},
		{"ucmd_connection_setup_duration_seconds", []string{"device=rxe1", "side=passive"}, 1},
		{"ucmd_info", []string{"fabric=umad", "version=" + s.Version}, 1},
		{"process_start_time_seconds", nil, 1},
	} {
		if v := metric(after, c.name, c.labels...); v < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.min)
		}
	}
	// The RTU reached rxe1: received, or dropped as ignored when the
	// server's NOTIFY(COMM_EST), on the client's first data, established
	// the connection before it came (both happen on rxe).
	rtu := max(metric(after, "ucmd_mads_total", "device=rxe1", "port=1", "type=RTU", "direction=received"), 0) +
		max(metric(after, "ucmd_mads_total", "device=rxe1", "port=1", "type=RTU", "direction=dropped"), 0)
	if rtu != 1 {
		t.Errorf("RTUs received or dropped on rxe1: %v, want 1", rtu)
	}
	if v := metric(after, "ucmd_connection_setup_duration_seconds", "device=rxe0", "side=passive"); v != 0 {
		t.Errorf("rxe0 passive setups: %v, want 0", v)
	}
	// The excerpt for the record: everything of ucmd's own but the
	// histograms' buckets.
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "ucmd_") && !strings.Contains(l, "_bucket{") && !strings.HasSuffix(l, " 0") {
			lines = append(lines, l)
		}
	}
	t.Logf("/metrics (ucmd_ series, non-zero, no buckets):\n%s", strings.Join(lines, "\n"))
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

// Failed commands at --log-level debug: each is logged with who sent it
// and its cause chain (issue 15.3), and counted by errno in status and on
// the endpoint. A CREATE_ID whose response pointer is unmapped (EFAULT:
// the copy-out's address and errno) and a SEND_REQ whose path's SGID is
// no GID of the port (EINVAL: cmcore's reason).
func TestMetricsFailedCommandLog(t *testing.T) {
	d := startDaemon(t, "--metrics-listen", "127.0.0.1:0")
	addr := d.metricsAddr(t)
	dut, err := conformance.OpenPath("/dev/infiniband/ucm0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := conformance.NewClient(dut, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Cmd(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: 0x10}); conformance.Errno(err) != unix.EFAULT {
		t.Fatalf("CREATE_ID with response 0x10: %v, want EFAULT", err)
	}
	id, err := c.CreateID(2)
	if err != nil {
		t.Fatal(err)
	}
	bogus := [16]byte{0xfe, 0x80, 14: 0xde, 15: 0xad} // fe80::dead: no GID of rxe0
	if err := c.SendREQ(c.REQ(id, 0x1502, conformance.LoopbackPath(bogus, 0), 0x100)); conformance.Errno(err) != unix.EINVAL {
		t.Fatalf("SEND_REQ on a path from fe80::dead: %v, want EINVAL", err)
	}

	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	who := fmt.Sprintf(`pid=%d comm=%s(?: thread=\d+)?`, os.Getpid(), regexp.QuoteMeta(strings.TrimSpace(string(comm))))
	for _, want := range []string{
		`level=DEBUG msg="ucm: command failed" dev=rxe0 node=ucm0 cmd=CREATE_ID errno=EFAULT ` + who +
			` err="ucm: CREATE_ID: response: write 4 bytes at 0x10 of pid \d+ \(done 0\): bad address"`,
		`level=DEBUG msg="ucm: command failed" dev=rxe0 node=ucm0 cmd=SEND_REQ errno=EINVAL ` + who + fmt.Sprintf(` id=%d`, id) +
			` err="ucm: SEND_REQ: cmcore: path SGID fe80::dead is not on any port of rxe0: invalid argument"`,
	} {
		m := d.log.wait(regexp.MustCompile(want))
		if m == nil {
			t.Errorf("no log line matching\n  %s\nin:\n%s", want, d.log.String())
			continue
		}
		t.Logf("log: %s", m[0])
	}

	_, before := scrapeMetrics(t, addr)
	s := d.fullStatus(t)
	time.Sleep(metrics.SnapshotMaxAge) // so that after is a new snapshot, not before's
	_, after := scrapeMetrics(t, addr)
	checkMatch(t, before, after, s)
	if e := s.Devices[0].Errors; e["EFAULT"] != 1 || e["EINVAL"] < 1 {
		t.Errorf("rxe0 errors in status: %v, want EFAULT 1 and the EINVALs", e)
	}
	if v := metric(after, "ucmd_command_errors_total", "device=rxe0", "errno=EFAULT"); v != 1 {
		t.Errorf("ucmd_command_errors_total{rxe0,EFAULT} = %v, want 1", v)
	}
	if v := metric(after, "ucmd_command_duration_seconds", "device=rxe0", "command=CREATE_ID"); v != 2 {
		t.Errorf("rxe0 CREATE_ID commands timed: %v, want 2", v)
	}
}
