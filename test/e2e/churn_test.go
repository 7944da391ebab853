//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw/umad"
)

// A daemon that has served a few hundred connections with QPs, and seen
// clients killed in the middle of their handshakes and while connected,
// holds once they are gone what it held before: the same open files, the
// same goroutines give or take its idle readers, no file, id, user or
// copy. A leak of any of them per connection or per client would be a slow
// local denial of service on a daemon that runs for months.
func TestDaemonChurnLeavesNothing(t *testing.T) {
	d := startDaemon(t, "--metrics-listen", "127.0.0.1:0")
	addr := d.metricsAddr(t)
	pid := d.cmd.Process.Pid
	remote := "fe80::ff:fe00:2" // rxe1's link-local GID (test/vm/README.md)
	srvArgs := func(n string) []string { return []string{"-d", "rxe1", "-n", n, "-M", "1", "-w", "0"} }
	cliArgs := func(n, p string) []string {
		return []string{"-d", "rxe0", "-g", remote, "-n", n, "-P", p, "-M", "1", "-w", "0"}
	}

	// Warm: the first connection makes what the daemon keeps for good
	// (each port's resolved paths, its pools).
	clientPair(t, d, "0x2001", srvArgs("1"), cliArgs("1", "1"))
	d.waitQuiet(t)
	fds, gs := openFDs(t, pid), goroutines(t, addr)
	t.Logf("before: %v, %d goroutines", fds, gs)

	for round := range 2 {
		sid := func(n int) string { return fmt.Sprintf("%#x", 0x2100+0x10*round+n) }
		clientPair(t, d, sid(0), srvArgs("100"), cliArgs("100", "1"))
		clientPair(t, d, sid(1), srvArgs("100"), cliArgs("10", "10"))
		// Killed mid-flight: the client first, then the server first.
		for i, clientFirst := range []bool{true, false} {
			d.killMidFlight(t, sid(2+i), clientFirst, srvArgs("0"), cliArgs("1000", "10"))
		}
		d.waitQuiet(t)
		t.Logf("after round %d: %v, %d goroutines", round+1, openFDs(t, pid), goroutines(t, addr))
	}

	// Files: no more than before, but for umad send lanes up to their
	// bound. Goroutines: a burst leaves at most a few more CUSE readers
	// waiting than the daemon started with (they exit as they answer,
	// when too many are idle), never one per connection.
	const readerSlack = 8
	deadline := time.Now().Add(20 * time.Second)
	for {
		nf, ng := openFDs(t, pid), goroutines(t, addr)
		leak := nf.leaked(fds)
		if leak == "" && ng <= gs+readerSlack {
			t.Logf("after: %v, %d goroutines", nf, ng)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 400 connections and 4 kills mid-flight: %s; %d goroutines (%d before)\n%s", leak, ng, gs, nf.list)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killMidFlight runs a server on ucm1 that accepts until killed and a
// client on ucm0 that connects 10 at a time, and SIGKILLs both while
// connections are being made: the client first, or the server first
// (whose peer then sees REJs, timeouts and DREQs) and the client a moment
// later.
func (d *daemon) killMidFlight(t *testing.T, sid string, clientFirst bool, srvArgs, cliArgs []string) {
	t.Helper()
	bin := ucmclientBin(t)
	srv := startBackground(t, "server", exec.Command(ucmdBin(t), append([]string{"exec", "--runtime-dir", d.run, "--", bin, "-l", sid}, srvArgs...)...))
	d.waitListening(t, 1)
	cli := startBackground(t, "client", exec.Command(ucmdBin(t), append([]string{"exec", "--runtime-dir", d.run, "--", bin, "-c", "-s", sid}, cliArgs...)...))
	// Wait until connections are being made, so that the kills find ids
	// in every state.
	deadline := time.Now().Add(20 * time.Second)
	for established(t, d) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no connections made\nserver:\n%s\nclient:\n%s", srv.out.String(), cli.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	first, second := srv, cli
	if clientFirst {
		first, second = cli, srv
	}
	first.cmd.Process.Kill()
	first.wait(10 * time.Second)
	time.Sleep(300 * time.Millisecond)
	second.cmd.Process.Kill()
	second.wait(10 * time.Second)
}

// established counts the ids in ESTABLISHED on every node.
func established(t *testing.T, d *daemon) int {
	t.Helper()
	s, err := d.status()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, dev := range s.Devices {
		for _, f := range dev.Files {
			for _, id := range f.IDs {
				if id.State == "ESTABLISHED" {
					n++
				}
			}
		}
	}
	return n
}

// waitQuiet waits until no file is open on any node and no user, copy or
// byte of the memory budget is counted: a killed client's files are
// released when the kernel sends CUSE's RELEASE, a moment after the
// process is gone. A charge left behind would shrink every user's budget
// for good.
func (d *daemon) waitQuiet(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := d.status()
		if err != nil {
			t.Fatal(err)
		}
		open := 0
		for _, dev := range s.Devices {
			open += len(dev.Files)
		}
		if open == 0 && len(s.Limits.Users) == 0 && s.Limits.Copies == 0 && s.Limits.MemoryCharged == 0 {
			return
		}
		if time.Now().After(deadline) {
			d.wantNoFiles(t)
			t.Fatalf("copies in progress: %d; memory charged: %d bytes", s.Limits.Copies, s.Limits.MemoryCharged)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// daemonFiles counts the daemon's open files: its umad files by path,
// and the others.
type daemonFiles struct {
	others int
	umad   map[string]int
	list   string // "fd -> target" lines, for a failure's message
}

func (f daemonFiles) String() string {
	return fmt.Sprintf("%d other files, umad files %v", f.others, f.umad)
}

func openFDs(t *testing.T, pid int) daemonFiles {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := daemonFiles{umad: map[string]int{}}
	for _, e := range ents {
		target, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue // closed since the listing
		}
		f.list += e.Name() + " -> " + target + "\n"
		if strings.HasPrefix(target, "/dev/infiniband/umad") {
			f.umad[target]++
		} else {
			f.others++
		}
	}
	return f
}

// leaked says what in now was not in before: more files other than umad
// files, or more umad files on a port than its receive file and its send
// lanes, which open as sends need them (hw/umad/lanes.go).
func (now daemonFiles) leaked(before daemonFiles) string {
	if now.others > before.others {
		return fmt.Sprintf("%d open files other than umad files, %d before", now.others, before.others)
	}
	for path, n := range now.umad {
		if n > 1+umad.DefaultSendFiles {
			return fmt.Sprintf("%d files open on %s (at most %d: one to receive, %d send lanes)", n, path, 1+umad.DefaultSendFiles, umad.DefaultSendFiles)
		}
	}
	return ""
}

// goroutines reads go_goroutines from the daemon's metrics.
func goroutines(t *testing.T, addr string) int {
	t.Helper()
	_, fams := scrapeMetrics(t, addr)
	n := metric(fams, "go_goroutines")
	if n < 0 {
		t.Fatal("no go_goroutines in the metrics")
	}
	return int(n)
}
