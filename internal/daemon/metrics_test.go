package daemon_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
	"github.com/ucmd/ucmd/internal/metrics/metricstest"
)

// scrape GETs the metrics endpoint at addr and parses it.
func scrape(t *testing.T, addr net.Addr) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	fams, err := metricstest.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the value of the first series of family name whose labels
// include every "name=value" of want; ok false if there is none.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	ms := metricstest.Find(fams, name, want...)
	if len(ms) == 0 {
		return 0, false
	}
	return metricstest.Value(ms[0]), true
}

// sum adds the counters of every series of name whose labels include want.
func sum(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	var s float64
	for _, m := range metricstest.Find(fams, name, want...) {
		s += m.GetCounter().GetValue()
	}
	return s
}

// --metrics-listen on the simulated fabric: a connection on sim0's
// loopback and a failed command, then the endpoint's numbers against the
// status snapshot taken right after, and the MADs, commands and setups
// the observers counted.
func TestMetricsEndpoint(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	d := start(t, f, daemon.Config{SimDevices: 2, RuntimeDir: run, Version: "test", MetricsListen: "127.0.0.1:0"})
	addr := d.MetricsAddr()
	if addr == nil {
		t.Fatal("no metrics address")
	}
	if tcp, ok := addr.(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() || tcp.Port == 0 {
		t.Fatalf("metrics address %v", addr)
	}

	p := newPair(t, f, run)
	srv, cli, l, path := p.srv, p.cli, p.listener, p.path
	if err := srv.Listen(l, 0x5151, 0); conformance.Errno(err) != unix.EINVAL {
		t.Fatalf("second LISTEN: %v", err)
	}
	id, err := cli.CreateID(2)
	must(t, err)
	// Each send is observed before its command returns, each receipt
	// before its event is delivered: after RTU_RECEIVED every MAD of the
	// handshake is counted.
	must(t, cli.SendREQ(cli.REQ(id, 0x5151, path, 0x100)))
	req, err := srv.Expect(abi.CMREQReceived, waitFor)
	must(t, err)
	must(t, srv.SendREP(&abi.REP{UID: 3, ID: req.ID, QPN: 0x200, PSN: 1}))
	_, err = cli.Expect(abi.CMREPReceived, waitFor)
	must(t, err)
	must(t, cli.SendPrivateData(abi.CmdSendRTU, id, nil))
	_, err = srv.Expect(abi.CMRTUReceived, waitFor)
	must(t, err)

	fams := scrape(t, addr)
	snap := fetch(t, run)
	if v, ok := value(fams, "ucmd_info", "version=test", "fabric=sim"); !ok || v != 1 {
		t.Errorf("ucmd_info: %v %v", v, ok)
	}
	for _, dev := range snap.Devices {
		dl := "device=" + dev.Name
		c := dev.Counters
		for name, want := range map[string]uint64{
			"ucmd_cm_mads_sent_total": c.Sent, "ucmd_cm_mads_received_total": c.Received,
			"ucmd_cm_retransmissions_total": c.Retransmitted, "ucmd_cm_timeouts_total": c.TimedOut,
			"ucmd_cm_mads_dropped_total": c.Dropped, "ucmd_cm_send_errors_total": c.SendFailed,
		} {
			if v, ok := value(fams, name, dl); !ok || v != float64(want) {
				t.Errorf("%s{%s} = %v (present %v), status says %d", name, dl, v, ok, want)
			}
		}
		// The per-type counters add up to status's totals.
		if s := sum(fams, "ucmd_mads_total", dl, "direction=sent") + sum(fams, "ucmd_mads_total", dl, "direction=retransmitted") +
			sum(fams, "ucmd_mads_total", dl, "direction=send-failed"); s != float64(c.Sent) {
			t.Errorf("%s: ucmd_mads_total sent+retransmitted+send-failed = %v, status sent %d", dev.Name, s, c.Sent)
		}
		if s := sum(fams, "ucmd_mads_total", dl, "direction=received") + sum(fams, "ucmd_mads_total", dl, "direction=dropped"); s != float64(c.Received) {
			t.Errorf("%s: ucmd_mads_total received+dropped = %v, status received %d", dev.Name, s, c.Received)
		}
		states := map[string]int{}
		events := 0
		for _, fl := range dev.Files {
			events += fl.Events
			for _, id := range fl.IDs {
				states[id.State]++
			}
		}
		for _, st := range []string{"LISTEN", "ESTABLISHED", "IDLE", "REQ_SENT"} {
			if v, ok := value(fams, "ucmd_ids", dl, "state="+st); !ok || v != float64(states[st]) {
				t.Errorf("ucmd_ids{%s,state=%s} = %v (present %v), status has %d", dl, st, v, ok, states[st])
			}
		}
		if v, _ := value(fams, "ucmd_open_files", dl); v != float64(len(dev.Files)) {
			t.Errorf("ucmd_open_files{%s} = %v, status has %d files", dl, v, len(dev.Files))
		}
		if v, _ := value(fams, "ucmd_queued_events", dl); v != float64(events) {
			t.Errorf("ucmd_queued_events{%s} = %v, status has %d", dl, v, events)
		}
		for errno, n := range dev.Errors {
			if v, ok := value(fams, "ucmd_command_errors_total", dl, "errno="+errno); !ok || v != float64(n) {
				t.Errorf("ucmd_command_errors_total{%s,errno=%s} = %v, status %d", dl, errno, v, n)
			}
		}
	}
	d0 := snap.Devices[0]
	if d0.Errors["EINVAL"] != 1 || len(d0.Files) != 2 {
		t.Fatalf("sim0 status: errors %v, %d files", d0.Errors, len(d0.Files))
	}
	if v, _ := value(fams, "ucmd_ids", "device=sim0", "state=ESTABLISHED"); v != 2 {
		t.Errorf("sim0 ESTABLISHED ids: %v, want 2 (both ends)", v)
	}

	// What only the observers count: the handshake's MADs by type, the
	// commands by name, one setup per side.
	for _, ty := range []string{"REQ", "REP", "RTU"} {
		for _, dir := range []string{"sent", "received"} {
			if v, ok := value(fams, "ucmd_mads_total", "device=sim0", "port=1", "type="+ty, "direction="+dir); !ok || v != 1 {
				t.Errorf("ucmd_mads_total{sim0,1,%s,%s} = %v (present %v), want 1", ty, dir, v, ok)
			}
		}
	}
	for cmd, want := range map[string]float64{"CREATE_ID": 2, "LISTEN": 2, "SEND_REQ": 1, "SEND_REP": 1, "SEND_RTU": 1} {
		if v, ok := value(fams, "ucmd_command_duration_seconds", "device=sim0", "command="+cmd); !ok || v != want {
			t.Errorf("ucmd_command_duration_seconds{sim0,%s} count %v (present %v), want %v", cmd, v, ok, want)
		}
	}
	// A command not served yet has no series.
	if v, ok := value(fams, "ucmd_command_duration_seconds", "device=sim0", "command=DESTROY_ID"); ok {
		t.Errorf("sim0 DESTROY_ID, never served: count %v", v)
	}
	if v, ok := value(fams, "ucmd_command_duration_seconds", "device=sim1", "command=CREATE_ID"); ok {
		t.Errorf("sim1 CREATE_ID, never served: count %v", v)
	}
	for _, side := range []string{"active", "passive"} {
		if v, ok := value(fams, "ucmd_connection_setup_duration_seconds", "device=sim0", "side="+side); !ok || v != 1 {
			t.Errorf("setup{sim0,%s} count %v (present %v), want 1", side, v, ok)
		}
	}
	if _, ok := value(fams, "go_goroutines"); !ok {
		t.Error("no Go collector")
	}

	// Only /metrics is served; Close stops it.
	resp, err := http.Get(fmt.Sprintf("http://%s/other", addr))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %s", resp.Status)
	}
	must(t, cli.Close())
	must(t, srv.Close())
	d.Close()
	if _, err := net.Dial("tcp", addr.String()); err == nil {
		t.Error("the metrics endpoint still accepts connections after Close")
	}
}

// Without MetricsListen there is no endpoint; a bad one or a port in use
// fails Start with the flag's name.
func TestMetricsListenErrors(t *testing.T) {
	f := daemontest.New(t)
	d := start(t, f, daemon.Config{SimDevices: 1})
	if a := d.MetricsAddr(); a != nil {
		t.Errorf("metrics served without MetricsListen: %v", a)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	for _, addr := range []string{"bogus", ln.Addr().String()} {
		f := daemontest.New(t)
		registered := 0
		f.Refuse = func(cuse.Config) error { registered++; return nil }
		cfg := f.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: 1, RuntimeDir: t.TempDir(), MetricsListen: addr, Logger: quiet()})
		d, err := daemon.Start(t.Context(), cfg)
		if err == nil {
			d.Close()
			t.Errorf("MetricsListen %q: started", addr)
			continue
		}
		if !strings.Contains(err.Error(), "--metrics-listen") {
			t.Errorf("MetricsListen %q: %v does not name the flag", addr, err)
		}
		// Refused before any node appeared, not after.
		if registered != 0 {
			t.Errorf("MetricsListen %q: %d nodes registered before the error", addr, registered)
		}
	}
}
