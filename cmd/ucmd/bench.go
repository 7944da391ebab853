package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ucmd/ucmd/internal/storm"
)

func init() { extraCommands = append(extraCommands, newBenchCmd) }

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure the CM at fabric scale on the simulated fabric",
		Long: `Benchmarks that need no HCA, no CUSE and no privileges: many simulated nodes,
each a full ucmd device stack (a ucm device on its own CM, driven by a
libibcm-like application through ucm's write interface), on one in-process
simulated fabric (package internal/storm). See "ucmd bench storm --help" and "ucmd bench listener --help".`,
		Example: `  ucmd bench storm --nodes 256 --latency 100us --loss 0.001
  ucmd bench listener --accept-rate 1000 --mra delayed`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBenchStormCmd(), newBenchListenerCmd())
	return cmd
}

type profFlags struct{ cpu, mem string }

func (p *profFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile of the runs to `FILE`")
	cmd.Flags().StringVar(&p.mem, "memprofile", "", "write a heap profile to `FILE` (storm: at the last run's full mesh; listener: at the end)")
}

// writeHeap writes a heap profile to p.mem.
func (p *profFlags) writeHeap() error {
	m, err := os.Create(p.mem)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(m); err != nil {
		m.Close()
		return err
	}
	return m.Close()
}

// start starts the CPU profile; stop ends it and, if atEnd, writes the
// heap profile.
func (p *profFlags) start(atEnd bool) (stop func() error, err error) {
	stopCPU, err := recordTo(p.cpu, pprof.StartCPUProfile, pprof.StopCPUProfile)
	if err != nil {
		return nil, err
	}
	return func() error {
		if err := stopCPU(); err != nil {
			return err
		}
		if atEnd && p.mem != "" {
			return p.writeHeap()
		}
		return nil
	}, nil
}

// recordTo starts a recording (a CPU profile, an execution trace) into the
// file path; the returned func stops it and closes the file. An empty path
// records nothing.
func recordTo(path string, start func(io.Writer) error, stop func()) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		stop()
		return f.Close()
	}, nil
}

func timeoutFlags(cmd *cobra.Command, t *storm.Timeouts) {
	*t = storm.DefaultTimeouts
	cmd.Flags().Uint8Var(&t.PacketLifeTime, "packet-lifetime", t.PacketLifeTime, "path packet lifetime (5-bit IBTA time)")
	cmd.Flags().Uint8Var(&t.RemoteCMResponseTimeout, "response-timeout", t.RemoteCMResponseTimeout, "REQ's remote CM response timeout (5-bit; REQ interval = 2 ms(plt) + ms(this))")
	cmd.Flags().Uint8Var(&t.LocalCMResponseTimeout, "local-response-timeout", t.LocalCMResponseTimeout, "REQ's local CM response timeout (5-bit; the REP interval)")
	cmd.Flags().Uint8Var(&t.MaxCMRetries, "retries", t.MaxCMRetries, "max CM retries (4 bits)")
}

