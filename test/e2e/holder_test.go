//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
)

// A holder is this test binary re-executed as a legacy client that connects
// from ucm0 (rxe0) to a listener on ucm1 (rxe1), says ESTABLISHED, and then
// holds the connection until it is killed: what a crashed libibcm program
// leaves behind.
const holderEnv = "UCMD_E2E_HOLDER" // service id to connect to

var (
	gidRXE0 = netip.MustParseAddr("fe80::ff:fe00:1").As16()
	gidRXE1 = netip.MustParseAddr("fe80::ff:fe00:2").As16()
)

func init() {
	if sid := os.Getenv(holderEnv); sid != "" {
		if err := runHolder(sid); err != nil {
			fmt.Println("holder:", err)
			os.Exit(1)
		}
		for { // hold until killed (a bare select{} would trip the deadlock detector)
			time.Sleep(time.Hour)
		}
	}
}

func runHolder(sidText string) error {
	sid, err := strconv.ParseUint(sidText, 0, 64)
	if err != nil {
		return err
	}
	dut, err := conformance.OpenPath("/dev/infiniband/ucm0")
	if err != nil {
		return err
	}
	c, err := conformance.NewClient(dut, false)
	if err != nil {
		return err
	}
	id, err := c.CreateID(0x401d)
	if err != nil {
		return err
	}
	path := conformance.LoopbackPath(gidRXE0, 0)
	path.DGID = gidRXE1
	if err := c.SendREQ(c.REQ(id, sid, path, 0x4242)); err != nil {
		return err
	}
	if _, err := c.Expect(abi.CMREPReceived, 10*time.Second); err != nil {
		return err
	}
	if err := c.SendPrivateData(abi.CmdSendRTU, id, nil); err != nil {
		return err
	}
	fmt.Println("ESTABLISHED")
	return nil
}

// openClient opens a ucm node as a raw-ABI client for the rest of the test.
func openClient(t *testing.T, node string) *conformance.Client {
	t.Helper()
	dut, err := conformance.OpenPath(node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dut.Close() })
	c, err := conformance.NewClient(dut, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDaemonClientKilled: while a connection is up, `ucmd status` shows the
// client's ids; SIGKILL of the client makes ucmd tear its ids down and the
// peer gets a DREQ; ucmd keeps serving.
func TestDaemonClientKilled(t *testing.T) {
	d := startDaemon(t)
	const sid = 0x3001
	srv := openClient(t, "/dev/infiniband/ucm1")
	listener, err := srv.CreateID(0x11)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(listener, sid, 0); err != nil {
		t.Fatal(err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command(exe)
	holder.Env = append(os.Environ(), holderEnv+"="+strconv.Itoa(sid))
	stdout, _ := holder.StdoutPipe()
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()

	req, err := srv.Expect(abi.CMREQReceived, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	child := req.ID
	if err := srv.SendREP(&abi.REP{UID: 0x22, ID: child, QPN: 0x777, PSN: 9, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 6}); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ESTABLISHED" {
		t.Fatalf("holder said %q", line)
	}
	if _, err := srv.Expect(abi.CMRTUReceived, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	s, err := d.status()
	if err != nil {
		t.Fatal(err)
	}
	var holderIDs []string
	for _, f := range s.Devices[0].Files { // only the holder has ucm0 open
		for _, id := range f.IDs {
			holderIDs = append(holderIDs, id.State)
		}
	}
	if len(holderIDs) != 1 || holderIDs[0] != "ESTABLISHED" {
		t.Errorf("ucm0 ids while connected: %v, want one ESTABLISHED", holderIDs)
	}
	text, _ := d.ucmd("status")
	t.Logf("ucmd status while connected:\n%s", text)
	if !strings.Contains(text, "ESTABLISHED") {
		t.Errorf("status text lacks the established id")
	}

	holder.Process.Signal(syscall.SIGKILL)
	holder.Wait()
	// The kernel releases the holder's file; ucmd destroys its ids, which
	// sends a DREQ to the peer.
	if _, err := srv.Expect(abi.CMDREQReceived, 10*time.Second); err != nil {
		t.Fatalf("peer after SIGKILL of the client: %v", err)
	}
	if err := srv.SendPrivateData(abi.CmdSendDREP, child, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := d.status()
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Devices[0].Files) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ucm0 still has files 10s after the client died: %+v", s.Devices[0].Files)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Still serving: a fresh id on the device the dead client used.
	if _, err := openClient(t, "/dev/infiniband/ucm0").CreateID(1); err != nil {
		t.Fatalf("ucmd after the client's death: %v", err)
	}
}
