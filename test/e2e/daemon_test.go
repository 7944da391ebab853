//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/internal/syncbuf"
)

// The daemon end to end, through the real kernel's CUSE on rxe0/rxe1
// (issue: cmd/ucmd). Each test starts its own `ucmd serve` and stops it with
// SIGTERM, asserting a clean exit.

// syncBuffer is ucmd's log as the test reads it while ucmd writes.
type syncBuffer struct{ syncbuf.Buffer }

// wait waits up to 20 s for a match of re and returns it with its
// submatches, or nil. Output reaches the buffer through a pipe and a
// goroutine of os/exec's, which may not have copied a line yet when what
// a test waited for has happened, even where the process wrote the line
// first: on a guest with one vCPU the daemon's line about a failed
// SEND_REQ (logged before its reply) was not here when the client's
// write(2) returned. Some lines come after the fact (a device's
// retirement is logged once its node is gone).
func (s *syncBuffer) wait(re *regexp.Regexp) []string {
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := re.FindStringSubmatch(s.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type daemon struct {
	t   *testing.T
	cmd *exec.Cmd
	run string // runtime dir
	log *syncBuffer
	// exited is closed when the process ends; err is its Wait result.
	exited chan struct{}
	err    error
}

// startDaemon runs `ucmd serve` with args and waits until its status
// socket answers with every node in place.
func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, run: t.TempDir(), log: &syncBuffer{}, exited: make(chan struct{})}
	d.cmd = exec.Command(ucmdBin(t), append([]string{"serve", "--runtime-dir", d.run, "--log-level", "debug"}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("ucmd log:\n%s", d.log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-d.exited:
			t.Fatalf("ucmd serve exited early (%v):\n%s", d.err, d.log.String())
		default:
		}
		if _, err := d.status(); err == nil {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("ucmd serve not ready after 20s:\n%s", d.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and insists on a clean, prompt exit.
func (d *daemon) stop() {
	select {
	case <-d.exited:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		if d.err != nil {
			d.t.Errorf("ucmd serve exited with %v after SIGTERM", d.err)
		}
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		d.t.Errorf("ucmd serve did not exit within 15s of SIGTERM")
	}
}

// ucmd runs a ucmd subcommand against this daemon's runtime dir.
func (d *daemon) ucmd(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	full := append([]string{args[0], "--runtime-dir", d.run}, args[1:]...)
	out, err := exec.CommandContext(ctx, ucmdBin(d.t), full...).CombinedOutput()
	return string(out), err
}

type statusJSON struct {
	Devices []struct {
		Name  string `json:"name"`
		Node  string `json:"node"`
		Ports []struct {
			State      string `json:"state"`
			GID0       string `json:"gid0"`
			Neighbours *struct {
				Resolved   uint64 `json:"resolved"`
				Failed     uint64 `json:"failed"`
				Unanswered uint64 `json:"unanswered"`
				Error      string `json:"error"`
			} `json:"neighbours"`
		} `json:"ports"`
		Files []struct {
			PID         int    `json:"pid"` // the opener's process, not its thread
			UID         uint32 `json:"uid"`
			Comm        string `json:"comm"`
			Waiting     int    `json:"waiting_commands"`
			CopyWaiting int    `json:"waiting_for_copy"`
			IDs         []struct {
				State string `json:"state"`
				// A hex string ("0x..."): decoding fails if it is a number.
				ServiceID string `json:"service_id"`
			} `json:"ids"`
		} `json:"files"`
		Counters struct {
			Sent     uint64 `json:"sent"`
			Received uint64 `json:"received"`
		} `json:"counters"`
		Errors map[string]uint64 `json:"errors"` // failed commands by errno
	} `json:"devices"`
	Retired map[string]uint64 `json:"retired"` // devices retired, by reason
	Limits  struct {
		Copies        int   `json:"copies_in_progress"`
		MemoryCharged int64 `json:"memory_charged"`
		Users         []struct {
			UID     uint32 `json:"uid"`
			Files   int    `json:"files"`
			IDs     int    `json:"ids"`
			Waiting int    `json:"waiting_commands"`
			Copies  int    `json:"copies_in_progress"`
			Memory  int64  `json:"memory_charged"`
		} `json:"users"`
		Refused map[string]uint64 `json:"refused"` // by limit
	} `json:"limits"`
}

func (d *daemon) status() (statusJSON, error) {
	var s statusJSON
	out, err := d.ucmd("status", "--json")
	if err != nil {
		return s, fmt.Errorf("ucmd status: %v: %s", err, out)
	}
	return s, json.Unmarshal([]byte(out), &s)
}

// wantNoFiles: once the clients have exited, no file is left open on any
// node, and no user holds anything once the connections' timewaits are
// over (their ids stay charged until then: a second or two at the
// clients' default packet lifetime).
func (d *daemon) wantNoFiles(t *testing.T) {
	t.Helper()
	s, err := d.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range s.Devices {
		if len(dev.Files) != 0 {
			t.Errorf("%s still has open files after the clients exited: %+v", dev.Name, dev.Files)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(s.Limits.Users) != 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if s, err = d.status(); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.Limits.Users) != 0 {
		t.Errorf("users still counted 20 s after the clients exited: %+v", s.Limits.Users)
	}
}

// waitListening waits until device dev has an id in LISTEN, so that a
// client started next cannot race the server's LISTEN (and get REJ 8).
func (d *daemon) waitListening(t *testing.T, dev int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if s, err := d.status(); err == nil && len(s.Devices) > dev {
			for _, f := range s.Devices[dev].Files {
				for _, id := range f.IDs {
					if id.State == "LISTEN" {
						if !strings.HasPrefix(id.ServiceID, "0x") {
							t.Errorf("status --json: service id %q is not a hex string", id.ServiceID)
						}
						return
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no LISTEN id on device %d after 20 s", dev)
}

func ucmclientBin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("UCMCLIENT_BIN")
	if p == "" {
		p, _ = filepath.Abs("../../bin/ucmclient")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("ucmclient not built (make clients): %v", err)
	}
	return p
}

func TestDaemonNodesAndDiscovery(t *testing.T) {
	d := startDaemon(t, "--fixed-numbers")
	for i, dev := range []string{"rxe0", "rxe1"} {
		node := fmt.Sprintf("/dev/infiniband/ucm%d", i)
		var st unix.Stat_t
		if err := unix.Stat(node, &st); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		if st.Mode&0o777 != 0o666 || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			t.Errorf("%s mode %o, want a 0666 character device", node, st.Mode)
		}
		if maj, min := unix.Major(st.Rdev), unix.Minor(st.Rdev); maj != 231 || min != uint32(224+i) {
			t.Errorf("%s is %d:%d, want 231:%d", node, maj, min, 224+i)
		}
		out, err := d.ucmd("exec", "--", "cat", fmt.Sprintf("/sys/class/infiniband_cm/ucm%d/ibdev", i))
		if err != nil || out != dev+"\n" {
			t.Errorf("ucmd exec cat ucm%d/ibdev: %q, %v; want %q", i, out, err, dev)
		}
	}
	if out, err := d.ucmd("exec", "--", "cat", "/sys/class/infiniband_cm/abi_version"); err != nil || out != "5\n" {
		t.Errorf("abi_version inside ucmd exec: %q, %v", out, err)
	}
	if _, err := os.Stat("/sys/class/infiniband_cm"); !os.IsNotExist(err) {
		t.Errorf("/sys/class/infiniband_cm visible outside ucmd exec: %v", err)
	}
	s, err := d.status()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Devices) != 2 || s.Devices[0].Name != "rxe0" || s.Devices[1].Name != "rxe1" ||
		s.Devices[0].Node != "/dev/infiniband/ucm0" || s.Devices[0].Ports[0].State != "ACTIVE" {
		t.Errorf("status: %+v", s)
	}
	text, err := d.ucmd("status")
	// one row per device in the ports table: DEV NODE GUID PORT ...
	rows := regexp.MustCompile(`(?m)^(rxe[01])\s+/dev/infiniband/ucm[01]\s`).FindAllStringSubmatch(text, -1)
	if err != nil || len(rows) != 2 || rows[0][1] != "rxe0" || rows[1][1] != "rxe1" {
		t.Errorf("ucmd status text: %v\n%s", err, text)
	}
}

// Every ioctl gets ENOTTY, as from ib_ucm, which had none, whatever its
// argument: restricted CUSE ioctls copied _IOC_SIZE(cmd) bytes from the
// argument first, and a bad pointer got EFAULT.
func TestDaemonIoctlENOTTY(t *testing.T) {
	startDaemon(t)
	f, err := os.OpenFile("/dev/infiniband/ucm0", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64) // on the heap: its address stays put
	const ioc = uintptr('u')<<8 | 1
	for _, c := range []struct {
		name string
		req  uintptr
		arg  uintptr
	}{
		{"_IO", ioc, 0},
		{"_IOW, a good pointer", 1<<30 | 64<<16 | ioc, uintptr(unsafe.Pointer(&buf[0]))},
		{"_IOW, a bad pointer", 1<<30 | 64<<16 | ioc, 8},
		{"_IOR, a bad pointer", 2<<30 | 64<<16 | ioc, 8},
	} {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), c.req, c.arg)
		if errno != unix.ENOTTY {
			t.Errorf("ioctl %s: %v, want ENOTTY", c.name, errno)
		}
	}
	runtime.KeepAlive(buf)
}

func TestDaemonConformance(t *testing.T) {
	d := startDaemon(t)
	for _, node := range []string{"/dev/infiniband/ucm0", "/dev/infiniband/ucm1"} {
		out, err := d.ucmd("conformance", node)
		t.Logf("ucmd conformance %s:\n%s", node, out)
		if err != nil {
			t.Errorf("ucmd conformance %s: %v", node, err)
		}
		if !strings.Contains(out, " 0 failed, 0 skipped") {
			t.Errorf("ucmd conformance %s did not pass every case", node)
		}
	}
}

// clientPair runs a ucmclient server on ucm1 (rxe1) and a client on ucm0
// (rxe0), both through `ucmd exec` so they find their node the libibcm way.
func clientPair(t *testing.T, d *daemon, sid string, serverArgs, clientArgs []string) (srvOut, cliOut string) {
	t.Helper()
	return clientPairOn(t, d, 1, sid, serverArgs, clientArgs)
}

// clientPairOn is clientPair with the server on node ucmN.
func clientPairOn(t *testing.T, d *daemon, node int, sid string, serverArgs, clientArgs []string) (srvOut, cliOut string) {
	t.Helper()
	bin := ucmclientBin(t)
	srv := startBackground(t, "server", exec.Command(ucmdBin(t), append([]string{"exec", "--runtime-dir", d.run, "--", bin, "-l", sid}, serverArgs...)...))
	d.waitListening(t, node)
	cli := exec.Command(ucmdBin(t), append([]string{"exec", "--runtime-dir", d.run, "--", bin, "-c", "-s", sid}, clientArgs...)...)
	out, cerr := cli.CombinedOutput()
	serr := srv.wait(60 * time.Second)
	if cerr != nil || serr != nil {
		t.Errorf("client: %v\n%s\nserver: %v\n%s", cerr, out, serr, srv.out.String())
	}
	return srv.out.String(), string(out)
}

func TestDaemonRCClients(t *testing.T) {
	d := startDaemon(t)
	remote := "fe80::ff:fe00:2" // rxe1's link-local GID (test/vm/README.md)
	t.Run("one", func(t *testing.T) {
		srv, cli := clientPair(t, d, "0x1001", []string{"-d", "rxe1", "-n", "1"}, []string{"-d", "rxe0", "-g", remote, "-n", "1"})
		t.Logf("server:\n%s\nclient:\n%s", srv, cli)
		// The REQ, a first send to rxe1, had its MAC resolved through
		// rtnetlink (docs/umad.md).
		s, err := d.status()
		if err != nil {
			t.Fatal(err)
		}
		if n := s.Devices[0].Ports[0].Neighbours; n == nil || n.Resolved == 0 || n.Unanswered != 0 {
			t.Errorf("rxe0's neighbour resolutions after a connection: %+v, want some resolved and none unanswered", n)
		}
	})
	t.Run("100-in-sequence", func(t *testing.T) {
		// -w 0: don't wait for TIMEWAIT_EXIT between connections.
		clientPair(t, d, "0x1002", []string{"-d", "rxe1", "-n", "100", "-M", "1", "-w", "0"}, []string{"-d", "rxe0", "-g", remote, "-n", "100", "-M", "1", "-w", "0"})
	})
	t.Run("10-at-once", func(t *testing.T) {
		clientPair(t, d, "0x1003", []string{"-d", "rxe1", "-n", "10", "-M", "1", "-w", "0"}, []string{"-d", "rxe0", "-g", remote, "-n", "1", "-P", "10", "-M", "1", "-w", "0"})
	})
	// Nothing left behind once the clients are gone.
	d.wantNoFiles(t)
}

// The LD_PRELOAD shim (dist/preload) shows the class tree to a legacy
// client started without ucmd exec, as an MPI launcher starts its ranks:
// the pair finds its nodes the libibcm way and connects an RC QP.
func TestDaemonPreloadDiscovery(t *testing.T) {
	shim := os.Getenv("UCMD_PRELOAD")
	if shim == "" {
		shim, _ = filepath.Abs("../../bin/libucmd-sysfs.so")
	}
	if _, err := os.Stat(shim); err != nil {
		t.Fatalf("the shim is not built (make bin/libucmd-sysfs.so): %v", err)
	}
	d := startDaemon(t)
	bin := ucmclientBin(t)
	env := append(os.Environ(), "LD_PRELOAD="+shim, "UCMD_CLASS_DIR="+filepath.Join(d.run, "class"))
	server := exec.Command(bin, "-l", "0x1081", "-d", "rxe1", "-n", "1")
	server.Env = env
	srv := startBackground(t, "server", server)
	d.waitListening(t, 1)
	client := exec.Command(bin, "-c", "-s", "0x1081", "-d", "rxe0", "-g", "fe80::ff:fe00:2", "-n", "1", "-v")
	client.Env = env
	out, cerr := client.CombinedOutput()
	serr := srv.wait(60 * time.Second)
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, out, serr, srv.out.String())
	}
	if !strings.Contains(string(out), "rxe0 is ucm0") {
		t.Errorf("the client did not find rxe0 through the class tree:\n%s", out)
	}
	if _, err := os.Stat("/sys/class/infiniband_cm"); !os.IsNotExist(err) {
		t.Errorf("/sys/class/infiniband_cm exists outside the shim: %v", err)
	}
	d.wantNoFiles(t)
}

// startSimPair runs ucmd on two simulated devices, and returns their GIDs.
func startSimPair(t *testing.T) (d *daemon, gid0, gid1 string) {
	t.Helper()
	d = startDaemon(t, "--fabric", "sim", "--sim-devices", "2")
	s, err := d.status()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Devices) != 2 {
		t.Fatalf("sim status: %+v", s)
	}
	return d, s.Devices[0].Ports[0].GID0, s.Devices[1].Ports[0].GID0
}

func TestDaemonSimFabric(t *testing.T) {
	d, g0, g1 := startSimPair(t)
	bin := ucmclientBin(t)
	srv := startBackground(t, "server", exec.Command(bin, "-D", "/dev/infiniband/ucm1", "--no-verbs", "-l", "0x2001", "-n", "1"))
	d.waitListening(t, 1)
	out, cerr := exec.Command(bin, "-D", "/dev/infiniband/ucm0", "--no-verbs", "-c", "-s", "0x2001", "-G", g0, "-g", g1, "-n", "1").CombinedOutput()
	serr := srv.wait(60 * time.Second)
	if cerr != nil || serr != nil {
		t.Errorf("client: %v\n%s\nserver: %v\n%s", cerr, out, serr, srv.out.String())
	}
}

func TestDaemonRefusesWithKernelCM(t *testing.T) {
	modprobe(t, "ib_cm")
	out, err := exec.Command(ucmdBin(t), "serve", "--runtime-dir", t.TempDir()).CombinedOutput()
	if err == nil {
		t.Fatalf("ucmd serve succeeded with ib_cm loaded:\n%s", out)
	}
	if !strings.Contains(string(out), "modprobe -r") || !strings.Contains(string(out), "ib_cm") {
		t.Errorf("the error does not say what to unload:\n%s", out)
	}
	// 69, which the unit's RestartPreventExitStatus lists: restarting
	// cannot help.
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 69 {
		t.Errorf("ucmd serve with ib_cm loaded: %v, want exit status 69", err)
	}
}

// TestDaemonShutdownWakesBlockedClients: SIGTERM while a client is blocked
// in GET_EVENT: the client gets an error promptly and ucmd exits cleanly.
func TestDaemonShutdownWakesBlockedClients(t *testing.T) {
	d := startDaemon(t)
	c := openClient(t, "/dev/infiniband/ucm0")
	if _, err := c.CreateID(1); err != nil {
		t.Fatal(err)
	}
	got := getEventAsync(c) // blocks: nothing will happen on this id
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("GET_EVENT returned before shutdown: %v", err)
	default:
	}
	d.stop() // SIGTERM; fails the test unless ucmd exits 0 within 15 s
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("GET_EVENT succeeded across shutdown")
		}
		t.Logf("blocked GET_EVENT after SIGTERM: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("GET_EVENT still blocked 10 s after ucmd stopped")
	}
}
