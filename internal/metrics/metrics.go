// Package metrics is ucmd's Prometheus endpoint (`ucmd serve
// --metrics-listen`): a private registry with the Go runtime's and the
// process's collectors, ucmd's own metrics, and an HTTP server for
// /metrics. docs/metrics.md lists every metric.
//
// Two kinds of metric:
//
//   - What `ucmd status` shows (MAD totals, ids per CM state, open files,
//     queued events, failed commands by errno) is not counted twice: a
//     Collector takes one status snapshot per scrape, from the same
//     status.Provider as the control socket, so the two cannot disagree.
//   - What status does not keep is counted as it happens, by the observers
//     of one Device: CM MADs by port, type and direction (a
//     cmcore.Observer), and the histograms of command latency and
//     connection setup time (a ucm.Observer). Without --metrics-listen
//     none of them is attached, and the data path reads no clock for them.
package metrics

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/internal/status"
	"github.com/ucmd/ucmd/ucm"
)

// Namespace prefixes every metric of ucmd's own.
const Namespace = "ucmd"

// Buckets of the histograms, in seconds. A command is served in tens of
// microseconds unless it waits (GET_EVENT for an event, a slow client's
// memory); a connection is set up in milliseconds on a quiet fabric and in
// seconds when REQs or REPs are retransmitted.
var (
	CommandBuckets = prometheus.ExponentialBuckets(10e-6, 4, 10)  // 10 µs .. 2.6 s
	SetupBuckets   = prometheus.ExponentialBuckets(100e-6, 4, 11) // 100 µs .. 105 s
)

// Metrics is one daemon's registry.
type Metrics struct {
	reg   *prometheus.Registry
	cmds  *prometheus.HistogramVec
	setup *prometheus.HistogramVec
	mads  *prometheus.CounterVec
	// madCounters caches mads' series (madKey → prometheus.Counter).
	madCounters sync.Map

	mu   sync.Mutex         // orders the making of command series with Forget
	devs map[string]*Device // by name, the devices served and not forgotten
}

// New returns the registry of a daemon whose state p snapshots (the
// daemon's status.Provider), with the Go and process collectors.
func New(p status.Provider) *Metrics {
	m := &Metrics{
		devs: make(map[string]*Device),
		reg:  prometheus.NewRegistry(),
		cmds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "command_duration_seconds",
			Help:    "Time a ucm device took to answer a write() (a command), by device and command (the ABI's names: EVENT is GET_EVENT, which includes its wait for an event; \"invalid\": no known command).",
			Buckets: CommandBuckets,
		}, []string{"device", "command"}),
		setup: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "connection_setup_duration_seconds",
			Help:    "Time from SEND_REQ (side active) or the REQ's arrival (side passive) to ESTABLISHED (SEND_RTU; the RTU's arrival or COMM_EST), by device and side.",
			Buckets: SetupBuckets,
		}, []string{"device", "side"}),
		mads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "mads_total",
			Help: "CM MADs by device, port, type (REQ, REP, ..., other) and direction: sent (first transmissions), retransmitted, send-failed (refused by the endpoint), received (acted on), dropped (undecodable or ignored), timed-out (ran out of retries; nothing on the wire).",
		}, []string{"device", "port", "type", "direction"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.cmds, m.setup, m.mads,
		&snapshotCollector{p: p, maxAge: SnapshotMaxAge},
	)
	return m
}

// Registry returns the registry, for tests (prometheus/testutil).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in Prometheus' text (or negotiated) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Device returns the ucm.Observer of the device named (its RDMA device
// name, as status shows it), for its ucm.Config.Observer. Its two setup
// series exist, at zero, from now on; a command's series appears with the
// device's first command of that kind, as a MAD type's does (ObserveMAD,
// which m makes for every device itself). Made up front, the 19 command
// histograms were 247 series a device, idle or not: 20,000 for the 82
// Soft-RoCE devices of the test VM.
func (m *Metrics) Device(name string) *Device {
	d := &Device{m: m, name: name}
	d.active = m.setup.WithLabelValues(name, "active")
	d.passive = m.setup.WithLabelValues(name, "passive")
	m.mu.Lock()
	m.devs[name] = d
	m.mu.Unlock()
	return d
}

