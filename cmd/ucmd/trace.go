package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/internal/status"
	"github.com/ucmd/ucmd/internal/trace"
)

type traceFlags struct {
	write     string
	read      string
	asJSON    bool
	ladder    bool
	quiet     bool
	count     int
	buffer    int
	commID    string
	serviceID string
	ibLink    string
}

func newTraceCmd(g *globalFlags) *cobra.Command {
	var tf traceFlags
	cmd := &cobra.Command{
		Use:   "trace [dev NAME] [service-id ID] [comm-id ID] [pid N]",
		Short: "stream the CM MADs of the running daemon (text, JSON, pcapng, ladder)",
		Long: `Stream every CM MAD the running ucmd sends, receives, retransmits, drops or
fails to send, and every final timeout, from its trace socket
(<runtime-dir>/trace.sock; root only, or also the group of serve's
--status-group, as ucmd status: MADs carry private data). One line per MAD:
time, device:port, direction, message, TID, the local and remote comm ids,
service id, the process owning the connection (pid/name), and a decode.
Stop with Ctrl-C (or -c N).

Filters, as with ucmd status: dev NAME (the RDMA device or its node, ucm0),
service-id ID, comm-id ID, pid N (the process that opened the ucm file). A
service id or comm id filter follows the connection: its REP, RTU, DREQ,
... pass too, from both sides when both ends are local.

-w FILE writes a pcapng capture that Wireshark and tshark read: RoCEv2
frames (Ethernet/IP/UDP 4791/BTH/DETH/MAD/ICRC) on RoCE ports,
on IB ports the LRH frames (LRH, GRH, BTH, DETH, MAD, ICRC, VCRC) in ERF
InfiniBand records, which Wireshark decodes (--ib-linktype infiniband:
LINKTYPE_INFINIBAND, which Wireshark 4.0 does not); rebuilt from what umad
reports (docs/trace.md says how). --json
prints the events as JSON lines, which -r reads back. --ladder draws each
connection's message sequence as two columns when the trace ends.

The daemon keeps a bounded buffer per trace (--buffer MADs): a reader too
slow to keep up loses MADs, never slows the CM, and the stream says how many
were lost where.`,
		Example: `  sudo ucmd trace
  sudo ucmd trace dev ucm0 service-id 0x1234
  sudo ucmd trace -w cm.pcapng            # then: tshark -r cm.pcapng -V
  sudo ucmd trace --ladder --comm-id 0x1a2b3c4d
  sudo ucmd trace --json > cm.jsonl; ucmd trace -r cm.jsonl --ladder --service-id 0x1234`,
		Args: func(_ *cobra.Command, args []string) error {
			_, err := trace.ParseFilter(args)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTrace(cmd, g, &tf, args)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&tf.write, "write", "w", "", "write a pcapng capture to `FILE` (mode 0600)")
	fs.StringVarP(&tf.read, "read", "r", "", "read a saved --json trace from `FILE` instead of the daemon")
	fs.BoolVar(&tf.asJSON, "json", false, "print JSON lines instead of text")
	fs.BoolVar(&tf.ladder, "ladder", false, "draw each connection's ladder when the trace ends, instead of lines")
	fs.BoolVarP(&tf.quiet, "quiet", "q", false, "print no lines (with -w)")
	fs.IntVarP(&tf.count, "count", "c", 0, "stop after `N` MADs")
	fs.IntVar(&tf.buffer, "buffer", trace.DefaultBuffer, "the daemon's buffer for this trace, in `MADs` (at most 65536)")
	fs.StringVar(&tf.commID, "comm-id", "", "only this connection: a local or remote comm `ID` (filter comm-id)")
	fs.StringVar(&tf.serviceID, "service-id", "", "only connections to this service `ID` (filter service-id)")
	fs.StringVar(&tf.ibLink, "ib-linktype", "erf", "IB ports' frames in -w: erf (ERF InfiniBand records, which Wireshark decodes) or infiniband (LINKTYPE_INFINIBAND, which Wireshark 4.0 does not)")
	return cmd
}

func runTrace(cmd *cobra.Command, g *globalFlags, tf *traceFlags, args []string) error {
	f, err := trace.ParseFilter(args)
	if err != nil {
		return err
	}
	var extra []string
	if tf.commID != "" {
		extra = append(extra, "comm-id", tf.commID)
	}
	if tf.serviceID != "" {
		extra = append(extra, "service-id", tf.serviceID)
	}
	if len(extra) > 0 {
		ef, err := trace.ParseFilter(extra)
		if err != nil {
			return err
		}
		if ef.CommID != 0 {
			f.CommID = ef.CommID
		}
		if ef.ServiceID != nil {
			f.ServiceID = ef.ServiceID
		}
	}
	if tf.ibLink != "erf" && tf.ibLink != "infiniband" {
		return usage(fmt.Errorf("--ib-linktype %q: want erf or infiniband", tf.ibLink))
	}
	if tf.buffer <= 0 || tf.buffer > trace.MaxBuffer {
		return usage(fmt.Errorf("--buffer %d: want 1 to %d", tf.buffer, trace.MaxBuffer))
	}
	// Flags that would be ignored are refused: each says what to print.
	switch {
	case tf.ladder && tf.asJSON:
		return usage(errors.New("--ladder and --json: the ladder is drawn from the text of the trace; pick one"))
	case tf.ladder && tf.quiet:
		return usage(errors.New("--ladder and --quiet: the ladder is the trace's only output; pick one"))
	case tf.quiet && tf.write == "":
		return usage(errors.New("--quiet without --write: nothing would be printed or written"))
	case tf.count < 0:
		return usage(fmt.Errorf("--count %d: want 0 (no limit) or more", tf.count))
	}
	// SIGHUP (the terminal closed) too: the runtime's default would exit
	// at once, leaving the capture cut short.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	// The capture file first: a path that cannot be written fails before
	// "tracing" is printed. It is emptied once the trace has started.
	var capture *trace.Capture
	var capFile *os.File
	if tf.write != "" {
		capFile, err = createCapture(tf.write, os.Getenv)
		if err != nil {
			return fmt.Errorf("trace -w: %w", err)
		}
		defer capFile.Close()
	}
	var src *trace.Stream
	var match *trace.Matcher
	if tf.read != "" {
		in, err := os.Open(tf.read)
		if err != nil {
			return fmt.Errorf("trace -r: %w", err)
		}
		defer in.Close()
		src = trace.NewReader(in)
		match = trace.NewMatcher(f)
	} else {
		if f.Dev != "" {
			if f.Dev, err = deviceName(ctx, g.runtimeDir, f.Dev); err != nil {
				return err
			}
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		src, err = trace.Dial(dctx, g.runtimeDir, trace.Request{Filter: f, Buffer: tf.buffer})
		cancel()
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.ErrOrStderr(), "ucmd trace: tracing, Ctrl-C to stop")
	}
	if capFile != nil {
		if err := capFile.Truncate(0); err != nil {
			return fmt.Errorf("trace -w: %w", err)
		}
		capture = trace.NewCapture(capFile)
		if tf.ibLink == "infiniband" {
			capture.IBLinkType = trace.LinkTypeInfiniBand
		}
	}
	// The signal (or the command's context) ends the stream.
	go func() {
		<-ctx.Done()
		src.Close()
	}()

	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	enc := json.NewEncoder(out)
	var kept []trace.Event
	var mads, lost uint64
	var readErr error
	for tf.count == 0 || mads < uint64(tf.count) {
		ev, err := src.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				readErr = err
			}
			break
		}
		if match != nil && !match.Match(&ev) {
			continue
		}
		if ev.Lost > 0 {
			lost += ev.Lost
		} else {
			mads++
		}
		if capture != nil && ev.Lost == 0 {
			if err := capture.Write(&ev); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "ucmd trace: -w: %v\n", err)
			}
		}
		switch {
		case tf.ladder:
			if ev.Lost == 0 {
				kept = append(kept, ev)
			}
		case tf.quiet:
		case tf.asJSON:
			if err := enc.Encode(&ev); err != nil {
				return fmt.Errorf("trace: %w", err)
			}
		default:
			if err := trace.WriteLine(out, &ev); err != nil {
				return fmt.Errorf("trace: %w", err)
			}
		}
		// Lines go out as they come, unless more are already waiting.
		if src.Buffered() == 0 {
			if err := out.Flush(); err != nil {
				return fmt.Errorf("trace: %w", err)
			}
		}
	}
	src.Close()
	if tf.ladder {
		if err := trace.Ladder(out, kept); err != nil {
			return fmt.Errorf("trace: %w", err)
		}
	}
	summary := fmt.Sprintf("ucmd trace: %d MADs", mads)
	if lost > 0 {
		summary += fmt.Sprintf(", %d lost (the reader was too slow; --buffer)", lost)
	}
	if capture != nil {
		if err := capture.Close(); err != nil {
			return err
		}
		if err := capFile.Close(); err != nil {
			return fmt.Errorf("trace -w: %w", err)
		}
		summary += fmt.Sprintf(", %d frames written to %s", capture.Frames(), tf.write)
	}
	fmt.Fprintln(cmd.ErrOrStderr(), summary)
	return readErr
}

