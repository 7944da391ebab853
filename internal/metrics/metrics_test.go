package metrics_test

import (
	"encoding/binary"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/internal/metrics"
	"github.com/ucmd/ucmd/internal/status"
)

// The snapshot metrics are the status snapshot's numbers, per device:
// counters, ids per state (every state, zeros included), files, queued
// events, waiting commands, failed commands by errno, and per port whether it receives.
func TestSnapshotMetrics(t *testing.T) {
	snap := status.Snapshot{Version: "1.2.3", Fabric: "sim", Devices: []status.Device{
		{
			Name: "sim0", Node: "/dev/infiniband/ucm0", NodeGUID: "0002:c903:0000:0001",
			Counters: status.MADCounter{Sent: 10, Received: 9, Retransmitted: 2, TimedOut: 1, Dropped: 3, SendFailed: 4},
			Errors:   map[string]uint64{"EINVAL": 5, "EFAULT": 1},
			Files: []status.File{
				{Events: 2, Waiting: 3, CopyWaiting: 2, IDs: []status.ID{{State: "LISTEN"}, {State: "ESTABLISHED"}, {State: "ESTABLISHED"}}},
				{Events: 1, Waiting: 1, IDs: []status.ID{{State: "IDLE"}}},
			},
			Ports: []status.Port{{Num: 1, State: "ACTIVE", Neighbours: &status.Neighbours{Resolved: 12, Failed: 3, Unanswered: 1}},
				{Num: 2, State: "STOPPED", ReceiveError: "read: input/output error"}},
		},
		{Name: "sim1", Node: "/dev/infiniband/ucm1", NodeGUID: "0002:c903:0000:0002", Ports: []status.Port{{Num: 1, State: "ACTIVE"}}},
	}, Unserved: []status.Unserved{{Name: "mlx5_1", Reason: "CM class in use"}},
		Retired: map[string]uint64{status.RetiredGone: 2, status.RetiredChannelFailed: 1},
		Limits: status.Limits{MemoryCharged: 123456, MemoryBudget: 1 << 29, Copies: 7, CopiesMax: 1024, Users: []status.User{{UID: 0}, {UID: 1000, IDs: 5, Timewait: 3}, {UID: 1001, IDs: 2, Timewait: 1}},
			Refused: map[string]uint64{"user-waits": 800, "memory-budget": 2}}}
	m := metrics.New(status.ProviderFunc(func() status.Snapshot { return snap }))
	const want = `
# HELP ucmd_cm_mads_sent_total CM MADs handed to the device's endpoints, retransmissions and refused sends included (status: sent).
# TYPE ucmd_cm_mads_sent_total counter
ucmd_cm_mads_sent_total{device="sim0"} 10
ucmd_cm_mads_sent_total{device="sim1"} 0
# HELP ucmd_cm_mads_received_total CM MADs received, dropped ones included (status: received).
# TYPE ucmd_cm_mads_received_total counter
ucmd_cm_mads_received_total{device="sim0"} 9
ucmd_cm_mads_received_total{device="sim1"} 0
# HELP ucmd_cm_retransmissions_total CM MADs retransmitted after a timeout (status: retransmitted).
# TYPE ucmd_cm_retransmissions_total counter
ucmd_cm_retransmissions_total{device="sim0"} 2
ucmd_cm_retransmissions_total{device="sim1"} 0
# HELP ucmd_cm_timeouts_total CM messages that ran out of retries, each a *_ERROR event (status: timed_out).
# TYPE ucmd_cm_timeouts_total counter
ucmd_cm_timeouts_total{device="sim0"} 1
ucmd_cm_timeouts_total{device="sim1"} 0
# HELP ucmd_cm_mads_dropped_total Received MADs dropped as not CM messages ucmd decodes (status: dropped).
# TYPE ucmd_cm_mads_dropped_total counter
ucmd_cm_mads_dropped_total{device="sim0"} 3
ucmd_cm_mads_dropped_total{device="sim1"} 0
# HELP ucmd_cm_send_errors_total Sends the endpoint refused, each lost like a MAD on the wire (status: send_failed).
# TYPE ucmd_cm_send_errors_total counter
ucmd_cm_send_errors_total{device="sim0"} 4
ucmd_cm_send_errors_total{device="sim1"} 0
# HELP ucmd_command_errors_total Commands that failed on the device, by the errno the client got (status: errors).
# TYPE ucmd_command_errors_total counter
ucmd_command_errors_total{device="sim0",errno="EFAULT"} 1
ucmd_command_errors_total{device="sim0",errno="EINVAL"} 5
# HELP ucmd_open_files Open files of the device's node.
# TYPE ucmd_open_files gauge
ucmd_open_files{device="sim0"} 2
ucmd_open_files{device="sim1"} 0
# HELP ucmd_queued_events Events queued on the device's open files, not yet read by GET_EVENT.
# TYPE ucmd_queued_events gauge
ucmd_queued_events{device="sim0"} 3
ucmd_queued_events{device="sim1"} 0
# HELP ucmd_waiting_commands Commands waiting on the device's open files: GET_EVENTs for an event, DESTROY_IDs for the id's other commands, copies for a copy slot (status: waiting_commands).
# TYPE ucmd_waiting_commands gauge
ucmd_waiting_commands{device="sim0"} 4
ucmd_waiting_commands{device="sim1"} 0
# HELP ucmd_copy_waiting_commands Commands waiting for a copy slot (--user-copies of their user's, --copies of all users'): nonzero for long, some user's copies into or out of client memory hang (status: waiting_for_copy).
# TYPE ucmd_copy_waiting_commands gauge
ucmd_copy_waiting_commands{device="sim0"} 2
ucmd_copy_waiting_commands{device="sim1"} 0
# HELP ucmd_port_receiving 1 while the CM receives MADs on the port, 0 once its reads failed (a removed device; status: state STOPPED).
# TYPE ucmd_port_receiving gauge
ucmd_port_receiving{device="sim0",port="1"} 1
ucmd_port_receiving{device="sim0",port="2"} 0
ucmd_port_receiving{device="sim1",port="1"} 1
# HELP ucmd_neighbour_resolutions_total On a RoCE port, first sends to peers not yet reached whose MAC ucmd had the kernel resolve through rtnetlink first, by result: resolved, failed (the send failed with ETIMEDOUT, no umad file held), unanswered (rtnetlink could not be asked, e.g. without CAP_NET_ADMIN: resolved in umad's write, on a file shared with every such send) (status: ports' neighbours).
# TYPE ucmd_neighbour_resolutions_total counter
ucmd_neighbour_resolutions_total{device="sim0",port="1",result="failed"} 3
ucmd_neighbour_resolutions_total{device="sim0",port="1",result="resolved"} 12
ucmd_neighbour_resolutions_total{device="sim0",port="1",result="unanswered"} 1
# HELP ucmd_info Always 1: the running ucmd's version and fabric (umad or sim).
# TYPE ucmd_info gauge
ucmd_info{fabric="sim",version="1.2.3"} 1
# HELP ucmd_device_info Always 1: a served RDMA device, its node and node GUID.
# TYPE ucmd_device_info gauge
ucmd_device_info{device="sim0",node="/dev/infiniband/ucm0",node_guid="0002:c903:0000:0001"} 1
ucmd_device_info{device="sim1",node="/dev/infiniband/ucm1",node_guid="0002:c903:0000:0002"} 1
# HELP ucmd_device_unserved Always 1: an RDMA device found but not served, tried again later (status: unserved; e.g. the kernel's ib_cm owns its CM class).
# TYPE ucmd_device_unserved gauge
ucmd_device_unserved{device="mlx5_1"} 1
# HELP ucmd_devices_retired_total RDMA devices ucmd stopped serving since it started, by reason: gone (no longer listed), ports-stopped (every port's reads failed), registered-again (another node GUID or umad files), channel-failed (the kernel ended the node's CUSE channel, an abort; served again at once) (status: retired).
# TYPE ucmd_devices_retired_total counter
ucmd_devices_retired_total{reason="channel-failed"} 1
ucmd_devices_retired_total{reason="gone"} 2
ucmd_devices_retired_total{reason="ports-stopped"} 0
ucmd_devices_retired_total{reason="registered-again"} 0
# HELP ucmd_memory_charged_bytes What all users' files, ids, events and waiting commands cost the daemon, as the memory budget estimates it (status: limits.memory_charged).
# TYPE ucmd_memory_charged_bytes gauge
ucmd_memory_charged_bytes 123456
# HELP ucmd_memory_budget_bytes The memory budget, --memory-budget (status: limits.memory_budget).
# TYPE ucmd_memory_budget_bytes gauge
ucmd_memory_budget_bytes 5.36870912e+08
# HELP ucmd_users Users (uids) holding a file, id, event or waiting command (status: limits.users).
# TYPE ucmd_users gauge
ucmd_users 3
# HELP ucmd_timewait_ids ids destroyed but kept by the CM for their connection's timewait, all users': they count against --user-ids and the memory budget until it ends (status: limits.users[].timewait_ids).
# TYPE ucmd_timewait_ids gauge
ucmd_timewait_ids 4
# HELP ucmd_copies_in_progress Copies into or out of client memory in progress, all users' (at most --copies): each takes microseconds, so a count that stays up is copies that hang; status's users say whose (status: limits.copies_in_progress).
# TYPE ucmd_copies_in_progress gauge
ucmd_copies_in_progress 7
# HELP ucmd_limit_refusals_total What each limit refused, by its ucmd serve flag (user-ids, ..., memory-budget): a command's ENOMEM or EMFILE, a new connection rejected, an event dropped (status: limits.refused).
# TYPE ucmd_limit_refusals_total counter
ucmd_limit_refusals_total{limit="max-events"} 0
ucmd_limit_refusals_total{limit="max-ids"} 0
ucmd_limit_refusals_total{limit="memory-budget"} 2
ucmd_limit_refusals_total{limit="user-events"} 0
ucmd_limit_refusals_total{limit="user-files"} 0
ucmd_limit_refusals_total{limit="user-ids"} 0
ucmd_limit_refusals_total{limit="user-waits"} 800
`
	names := []string{
		"ucmd_cm_mads_sent_total", "ucmd_cm_mads_received_total", "ucmd_cm_retransmissions_total",
		"ucmd_cm_timeouts_total", "ucmd_cm_mads_dropped_total", "ucmd_cm_send_errors_total",
		"ucmd_command_errors_total", "ucmd_open_files", "ucmd_queued_events", "ucmd_waiting_commands", "ucmd_copy_waiting_commands", "ucmd_port_receiving", "ucmd_neighbour_resolutions_total", "ucmd_info", "ucmd_device_info",
		"ucmd_device_unserved", "ucmd_devices_retired_total", "ucmd_memory_charged_bytes", "ucmd_memory_budget_bytes", "ucmd_users", "ucmd_timewait_ids", "ucmd_copies_in_progress", "ucmd_limit_refusals_total",
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// ids: one series per CM state and device.
	n, err := testutil.GatherAndCount(m.Registry(), "ucmd_ids")
	if err != nil || n != 2*16 {
		t.Errorf("ucmd_ids: %d series, %v; want 32 (16 states, 2 devices)", n, err)
	}
	var ids strings.Builder
	ids.WriteString("# HELP ucmd_ids ucm ids of the device's open files, by CM state (new connections not yet delivered are not counted).\n# TYPE ucmd_ids gauge\n")
	for _, dev := range []string{"sim0", "sim1"} {
		for st := cmcore.StateIdle; st <= cmcore.StateSIDRREQRcvd; st++ {
			v := 0
			if dev == "sim0" {
				v = map[cmcore.State]int{cmcore.StateIdle: 1, cmcore.StateListen: 1, cmcore.StateEstablished: 2}[st]
			}
			ids.WriteString(`ucmd_ids{device="` + dev + `",state="` + st.String() + `"} ` + string(rune('0'+v)) + "\n")
		}
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(ids.String()), "ucmd_ids"); err != nil {
		t.Error(err)
	}

	// The Go and process collectors are there too.
	for _, name := range []string{"go_goroutines", "process_start_time_seconds"} {
		if n, err := testutil.GatherAndCount(m.Registry(), name); err != nil || n != 1 {
			t.Errorf("%s: %d series, %v", name, n, err)
		}
	}
	if problems, err := testutil.GatherAndLint(m.Registry()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}

}

type fakeDev struct{ name string }

func (d fakeDev) Name() string           { return d.name }
func (d fakeDev) NodeGUID() uint64       { return 1 }
func (d fakeDev) LocalCAAckDelay() uint8 { return 0 }
func (d fakeDev) Ports() []hw.Port       { return nil }

// cmMAD is a CM MAD of attribute attr.
func cmMAD(attr uint16) *hw.MAD {
	var m hw.MAD
	m[0], m[1], m[2], m[3] = 1, 0x07, 2, 0x03 // base version 1, CM, class version 2, SEND
	binary.BigEndian.PutUint16(m[16:], attr)
	return &m
}

// MADs are counted per device, port, type and direction; what is not a
// CM message ucmd knows is "other", so the fabric cannot grow the label's
// values.
func TestMADCounters(t *testing.T) {
	m := metrics.New(status.ProviderFunc(func() status.Snapshot { return status.Snapshot{} }))
	if _, err := wire.DecodeHeader(cmMAD(wire.AttrREQ)); err != nil {
		t.Fatalf("test MAD: %v", err)
	}
	notCM := cmMAD(wire.AttrREQ)
	notCM[1] = 0x01 // subnet management
	for _, ev := range []cmcore.MADEvent{
		{Device: fakeDev{"rxe0"}, Port: 1, Dir: cmcore.MADSent, MAD: cmMAD(wire.AttrREQ)},
		{Device: fakeDev{"rxe0"}, Port: 1, Dir: cmcore.MADRetransmitted, MAD: cmMAD(wire.AttrREQ)},
		{Device: fakeDev{"rxe0"}, Port: 1, Dir: cmcore.MADRetransmitted, MAD: cmMAD(wire.AttrREQ)},
		{Device: fakeDev{"rxe0"}, Port: 1, Dir: cmcore.MADTimedOut, MAD: cmMAD(wire.AttrREQ)},
		{Device: fakeDev{"rxe1"}, Port: 1, Dir: cmcore.MADReceived, MAD: cmMAD(wire.AttrSIDRREQ)},
		{Device: fakeDev{"rxe1"}, Port: 2, Dir: cmcore.MADDropped, MAD: cmMAD(0x0042)},
		{Device: fakeDev{"rxe1"}, Port: 2, Dir: cmcore.MADDropped, MAD: notCM},
		{Device: fakeDev{"rxe1"}, Port: 2, Dir: cmcore.MADSendFailed, MAD: cmMAD(wire.AttrDREP)},
	} {
		m.ObserveMAD(&ev)
	}
	const want = `
# HELP ucmd_mads_total CM MADs by device, port, type (REQ, REP, ..., other) and direction: sent (first transmissions), retransmitted, send-failed (refused by the endpoint), received (acted on), dropped (undecodable or ignored), timed-out (ran out of retries; nothing on the wire).
# TYPE ucmd_mads_total counter
ucmd_mads_total{device="rxe0",direction="retransmitted",port="1",type="REQ"} 2
ucmd_mads_total{device="rxe0",direction="sent",port="1",type="REQ"} 1
ucmd_mads_total{device="rxe0",direction="timed-out",port="1",type="REQ"} 1
ucmd_mads_total{device="rxe1",direction="dropped",port="2",type="other"} 2
ucmd_mads_total{device="rxe1",direction="received",port="1",type="SIDR_REQ"} 1
ucmd_mads_total{device="rxe1",direction="send-failed",port="2",type="DREP"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "ucmd_mads_total"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(m.Registry(), "ucmd_mads_total"); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}

	// rxe0 retired, then served again: its counters start afresh.
	m.Forget("rxe0")
	m.ObserveMAD(&cmcore.MADEvent{Device: fakeDev{"rxe0"}, Port: 1, Dir: cmcore.MADSent, MAD: cmMAD(wire.AttrREQ)})
	const again = `
# HELP ucmd_mads_total CM MADs by device, port, type (REQ, REP, ..., other) and direction: sent (first transmissions), retransmitted, send-failed (refused by the endpoint), received (acted on), dropped (undecodable or ignored), timed-out (ran out of retries; nothing on the wire).
# TYPE ucmd_mads_total counter
ucmd_mads_total{device="rxe0",direction="sent",port="1",type="REQ"} 1
ucmd_mads_total{device="rxe1",direction="dropped",port="2",type="other"} 2
ucmd_mads_total{device="rxe1",direction="received",port="1",type="SIDR_REQ"} 1
ucmd_mads_total{device="rxe1",direction="send-failed",port="2",type="DREP"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(again), "ucmd_mads_total"); err != nil {
		t.Errorf("after Forget and a new MAD: %v", err)
	}
}

// A device's observer fills the command histogram under the command's
// name ("invalid" for none) and the setup histogram under its side; the
// series exist at zero from the start.
func TestDeviceHistograms(t *testing.T) {
	m := metrics.New(status.ProviderFunc(func() status.Snapshot { return status.Snapshot{} }))
	d := m.Device("sim0")
	// The setup series from the start; a command's with its first.
	if got := counts(histograms(t, m)); len(got) != 2 {
		t.Fatalf("series before any command: %v, want the two setups'", got)
	}
	d.ObserveCommand(abi.CmdCreateID, 20*time.Microsecond, nil)
	d.ObserveCommand(abi.CmdCreateID, 3*time.Millisecond, errors.New("EFAULT"))
	d.ObserveCommand(abi.NumCmds, time.Microsecond, errors.New("EINVAL"))
	d.ObserveCommand(abi.Cmd(1000), time.Microsecond, errors.New("EINVAL"))
	d.ObserveSetup(true, 2*time.Millisecond)
	d.ObserveSetup(false, 300*time.Millisecond)
	d.ObserveSetup(false, 300*time.Millisecond)

	hs := histograms(t, m)
	want := map[string]uint64{
		"ucmd_command_duration_seconds command=CREATE_ID device=sim0":     2,
		"ucmd_command_duration_seconds command=invalid device=sim0":       2,
		"ucmd_connection_setup_duration_seconds device=sim0 side=active":  1,
		"ucmd_connection_setup_duration_seconds device=sim0 side=passive": 2,
	}
	if got := counts(hs); !maps.Equal(got, want) {
		t.Errorf("sample counts %v, want %v (no series of a command never served)", got, want)
	}
	if s := hs["ucmd_command_duration_seconds command=CREATE_ID device=sim0"].GetSampleSum(); s < 0.00301 || s > 0.00303 {
		t.Errorf("CREATE_ID sum %g s, want 0.00302 (base unit seconds)", s)
	}
	if s := hs["ucmd_connection_setup_duration_seconds device=sim0 side=passive"].GetSampleSum(); s < 0.599 || s > 0.601 {
		t.Errorf("passive setup sum %g s, want 0.6", s)
	}
	if problems, err := testutil.GatherAndLint(m.Registry()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	// A retired device's series go, and a late command of it makes none
	// again; another device's stay.
	m.Device("sim1").ObserveCommand(abi.CmdListen, time.Microsecond, nil)
	m.Forget("sim0")
	d.ObserveCommand(abi.CmdListen, time.Microsecond, nil)
	d.ObserveCommand(abi.CmdCreateID, time.Microsecond, nil)
	want = map[string]uint64{
		"ucmd_command_duration_seconds command=LISTEN device=sim1":        1,
		"ucmd_connection_setup_duration_seconds device=sim1 side=active":  0,
		"ucmd_connection_setup_duration_seconds device=sim1 side=passive": 0,
	}
	if got := counts(histograms(t, m)); !maps.Equal(got, want) {
		t.Errorf("after sim0 was forgotten: %v, want %v", got, want)
	}
	// Served again, the device starts from zero.
	m.Device("sim0").ObserveCommand(abi.CmdListen, time.Microsecond, nil)
	if n := histograms(t, m)["ucmd_command_duration_seconds command=LISTEN device=sim0"].GetSampleCount(); n != 1 {
		t.Errorf("LISTEN of sim0 served again: %d, want 1", n)
	}
}

// histograms gathers every command and setup series, by name and labels.
func histograms(t *testing.T, m *metrics.Metrics) map[string]*dto.Histogram {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Histogram{}
	for _, f := range fams {
		if f.GetName() != "ucmd_command_duration_seconds" && f.GetName() != "ucmd_connection_setup_duration_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			out[seriesKey(f.GetName(), mt)] = mt.GetHistogram()
		}
	}
	return out
}

// counts are the sample counts of histograms.
func counts(hs map[string]*dto.Histogram) map[string]uint64 {
	out := make(map[string]uint64, len(hs))
	for k, h := range hs {
		out[k] = h.GetSampleCount()
	}
	return out
}

func seriesKey(name string, mt *dto.Metric) string {
	for _, l := range mt.GetLabel() {
		name += " " + l.GetName() + "=" + l.GetValue()
	}
	return name
}

func TestCheckAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:9435": true, "127.0.0.1:0": true, ":9435": true, "[::1]:9435": true, "localhost:1": true,
		"9435": false, "127.0.0.1": false, "127.0.0.1:http": false, "127.0.0.1:70000": false, "127.0.0.1:-1": false, "": false,
	} {
		if err := metrics.CheckAddr(addr); (err == nil) != ok {
			t.Errorf("CheckAddr(%q): %v, want ok %v", addr, err, ok)
		} else if err != nil && !strings.Contains(err.Error(), "--metrics-listen") {
			t.Errorf("CheckAddr(%q): %v does not name the flag", addr, err)
		}
	}
}

// Readers of one device make a command's series at once: one series, no
// observation lost (run with -race).
func TestDeviceFirstCommandsAtOnce(t *testing.T) {
	m := metrics.New(status.ProviderFunc(func() status.Snapshot { return status.Snapshot{} }))
	d := m.Device("sim0")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				d.ObserveCommand(abi.CmdCreateID, time.Microsecond, nil)
			}
		})
	}
	wg.Wait()
	hs := histograms(t, m)
	if n := hs["ucmd_command_duration_seconds command=CREATE_ID device=sim0"].GetSampleCount(); n != 800 || len(hs) != 3 {
		t.Errorf("CREATE_ID count %d in %d series, want 800 in 3 (with the two setups')", n, len(hs))
	}
}