// Forget drops every series of the device named: its command and setup
// histograms and its MAD counters. The daemon calls it when the device is
// retired (docs/hotplug.md), after its CM has stopped; a device of that
// name served later starts from zero, which Prometheus reads as a counter
// reset. A command of the retired device still finishing (its handler
// stuck in a copy past the shutdown's grace) makes no series again.
func (m *Metrics) Forget(name string) {
	l := prometheus.Labels{"device": name}
	m.mu.Lock()
	delete(m.devs, name)
	m.cmds.DeletePartialMatch(l)
	m.mu.Unlock()
	m.setup.DeletePartialMatch(l)
	m.mads.DeletePartialMatch(l)
	m.madCounters.Range(func(k, _ any) bool {
		if k.(madKey).device == name {
			m.madCounters.Delete(k)
		}
		return true
	})
}

func commandLabel(c abi.Cmd) string {
	if !c.Valid() {
		return "invalid"
	}
	return c.String()
}

// Device times one device's commands and connection setups: a
// ucm.Observer.
type Device struct {
	m               *Metrics
	name            string
	cmds            [abi.NumCmds + 1]atomic.Pointer[observer] // by abi.Cmd; NumCmds: invalid
	active, passive prometheus.Observer
}

type observer struct{ prometheus.Observer }

// discard is the observer of a forgotten device's new series.
var discard = &observer{prometheus.ObserverFunc(func(float64) {})}

// ObserveCommand implements ucm.Observer.
func (d *Device) ObserveCommand(cmd abi.Cmd, took time.Duration, _ error) {
	if !cmd.Valid() {
		cmd = abi.NumCmds
	}
	o := d.cmds[cmd].Load()
	if o == nil {
		o = d.command(cmd)
	}
	o.Observe(took.Seconds())
}

// command makes cmd's series, once.
func (d *Device) command(cmd abi.Cmd) *observer {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if o := d.cmds[cmd].Load(); o != nil {
		return o
	}
	o := discard
	if d.m.devs[d.name] == d { // not forgotten, nor served again since
		o = &observer{d.m.cmds.WithLabelValues(d.name, commandLabel(cmd))}
	}
	d.cmds[cmd].Store(o)
	return o
}

// ObserveSetup implements ucm.Observer.
func (d *Device) ObserveSetup(active bool, took time.Duration) {
	if active {
		d.active.Observe(took.Seconds())
		return
	}
	d.passive.Observe(took.Seconds())
}

// SnapshotMaxAge is how long scrapes share one status snapshot. A
// snapshot walks every id of every open file, and whoever reaches the
// endpoint may scrape as often as it likes: at most one a second bounds
// what that costs the daemon, and the figures are at most a second old.
const SnapshotMaxAge = time.Second

// snapshotCollector turns the status snapshot into metrics, taking a new
// one when the last is maxAge old; scrapes that arrive while one is being
// taken wait for it.
type snapshotCollector struct {
	p      status.Provider
	maxAge time.Duration

	mu   sync.Mutex
	at   time.Time // when last was taken; zero: never
	last status.Snapshot
}

func (c *snapshotCollector) snapshot() status.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) >= c.maxAge {
		c.last = c.p.Snapshot()
		c.at = time.Now()
	}
	return c.last
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

