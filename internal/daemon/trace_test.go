package daemon_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
	"github.com/ucmd/ucmd/internal/trace"
)

// The daemon's trace socket: the status socket's access rule (0600, or
// 0660 and the --status-group), and a stream of every MAD of a REQ that
// the listener rejects, each with the owning process resolved through the
// ucm files, drawn as a ladder with both (local) sides.
func TestTrace(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	start(t, f, daemon.Config{SimDevices: 1, RuntimeDir: run})
	if fi, err := os.Stat(filepath.Join(run, trace.SocketName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("trace socket: %v, %v", fi.Mode(), err)
	}
	s, err := trace.Dial(t.Context(), run, trace.Request{Filter: trace.Filter{Dev: "sim0"}})
	must(t, err)
	defer s.Close()

	newPair(t, f, run).reject(t)

	var evs []trace.Event
	for len(evs) < 4 {
		e, err := s.Next()
		must(t, err)
		evs = append(evs, e)
	}
	// A send is observed after the endpoint took it, so its receipt by the
	// other end of the loopback may come first: Time orders them.
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) })
	want := []string{"sent REQ", "received REQ", "sent REJ", "received REJ"}
	for i, e := range evs {
		m := e.Decode()
		if got := e.Dir + " " + m.Name; got != want[i] {
			t.Errorf("event %d: %s, want %s", i, got, want[i])
		}
		if e.PID != daemontest.Tgid || e.Comm != daemontest.ProcessName || uint64(e.ServiceID) != 0x5151 || e.Link != trace.LinkRoCE || e.Local.GID == "" {
			t.Errorf("event %d (%s): pid %d %q sid %s link %s local %+v", i, want[i], e.PID, e.Comm, e.ServiceID, e.Link, e.Local)
		}
	}
	var b bytes.Buffer
	must(t, trace.Ladder(&b, evs))
	// Both ends are this daemon's: one arrow per MAD, with the sender's
	// and the receiver's time.
	lines := strings.Split(b.String(), "\n")
	if len(lines) != 7 || !strings.HasPrefix(strings.TrimSpace(lines[4]), "0.000000  |-- REQ --") || !strings.Contains(lines[4], "->|  0.") ||
		!strings.Contains(lines[5], "|<--") || !strings.Contains(lines[5], " REJ --|  0.") {
		t.Errorf("ladder:\n%s", b.String())
	}
}

// --status-group gives the trace socket to the group as well.
func TestTraceGroup(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	gid := os.Getgid()
	start(t, f, daemon.Config{SimDevices: 1, RuntimeDir: run, StatusGroup: strconv.Itoa(gid)})
	fi, err := os.Stat(filepath.Join(run, trace.SocketName))
	if err != nil || fi.Mode().Perm() != 0o660 || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
		t.Fatalf("trace socket: %v %+v %v", fi.Mode(), fi.Sys(), err)
	}
}