func newBenchStormCmd() *cobra.Command {
	var cfg storm.Config
	var nodes []int
	var pattern string
	var asJSON bool
	var prof profFlags
	cmd := &cobra.Command{
		Use:   "storm",
		Short: "wire up N simulated nodes and report time, MADs and memory per connection",
		Long: `Run an MPI-style connection storm: N simulated nodes, each a full ucmd device
stack (CM, ucm device, and an application with a listener issuing libibcm's
commands on its open file), connect all-to-all (every pair once, N(N-1)/2 connections, every
node sending about as many REQs as it receives) or in a ring plus on-demand
connections to random peers. The fabric has the given one-way latency,
uniform jitter and loss. Simulated time runs on a fake clock that moves only
when every CM is idle, so "sim" is the protocol's time to full mesh and
"wall" what the CPU work took; one seed replays exactly.

After the mesh every connection must be ESTABLISHED on both sides; then all
are disconnected and, once timewait is over, no id (but the listeners), no
event and no timer may remain in the applications, ucm or the CMs, nor
anything in ucm's budgets once the files are closed. The command fails
otherwise.

Per N it prints: connections, simulated and wall time to full mesh,
connections per wall second, REQ retransmissions, MRAs, timeouts, MADs lost,
the peak heap and the live heap per connection (live heap at full mesh minus
after setup), and the ids' states per node when half the mesh was up
(total, min-max per node).

N is 2 to 49151 (one unicast LID each). A storm whose connections would
need more than the memory available (MemAvailable, at 6.5 KiB a
connection, the measured peak of a wire-up) is refused before any node is
built.`,
		Example: `  ucmd bench storm --nodes 32
  ucmd bench storm --nodes 64,128,256 --latency 100us --loss 0.001
  ucmd bench storm --nodes 1024 --cpuprofile cpu.out --memprofile mem.out
  ucmd bench storm --nodes 128 --pattern ring --on-demand 16 --jitter 50us --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Pattern = storm.Pattern(pattern)
			var heapErr error
			if prof.mem != "" {
				cfg.AtMesh = func() { heapErr = prof.writeHeap() }
			}
			stop, err := prof.start(false)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var results []*storm.Result
			var runErr error
			for _, n := range nodes {
				c := cfg
				c.Nodes = n
				res, err := storm.Run(cmd.Context(), c)
				if res != nil {
					results = append(results, res)
					if !asJSON {
						printStorm(out, res)
					}
				}
				if err != nil {
					runErr = fmt.Errorf("%d nodes: %w", n, err)
					break
				}
			}
			if err := stop(); err != nil && runErr == nil {
				runErr = err
			}
			if heapErr != nil && runErr == nil {
				runErr = heapErr
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(results); err != nil {
					return err
				}
			} else if len(results) > 1 {
				printStormTable(out, results)
			}
			return benchErr(runErr)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&nodes, "nodes", []int{64}, "number of nodes; a list runs one storm per value")
	f.StringVar(&pattern, "pattern", string(storm.AllToAll), "wire-up: all-to-all or ring (ring neighbours, then --on-demand random peers)")
	f.IntVar(&cfg.OnDemand, "on-demand", 8, "ring: random peers each node connects to on first use")
	f.DurationVar(&cfg.OnDemandSpread, "on-demand-spread", 10*time.Millisecond, "ring: first uses fall within this time")
	f.DurationVar(&cfg.StartSpread, "start-spread", 0, "each node starts at a random time within this (0: all at once)")
	f.DurationVar(&cfg.Latency, "latency", 100*time.Microsecond, "one-way fabric latency")
	f.DurationVar(&cfg.Jitter, "jitter", 0, "uniform extra latency per MAD, in [0, jitter)")
	f.Float64Var(&cfg.Loss, "loss", 0.001, "probability that a MAD is lost")
	f.Float64Var(&cfg.Duplicate, "duplicate", 0, "probability that a MAD is delivered twice")
	f.Float64Var(&cfg.Reorder, "reorder", 0, "probability that a MAD is held back to be overtaken")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fabric and of the pattern")
	f.IntVar(&cfg.QueueLen, "queue", 0, "receive queue per port in MADs (0: the simulator's 1024)")
	f.DurationVar(&cfg.Deadline, "sim-deadline", 10*time.Minute, "give up after this much simulated time")
	f.BoolVar(&cfg.NoTeardown, "no-teardown", false, "skip the disconnect phase and its leak check")
	f.BoolVar(&cfg.RealClock, "real-clock", false, "run on the real clock, every CM on its own goroutine: CPU load delays answers and peers retransmit (not reproducible; --sim-deadline is then wall time)")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON")
	timeoutFlags(cmd, &cfg.Timeouts)
	prof.register(cmd)
	return cmd
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func printStorm(w io.Writer, r *storm.Result) {
	c := r.Config
	clk := "fake clock"
	if c.RealClock {
		clk = "real clock"
	}
	fmt.Fprintf(w, "%s, %d nodes, %d connections (latency %v, jitter %v, loss %g, seed %d, %s)\n",
		c.Pattern, c.Nodes, r.Connections, c.Latency, c.Jitter, c.Loss, c.Seed, clk)
	fmt.Fprintf(w, "  full mesh: %d established on both sides, %d failed, %d not established on both ends\n",
		r.Established, r.Failed, r.NotBothSides)
	fmt.Fprintf(w, "  time: %v on the %s, %v wall (%.0f connections/s), %v CPU\n",
		r.SimTime.Round(time.Microsecond), clk, r.WallTime.Round(time.Millisecond), r.ConnsPerSec, r.CPUTime.Round(time.Millisecond))
	fmt.Fprintf(w, "  MADs: %d REQ (%d retransmitted), %d REP, %d RTU, %d MRA, %d REJ; %d retransmissions, %d timeouts; %d lost, %d overflowed\n",
		r.REQs, r.REQRetransmits, r.REPs, r.RTUs, r.MRAs, r.REJs, r.Retransmits, r.Timeouts, r.Lost, r.Overflow)
	fmt.Fprintf(w, "  memory: peak heap %s (runtime total %s), live %s after setup, %s at full mesh: %.0f B/connection\n",
		mib(r.PeakHeap), mib(r.PeakTotal), mib(r.BaseHeap), mib(r.MeshHeap), r.BytesPerConn)
	if len(r.HalfStates) > 0 {
		names := make([]string, 0, len(r.HalfStates))
		for s := range r.HalfStates {
			names = append(names, s)
		}
		slices.Sort(names)
		var b strings.Builder
		for _, s := range names {
			v := r.HalfStates[s]
			fmt.Fprintf(&b, " %s %d (%d-%d)", s, v[0], v[1], v[2])
		}
		fmt.Fprintf(w, "  states at half mesh (total, min-max per node):%s\n", b.String())
	}
	if !c.NoTeardown {
		timers := fmt.Sprintf("%d timers", r.LeakedTimers)
		if c.RealClock {
			timers = "timers not counted (real clock)"
		}
		fmt.Fprintf(w, "  teardown: %v wall; leaked %d ids, %d events, %s; %d held after close\n",
			r.TeardownWall.Round(time.Millisecond), r.LeakedIDs, r.LeakedEvents, timers, r.LeakedAfterClose)
	}
}

func printStormTable(w io.Writer, rs []*storm.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tconnections\tsim\twall\tconns/s\twall µs/conn\tCPU µs/conn\tB/conn\tpeak heap\tREQ rexmit\ttimeouts\t")
	for _, r := range rs {
		us, cpu := 0.0, 0.0
		if r.Established > 0 {
			us = float64(r.WallTime.Microseconds()) / float64(r.Established)
			cpu = float64(r.CPUTime.Microseconds()) / float64(r.Established)
		}
		fmt.Fprintf(tw, "%d\t%d\t%v\t%v\t%.0f\t%.1f\t%.1f\t%.0f\t%s\t%d\t%d\t\n", r.Config.Nodes, r.Connections,
			r.SimTime.Round(time.Millisecond), r.WallTime.Round(time.Millisecond), r.ConnsPerSec, us, cpu,
			r.BytesPerConn, mib(r.PeakHeap), r.REQRetransmits, r.Timeouts)
	}
	tw.Flush()
}

func newBenchListenerCmd() *cobra.Command {
	var cfg storm.ListenerConfig
	var mra string
	var asJSON bool
	var prof profFlags
	cmd := &cobra.Command{
		Use:   "listener",
		Short: "storm one listener with REQs and accept them at a fixed rate",
		Long: `Send --requests REQs evenly within --within from --senders simulated nodes to one
listening id whose application accepts (REP) --accept-rate new connections
per second, oldest first, as a libibcm server after GET_EVENT: with --mra off
or cm the REQs wait in ucm's event queue under its per-user budget (default
limits; --user-events to change) until the application reads one to accept
it. With --mra off
the application never sends MRA (as libibcm programs and the kernel's ib_cm);
delayed gives every REQ it cannot accept at once a delayed MRA (rdma_cm's
IB_CM_MRA_FLAG_DELAY: an MRA answers only a retransmitted REQ); immediate
sends an MRA at once when --mra-queue connections are waiting; cm has the
listener's CM answer a retransmitted REQ whose connection still waits with an
MRA by itself (cmcore's AutoMRA), the application sending none.

Reports how many connections were established and how many REQs timed out,
REQ retransmissions and MRAs, the longest queue and wait, and the live heap
per waiting connection. It fails if any id, event or timer is left after
every id is destroyed. --senders is at most 49150 (one unicast LID each, and
the listener's); more REQs than fit in the memory available, at 6.5 KiB a
connection, are refused before any node is built.`,
		Example: `  ucmd bench listener --accept-rate 2000 --mra delayed
  ucmd bench listener --accept-rate 1000 --mra off --response-timeout 16
  ucmd bench listener --requests 10000 --within 10ms --accept-rate 500 --mra immediate --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.MRA = storm.MRAMode(mra)
			stop, err := prof.start(true)
			if err != nil {
				return err
			}
			res, runErr := storm.RunListener(cmd.Context(), cfg)
			if err := stop(); err != nil && runErr == nil {
				runErr = err
			}
			out := cmd.OutOrStdout()
			if res != nil {
				if asJSON {
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					if err := enc.Encode(res); err != nil {
						return err
					}
				} else {
					printListener(out, res)
				}
			}
			return benchErr(runErr)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Requests, "requests", 10_000, "REQs in the storm")
	f.DurationVar(&cfg.Within, "within", 10*time.Millisecond, "the REQs are sent evenly within this time")
	f.IntVar(&cfg.Senders, "senders", 100, "active nodes sending them")
	f.Float64Var(&cfg.AcceptRate, "accept-rate", 1000, "new connections accepted per second (0: each as soon as its REQ is read)")
	f.StringVar(&mra, "mra", string(storm.MRAOff), "MRA policy: off, delayed, immediate or cm")
	f.Uint8Var(&cfg.MRAServiceTimeout, "mra-timeout", 24, "MRA service timeout (5-bit IBTA time)")
	f.IntVar(&cfg.MRAQueue, "mra-queue", 1, "immediate: send MRA when this many connections are waiting")
	f.DurationVar(&cfg.Latency, "latency", 100*time.Microsecond, "one-way fabric latency")
	f.DurationVar(&cfg.Jitter, "jitter", 0, "uniform extra latency per MAD, in [0, jitter)")
	f.Float64Var(&cfg.Loss, "loss", 0, "probability that a MAD is lost")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fabric")
	f.DurationVar(&cfg.Deadline, "sim-deadline", 30*time.Minute, "give up after this much simulated time")
	f.IntVar(&cfg.Limits.UserEvents, "user-events", 0, "the listener's ucm --user-events (0: ucm's default)")
	f.IntVar(&cfg.Limits.UserIDs, "user-ids", 0, "the listener's ucm --user-ids (0: ucm's default)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	timeoutFlags(cmd, &cfg.Timeouts)
	prof.register(cmd)
	return cmd
}

func printListener(w io.Writer, r *storm.ListenerResult) {
	c := r.Config
	to := c.Timeouts
	fmt.Fprintf(w, "%d REQs within %v from %d senders at one listener; accept %g/s; MRA %s (service timeout %d)\n",
		c.Requests, c.Within, c.Senders, c.AcceptRate, c.MRA, c.MRAServiceTimeout)
	fmt.Fprintf(w, "  timeouts: packet lifetime %d, response %d, retries %d (REQ every %v, gives up after %v)\n",
		to.PacketLifeTime, to.RemoteCMResponseTimeout, to.MaxCMRetries, reqInterval(to), time.Duration(int(to.MaxCMRetries)+1)*reqInterval(to))
	fmt.Fprintf(w, "  %d established on both sides, %d REQs timed out, %d failed; last established after %v simulated (%v wall)\n",
		r.Established, r.Timeouts, r.Failed, r.LastEst.Round(time.Millisecond), r.WallTime.Round(time.Millisecond))
	fmt.Fprintf(w, "  MADs: %d REQ (%d retransmitted), %d MRA (%d received), %d REP, %d REJ; %d lost, %d overflowed\n",
		r.REQs, r.REQRetransmits, r.MRAs, r.MRAsReceived, r.REPs, r.REJs, r.Lost, r.Overflow)
	fmt.Fprintf(w, "  queue: at most %d waiting, longest wait %v; %.0f B live heap per waiting connection\n",
		r.MaxQueue, r.MaxWait.Round(time.Millisecond), r.HeapPerQueued)
	l := r.UCMLimits
	fmt.Fprintf(w, "  ucm at the listener: at most %d events queued and %d ids held, %s charged; %d new connections rejected (limits: %d events and %d ids per file, %d events and %d ids per user, budget %s)\n",
		r.UCMPeakEvents, r.UCMPeakIDs, mib(uint64(r.UCMPeakBytes)), r.UCMRejected, l.MaxEvents, l.MaxIDs, l.UserEvents, l.UserIDs, mib(uint64(l.MemoryBudget)))
	fmt.Fprintf(w, "  after destroy: leaked %d ids, %d events, %d timers; %d held after close\n", r.LeakedIDs, r.LeakedEvents, r.LeakedTimers, r.LeakedAfterClose)
}

// reqInterval is cmcore's REQ retransmission interval for t.
func reqInterval(t storm.Timeouts) time.Duration {
	ms := func(x uint8) time.Duration {
		if x > 8 {
			return time.Duration(1<<(x-8)) * time.Millisecond
		}
		return time.Millisecond
	}
	return 2*ms(t.PacketLifeTime) + ms(t.RemoteCMResponseTimeout)
}

// benchErr gives a storm's error about its settings, the flags', the
// command line's exit status.
func benchErr(err error) error {
	if errors.Is(err, storm.ErrSettings) {
		return usage(err)
	}
	return err
}