var (
	descInfo = desc("info", "Always 1: the running ucmd's version and fabric (umad or sim).", "version", "fabric")
	descDev  = desc("device_info", "Always 1: a served RDMA device, its node and node GUID.", "device", "node", "node_guid")

	descSent    = desc("cm_mads_sent_total", "CM MADs handed to the device's endpoints, retransmissions and refused sends included (status: sent).", "device")
	descRecv    = desc("cm_mads_received_total", "CM MADs received, dropped ones included (status: received).", "device")
	descRetx    = desc("cm_retransmissions_total", "CM MADs retransmitted after a timeout (status: retransmitted).", "device")
	descTimeout = desc("cm_timeouts_total", "CM messages that ran out of retries, each a *_ERROR event (status: timed_out).", "device")
	descDropped = desc("cm_mads_dropped_total", "Received MADs dropped as not CM messages ucmd decodes (status: dropped).", "device")
	descSendErr = desc("cm_send_errors_total", "Sends the endpoint refused, each lost like a MAD on the wire (status: send_failed).", "device")

	descIDs    = desc("ids", "ucm ids of the device's open files, by CM state (new connections not yet delivered are not counted).", "device", "state")
	descFiles  = desc("open_files", "Open files of the device's node.", "device")
	descEvents = desc("queued_events", "Events queued on the device's open files, not yet read by GET_EVENT.", "device")
	descWaits  = desc("waiting_commands", "Commands waiting on the device's open files: GET_EVENTs for an event, DESTROY_IDs for the id's other commands, copies for a copy slot (status: waiting_commands).", "device")
	descCopyW  = desc("copy_waiting_commands", "Commands waiting for a copy slot (--user-copies of their user's, --copies of all users'): nonzero for long, some user's copies into or out of client memory hang (status: waiting_for_copy).", "device")
	descErrors = desc("command_errors_total", "Commands that failed on the device, by the errno the client got (status: errors).", "device", "errno")
	descNeigh  = desc("neighbour_resolutions_total", "On a RoCE port, first sends to peers not yet reached whose MAC ucmd had the kernel resolve through rtnetlink first, by result: resolved, failed (the send failed with ETIMEDOUT, no umad file held), unanswered (rtnetlink could not be asked, e.g. without CAP_NET_ADMIN: resolved in umad's write, on a file shared with every such send) (status: ports' neighbours).", "device", "port", "result")
	descRecvOK = desc("port_receiving", "1 while the CM receives MADs on the port, 0 once its reads failed (a removed device; status: state STOPPED).", "device", "port")

	descCharged  = desc("memory_charged_bytes", "What all users' files, ids, events and waiting commands cost the daemon, as the memory budget estimates it (status: limits.memory_charged).")
	descBudget   = desc("memory_budget_bytes", "The memory budget, --memory-budget (status: limits.memory_budget).")
	descUsers    = desc("users", "Users (uids) holding a file, id, event or waiting command (status: limits.users).")
	descTimewait = desc("timewait_ids", "ids destroyed but kept by the CM for their connection's timewait, all users': they count against --user-ids and the memory budget until it ends (status: limits.users[].timewait_ids).")
	descCopies   = desc("copies_in_progress", "Copies into or out of client memory in progress, all users' (at most --copies): each takes microseconds, so a count that stays up is copies that hang; status's users say whose (status: limits.copies_in_progress).")
	descRefusals = desc("limit_refusals_total", "What each limit refused, by its ucmd serve flag (user-ids, ..., memory-budget): a command's ENOMEM or EMFILE, a new connection rejected, an event dropped (status: limits.refused).", "limit")

	descRetired  = desc("devices_retired_total", "RDMA devices ucmd stopped serving since it started, by reason: gone (no longer listed), ports-stopped (every port's reads failed), registered-again (another node GUID or umad files), channel-failed (the kernel ended the node's CUSE channel, an abort; served again at once) (status: retired).", "reason")
	descUnserved = desc("device_unserved", "Always 1: an RDMA device found but not served, tried again later (status: unserved; e.g. the kernel's ib_cm owns its CM class).", "device")
)

// states are the CM states, every one reported for every device.
var states = func() []string {
	var s []string
	for st := cmcore.StateIdle; st <= cmcore.StateSIDRREQRcvd; st++ {
		s = append(s, st.String())
	}
	return s
}()

