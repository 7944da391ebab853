//go:build e2e

package e2e

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
)

// rxe1 is test/vm/guest-rdma.sh's second Soft-RoCE device, on veth1 (GID 0
// fe80::ff:fe00:2, from veth1's fixed MAC).
const rxe1GID = "fe80::ff:fe00:2"

func rdmaLink(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("rdma", append([]string{"link"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("rdma link %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// deleteRXE1 removes rxe1; t.Cleanup puts it back, with its GID, for the
// tests after this one.
func deleteRXE1(t *testing.T) {
	t.Helper()
	rdmaLink(t, "delete", "rxe1")
	t.Cleanup(func() {
		if _, err := os.Stat("/sys/class/infiniband/rxe1"); err != nil {
			rdmaLink(t, "add", "rxe1", "type", "rxe", "netdev", "veth1")
		}
		waitRXE1GID(t)
	})
}

func addRXE1(t *testing.T) {
	t.Helper()
	rdmaLink(t, "add", "rxe1", "type", "rxe", "netdev", "veth1")
	waitRXE1GID(t)
}

func waitRXE1GID(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile("/sys/class/infiniband/rxe1/ports/1/gids/0")
		if err == nil && strings.HasPrefix(string(b), "fe80:0000:0000:0000:0000:00ff:fe00:0002") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rxe1's GID 0 did not come back: %q, %v", b, err)
		}
	}
}

// waitDevices waits until ucmd's status lists exactly the devices named,
// each with an ACTIVE port.
func (d *daemon) waitDevices(t *testing.T, names ...string) statusJSON {
	t.Helper()
	var s statusJSON
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		s, err = d.status()
		if err != nil || len(s.Devices) != len(names) {
			continue
		}
		ok := true
		for i, dev := range s.Devices {
			ok = ok && dev.Name == names[i] && len(dev.Ports) > 0 && dev.Ports[0].State == "ACTIVE"
		}
		if ok {
			return s
		}
	}
	t.Fatalf("status did not come to devices %v: %+v, %v", names, s, err)
	return s
}

// TestDaemonHotplug: rxe1 deleted while ucmd serves it: its node goes, the
// client blocked on it gets ECONNABORTED and then ENOTCONN, rxe0 keeps
// serving; rxe1 added again:
// ucmd serves it on ucm1 once more, found the libibcm way through the
// class tree, and a connection runs across the two.
func TestDaemonHotplug(t *testing.T) {
	d := startDaemon(t, "--rescan", "200ms")
	c := openClient(t, "/dev/infiniband/ucm1")
	id, err := c.CreateID(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(id, 0x3001, 0); err != nil {
		t.Fatal(err)
	}
	got := getEventAsync(c)

	deleteRXE1(t)
	d.waitDevices(t, "rxe0")
	// The daemon answers what it had read as the kernel answers what it
	// had not: ECONNABORTED (cuse: errShutdown).
	wantWoken(t, got, unix.ECONNABORTED, "on ucm1 when rxe1 went")
	if _, err := c.CreateID(2); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("CREATE_ID on the file of a removed device: %v, want ENOTCONN", err)
	}
	if _, err := os.Stat("/dev/infiniband/ucm1"); !os.IsNotExist(err) {
		t.Errorf("/dev/infiniband/ucm1 after rxe1 went: %v", err)
	}
	if out, err := d.ucmd("exec", "--", "ls", "/sys/class/infiniband_cm"); err != nil || strings.Contains(out, "ucm1") {
		t.Errorf("class tree after rxe1 went: %q, %v", out, err)
	}
	if d.log.wait(regexp.MustCompile(`msg="stopped serving an RDMA device" dev=rxe1 `)) == nil {
		t.Errorf("the log lacks \"stopped serving an RDMA device\" for rxe1")
	}
	// rxe0 still serves.
	c0 := openClient(t, "/dev/infiniband/ucm0")
	if _, err := c0.CreateID(1); err != nil {
		t.Fatalf("ucm0 after rxe1 went: %v", err)
	}
	c0.Close()

	addRXE1(t)
	s := d.waitDevices(t, "rxe0", "rxe1")
	if s.Devices[1].Node != "/dev/infiniband/ucm1" || s.Devices[1].Ports[0].GID0 != rxe1GID {
		t.Errorf("rxe1 served again as %+v", s.Devices[1])
	}
	if out, err := d.ucmd("exec", "--", "cat", "/sys/class/infiniband_cm/ucm1/ibdev"); err != nil || out != "rxe1\n" {
		t.Errorf("ucm1/ibdev after rxe1 came back: %q, %v", out, err)
	}
	clientPair(t, d, "0x3002", []string{"-d", "rxe1", "-n", "1"}, []string{"-d", "rxe0", "-g", rxe1GID, "-n", "1"})
}

// TestDaemonChannelAbort: the kernel aborts ucm1's CUSE connection, as an
// operator unsticks a FUSE file system (here through /sys/class/cuse). The
// GET_EVENT blocked on ucm1 fails with ECONNABORTED and the file then with
// ENOTCONN, as the kernel answers; ucmd keeps running, serves rxe1 again on
// a new channel, and the file on ucm0 keeps its listening id.
func TestDaemonChannelAbort(t *testing.T) {
	// No rescan but the one the failure kicks, which serves rxe1 again at
	// once: the device is as it was and needs no settling.
	d := startDaemon(t, "--rescan", "1h")
	c0 := openClient(t, "/dev/infiniband/ucm0")
	id0, err := c0.CreateID(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c0.Listen(id0, 0x3101, 0); err != nil {
		t.Fatal(err)
	}
	c1 := openClient(t, "/dev/infiniband/ucm1")
	if _, err := c1.CreateID(1); err != nil {
		t.Fatal(err)
	}
	got := getEventAsync(c1)
	d.waitWaiting(t, 1) // the GET_EVENT is the daemon's, blocked

	if err := os.WriteFile("/sys/class/cuse/infiniband!ucm1/abort", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, got, unix.ECONNABORTED, "on ucm1 when its channel was aborted")
	if _, err := c1.CreateID(2); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("CREATE_ID on a file of the aborted channel: %v, want ENOTCONN", err)
	}
	if d.log.wait(regexp.MustCompile(`msg="stopped serving an RDMA device" dev=rxe1 .*why="its CUSE channel failed"`)) == nil {
		t.Fatal("the log lacks rxe1's retirement for its failed channel")
	}
	if d.log.wait(regexp.MustCompile(`(?s)msg=serving dev=rxe1 .*msg=serving dev=rxe1 `)) == nil {
		t.Fatal("rxe1 was not served again")
	}
	d.waitDevices(t, "rxe0", "rxe1")
	select {
	case <-d.exited:
		t.Fatalf("ucmd exited after the abort: %v", d.err)
	default:
	}
	s, err := d.status()
	if err != nil {
		t.Fatal(err)
	}
	if f := s.Devices[0].Files; len(f) != 1 || len(f[0].IDs) != 1 || f[0].IDs[0].State != "LISTEN" {
		t.Errorf("ucm0's files after ucm1's abort: %+v", f)
	}
	if len(s.Retired) != 1 || s.Retired["channel-failed"] != 1 {
		t.Errorf("devices retired in status: %v, want channel-failed 1", s.Retired)
	}
	// The new ucm1 connects to the listener on ucm0, found the libibcm way.
	cli := startBackground(t, "client", exec.Command(ucmdBin(t), "exec", "--runtime-dir", d.run, "--", ucmclientBin(t), "-c", "-s", "0x3101", "-d", "rxe1", "-g", "fe80::ff:fe00:1", "-n", "1"))
	if ev, err := c0.GetEvent(); err != nil || ev.Event != abi.CMREQReceived {
		t.Errorf("ucm0's listener after ucm1's abort: %+v, %v (client: %s)", ev, err, cli.out.String())
	}
}

// getEventAsync sends a GET_EVENT on c from another goroutine; its error
// arrives on the channel.
func getEventAsync(c *conformance.Client) <-chan error {
	got := make(chan error, 1)
	go func() {
		_, err := c.GetEvent()
		got <- err
	}()
	return got
}

// wantWoken waits up to 20 s for the GET_EVENT of got to fail with want.
func wantWoken(t *testing.T, got <-chan error, want error, when string) {
	t.Helper()
	select {
	case err := <-got:
		if !errors.Is(err, want) {
			t.Errorf("GET_EVENT blocked %s: %v, want %v", when, err, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("GET_EVENT blocked %s was not woken", when)
	}
}

// waitWaiting waits until a file on node ucmN has a command the daemon
// holds (a GET_EVENT blocked for an event).
func (d *daemon) waitWaiting(t *testing.T, node int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s, err := d.status()
		if err != nil || len(s.Devices) <= node {
			continue
		}
		for _, f := range s.Devices[node].Files {
			if f.Waiting > 0 {
				return
			}
		}
	}
	t.Fatalf("no command waiting on ucm%d", node)
}

// TestDaemonHotplugKernelCM: with the kernel's ib_cm loaded after ucmd
// (as rdma-load-modules does at boot), a device that comes back is ib_cm's:
// ib_cm registers its CM class inside the device's registration. ucmd says
// so, keeps trying, and serves it once ib_cm is unloaded.
func TestDaemonHotplugKernelCM(t *testing.T) {
	d := startDaemon(t, "--rescan", "200ms")
	modprobe(t, "ib_cm") // fails on ucmd's ports, stays loaded
	deleteRXE1(t)
	d.waitDevices(t, "rxe0")
	addRXE1(t)
	// The first tries may find rxe1 before its umad file exists (a
	// warning that retries too); the one this test is about names the
	// kernel CM and what to unload, and only it says modprobe -r.
	waitOutput(t, d.log, "modprobe -r")
	if s, err := d.status(); err != nil || len(s.Devices) != 1 {
		t.Errorf("status with ib_cm owning rxe1: %+v, %v", s, err)
	}
	if out, err := d.ucmd("status"); err != nil || !regexp.MustCompile(`(?m)^rxe1 .*already registered`).MatchString(out) {
		t.Errorf("ucmd status does not show rxe1 unserved: %v\n%s", err, out)
	}
	rmmod(t, "ib_cm")
	d.waitDevices(t, "rxe0", "rxe1")
	clientPair(t, d, "0x3003", []string{"-d", "rxe1", "-n", "1"}, []string{"-d", "rxe0", "-g", rxe1GID, "-n", "1"})
}

// TestDaemonIdleRescansReadLittle: an idle daemon's rescans list the
// device classes and read no device's files unless something changed
// (docs/hotplug.md). Read calls (/proc/PID/io's syscr; directory listings
// do not count there) over 3 s of rescans every 100 ms: with a full look
// each time (before 067cb63) the daemon made 219 in the test VM, reading
// some five files a device; with the listing, and a full look every 30th,
// 13 and 18.
func TestDaemonIdleRescansReadLittle(t *testing.T) {
	d := startDaemon(t, "--rescan", "100ms")
	pid := d.cmd.Process.Pid
	d.waitDevices(t, "rxe0", "rxe1")
	time.Sleep(500 * time.Millisecond) // past the start's looks
	before := procField(t, pid, "io", "syscr")
	time.Sleep(3 * time.Second)
	reads := procField(t, pid, "io", "syscr") - before
	t.Logf("%d read calls in 3 s of rescans every 100 ms", reads)
	if reads > 100 {
		t.Errorf("%d read calls in 3 s idle: the rescans read the devices' files", reads)
	}
}