// deviceName resolves a node name (ucm0, /dev/infiniband/ucm0) to its RDMA
// device through the status socket; an RDMA device name stays as it is.
func deviceName(ctx context.Context, runDir, dev string) (string, error) {
	base := filepath.Base(dev)
	if !strings.HasPrefix(base, "ucm") {
		return dev, nil
	}
	if _, err := strconv.Atoi(strings.TrimPrefix(base, "ucm")); err != nil {
		return dev, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	snap, err := status.Fetch(ctx, runDir)
	if err != nil {
		return "", err
	}
	for _, d := range snap.Devices {
		if filepath.Base(d.Node) == base {
			return d.Name, nil
		}
	}
	return "", fmt.Errorf("trace filter dev %s: no such node", dev)
}

// createCapture opens the capture file, readable by its owner only (it
// holds the MADs' private data), not yet truncated: a trace that fails to
// start leaves an earlier capture as it was. Under sudo it is opened as
// the user who ran sudo would open it, with their fsuid and fsgid on a
// thread of its own: the file is theirs to open in Wireshark, and a path
// they could not write (a symlink to another's file, say) fails as it
// would for them, where root opening it and then giving it away would
// hand them any file.
func createCapture(path string, getenv func(string) string) (*os.File, error) {
	uid, uerr := strconv.Atoi(getenv("SUDO_UID"))
	gid, gerr := strconv.Atoi(getenv("SUDO_GID"))
	if os.Geteuid() != 0 || uerr != nil || gerr != nil || uid <= 0 || gid < 0 {
		return os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	}
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		// Never unlocked: the thread, its fs ids changed, ends with
		// the goroutine instead of serving others.
		runtime.LockOSThread()
		unix.Setfsgid(gid)
		unix.Setfsuid(uid)
		if got, _ := unix.SetfsuidRetUid(-1); got != uid {
			ch <- opened{nil, fmt.Errorf("setfsuid(%d) did not take", uid)}
			return
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
		ch <- opened{f, err}
	}()
	r := <-ch
	return r.f, r.err
}