// Describe implements prometheus.Collector.
func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descDev, descSent, descRecv, descRetx, descTimeout, descDropped, descSendErr, descIDs, descFiles, descEvents, descWaits, descCopyW, descErrors, descRecvOK, descNeigh, descCharged, descBudget, descUsers, descTimewait, descCopies, descRefusals, descRetired, descUnserved} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, s.Version, s.Fabric)
	for _, d := range s.Devices {
		ch <- prometheus.MustNewConstMetric(descDev, prometheus.GaugeValue, 1, d.Name, d.Node, d.NodeGUID)
		counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), append([]string{d.Name}, labels...)...)
		}
		gauge := func(desc *prometheus.Desc, v int, labels ...string) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v), append([]string{d.Name}, labels...)...)
		}
		counter(descSent, d.Counters.Sent)
		counter(descRecv, d.Counters.Received)
		counter(descRetx, d.Counters.Retransmitted)
		counter(descTimeout, d.Counters.TimedOut)
		counter(descDropped, d.Counters.Dropped)
		counter(descSendErr, d.Counters.SendFailed)
		for _, errno := range slices.Sorted(maps.Keys(d.Errors)) {
			counter(descErrors, d.Errors[errno], errno)
		}
		byState := make(map[string]int, len(states))
		for _, st := range states {
			byState[st] = 0
		}
		events, waits, copyWaits := 0, 0, 0
		for _, f := range d.Files {
			events += f.Events
			waits += f.Waiting
			copyWaits += f.CopyWaiting
			for _, id := range f.IDs {
				byState[id.State]++
			}
		}
		for _, st := range slices.Sorted(maps.Keys(byState)) {
			gauge(descIDs, byState[st], st)
		}
		gauge(descFiles, len(d.Files))
		gauge(descEvents, events)
		gauge(descWaits, waits)
		gauge(descCopyW, copyWaits)
		for _, p := range d.Ports {
			up := 1
			if p.ReceiveError != "" {
				up = 0
			}
			gauge(descRecvOK, up, strconv.Itoa(p.Num))
			if n := p.Neighbours; n != nil {
				num := strconv.Itoa(p.Num)
				counter(descNeigh, n.Resolved, num, "resolved")
				counter(descNeigh, n.Failed, num, "failed")
				counter(descNeigh, n.Unanswered, num, "unanswered")
			}
		}
	}
	for _, u := range s.Unserved {
		ch <- prometheus.MustNewConstMetric(descUnserved, prometheus.GaugeValue, 1, u.Name)
	}
	for _, r := range status.RetireReasons {
		ch <- prometheus.MustNewConstMetric(descRetired, prometheus.CounterValue, float64(s.Retired[r]), r)
	}
	l := s.Limits
	ch <- prometheus.MustNewConstMetric(descCharged, prometheus.GaugeValue, float64(l.MemoryCharged))
	ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, float64(l.MemoryBudget))
	ch <- prometheus.MustNewConstMetric(descUsers, prometheus.GaugeValue, float64(len(l.Users)))
	timewait := 0
	for _, u := range l.Users {
		timewait += u.Timewait
	}
	ch <- prometheus.MustNewConstMetric(descTimewait, prometheus.GaugeValue, float64(timewait))
	ch <- prometheus.MustNewConstMetric(descCopies, prometheus.GaugeValue, float64(l.Copies))
	// Every limit, zeros included, so that an alert on an increase needs
	// no series to appear first.
	for _, name := range limitNames {
		ch <- prometheus.MustNewConstMetric(descRefusals, prometheus.CounterValue, float64(l.Refused[name]), name)
	}
}

// limitNames are the limits' flag names, as ucm.Limit names them.
var limitNames = func() []string {
	names := make([]string, ucm.NumLimits)
	for l := range ucm.NumLimits {
		names[l] = l.String()
	}
	return names
}()
