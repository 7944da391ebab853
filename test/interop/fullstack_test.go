//go:build interop

package interop

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/syncbuf"
)

// The whole of ucmd in B: `ucmd serve` (CUSE node /dev/infiniband/ucm0 for
// rxe0) and a client writing the raw ucm ABI to it, as libibcm did
// (conformance.Client), against an rdma_cm program in A, in both roles.
// UcmActive/UcmPassive are CM level only (conformance.Client has no verbs QP:
// a fake QPN); the RC* subtests add RC data with the C client (fullStackRC).

const (
	portFullActive  = 7476 // cmpeer server in A
	portFullPassive = 7486 // our ucm listener in B
	portFullStop    = 7478 // cmpeer server in A, for TestFullStackUcmdStops
)

// startUcmdStop runs `ucmd serve` (built next to the test binary) until
// the test ends and returns the ucm node of rxe0, and what stops ucmd
// (SIGTERM) before the test ends.
func startUcmdStop(t *testing.T) (string, func()) {
	return startUcmdIn(t, t.TempDir())
}

// startUcmdIn is startUcmdStop with its runtime directory (where `ucmd
// status` finds it) given.
func startUcmdIn(t *testing.T, run string) (string, func()) {
	t.Helper()
	log := &syncbuf.Buffer{}
	cmd := exec.Command(besideTest(t, "ucmd"), "serve", "--runtime-dir", run, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("ucmd serve: %v", err)
				}
			case <-time.After(15 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Errorf("ucmd serve did not stop within 15 s of SIGTERM")
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("ucmd log:\n%s", log.String())
		}
	})
	const node = "/dev/infiniband/ucm0"
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(node); err == nil {
			return node, stop
		}
		select {
		case err := <-done:
			t.Fatalf("ucmd serve exited (%v):\n%s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 20 s:\n%s", node, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ucmClient(t *testing.T, node string) *conformance.Client {
	t.Helper()
	dut, err := conformance.OpenPath(node)
	if err != nil {
		t.Fatal(err)
	}
	c, err := conformance.NewClient(dut, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expect waits for the next event of type want, passing over TIMEWAIT_EXIT
// events of earlier connections.
func expect(t *testing.T, c *conformance.Client, want abi.CMEvent) conformance.Event {
	t.Helper()
	for {
		ev, err := c.WaitEvent(wait)
		if err != nil {
			t.Fatalf("waiting for %v: %v", want, err)
		}
		t.Logf("ucm event %v id %d", ev.Event, ev.ID)
		if ev.Event == want {
			return ev
		}
		if ev.Event != abi.CMTimewaitExit {
			t.Fatalf("ucm event %v (id %d), want %v", ev.Event, ev.ID, want)
		}
	}
}

// ucmREQ connects c's new id to A's rdma_cm listener on port, with
// "ucm-req" in the REQ, and returns the id and its REP event.
func ucmREQ(t *testing.T, c *conformance.Client, gidB [16]byte, port uint16) (uint32, conformance.Event) {
	t.Helper()
	id, err := c.CreateID(0x1111)
	if err != nil {
		t.Fatal(err)
	}
	path := abi.PathRec{
		DGID: gidAv4, SGID: gidB, HopLimit: 64, PKey: 0xffff, MTU: 3,
		PacketLifeTime: 18, Reversible: 1, NumbPath: 1,
	}
	r := c.REQ(id, tcpSID(port), path, nextQPN())
	r.Data, r.Len = c.Data(cmaHdr(ipB, ipA, srcPortActive, "ucm-req"))
	if err := c.SendREQ(r); err != nil {
		t.Fatal(err)
	}
	return id, expect(t, c, abi.CMREPReceived)
}

// A ucmd that stops tells its connections' peers: shutting down releases
// every open file, whose ids are destroyed as ib_ucm's close destroyed
// them, and an ESTABLISHED one sends a DREQ (the kernel's cm_destroy_id).
// Without it the kernel's rdma_cm in A would hold its end until its QP
// failed on traffic.
func TestFullStackUcmdStops(t *testing.T) {
	node, stop := startUcmdStop(t)
	gidB := hgid(t)
	srv := runA(t, "server", strconv.Itoa(portFullStop), "accept", "kernel-rep")
	srv.waitFor(t, wait, "listening")
	c := ucmClient(t, node)
	id, _ := ucmREQ(t, c, gidB, portFullStop)
	if err := c.SendPrivateData(abi.CmdSendRTU, id, nil); err != nil {
		t.Fatal(err)
	}
	srv.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
	stop()
	srv.waitFor(t, wait, "RDMA_CM_EVENT_DISCONNECTED")
}

func TestFullStackUcmd(t *testing.T) {
	run := t.TempDir()
	node, _ := startUcmdIn(t, run)
	gidB := hgid(t)

	t.Run("UcmActive", func(t *testing.T) {
		srv := runA(t, "server", strconv.Itoa(portFullActive), "accept", "kernel-rep")
		srv.waitFor(t, wait, "listening")
		c := ucmClient(t, node)
		id, ev := ucmREQ(t, c, gidB, portFullActive)
		if rep := ev.U.REP(); rep.RemoteCAGUID != guidA || !bytes.HasPrefix(ev.Data, []byte("kernel-rep")) {
			t.Errorf("REP event: CA GUID %#x, data %q", rep.RemoteCAGUID, ev.Data)
		}
		req := srv.waitFor(t, wait, "RDMA_CM_EVENT_CONNECT_REQUEST")
		if !strings.Contains(field(req, "pd"), hexPD("ucm-req")) {
			t.Errorf("A's connect request data %s, want ours", field(req, "pd"))
		}
		if err := c.SendPrivateData(abi.CmdSendRTU, id, nil); err != nil {
			t.Fatal(err)
		}
		srv.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
		if err := c.SendPrivateData(abi.CmdSendDREQ, id, nil); err != nil {
			t.Fatal(err)
		}
		expect(t, c, abi.CMDREPReceived)
		srv.waitFor(t, wait, "RDMA_CM_EVENT_DISCONNECTED")
		expect(t, c, abi.CMTimewaitExit)
		if _, err := c.DestroyID(id); err != nil {
			t.Errorf("DESTROY_ID: %v", err)
		}
		// The REQ's peer, across the link, was resolved through
		// rtnetlink before the REQ took a umad file (docs/umad.md).
		out, err := exec.Command(besideTest(t, "ucmd"), "status", "--json", "--runtime-dir", run).Output()
		if err != nil {
			t.Fatalf("ucmd status: %v", err)
		}
		var st struct {
			Devices []struct {
				Ports []struct {
					Neighbours *struct {
						Resolved   uint64 `json:"resolved"`
						Unanswered uint64 `json:"unanswered"`
						Error      string `json:"error"`
					} `json:"neighbours"`
				} `json:"ports"`
			} `json:"devices"`
		}
		if err := json.Unmarshal(out, &st); err != nil || len(st.Devices) == 0 || len(st.Devices[0].Ports) == 0 {
			t.Fatalf("ucmd status: %v\n%s", err, out)
		}
		if n := st.Devices[0].Ports[0].Neighbours; n == nil || n.Resolved == 0 || n.Unanswered != 0 {
			t.Errorf("rxe0's neighbour resolutions after the REQ: %+v, want some resolved and none unanswered", n)
		}
	})

	t.Run("UcmPassive", func(t *testing.T) {
		c := ucmClient(t, node)
		lid, err := c.CreateID(0x2222)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Listen(lid, tcpSID(portFullPassive), 0); err != nil {
			t.Fatal(err)
		}
		cli := runA(t, "client", ipB.String(), strconv.Itoa(portFullPassive), "kernel-req", "300")
		ev := expect(t, c, abi.CMREQReceived)
		id := ev.ID
		ipver, src, dst, _, ok := parseCMAHdr(ev.Data)
		if !ok || ipver != 4 || src != ipA || dst != ipB || !bytes.HasPrefix(ev.Data[cmaHdrSize:], []byte("kernel-req")) {
			t.Errorf("REQ event data % x", ev.Data)
		}
		if q := ev.U.REQ(); q.RemoteCAGUID != guidA || q.PrimaryPath.DGID != gidAv4 {
			t.Errorf("REQ event: CA GUID %#x, path DGID %v", q.RemoteCAGUID, q.PrimaryPath.DGID)
		}
		rep := &abi.REP{UID: 0x3333, ID: id, QPN: nextQPN(), PSN: 0x4242, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}
		rep.Data, rep.Len = c.Data([]byte("ucm-rep"))
		if err := c.SendREP(rep); err != nil {
			t.Fatal(err)
		}
		expect(t, c, abi.CMRTUReceived)
		est := cli.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
		if !strings.HasPrefix(field(est, "pd"), hexPD("ucm-rep")) {
			t.Errorf("A's ESTABLISHED data %s, want our REP's", field(est, "pd"))
		}
		expect(t, c, abi.CMDREQReceived)
		if err := c.SendPrivateData(abi.CmdSendDREP, id, nil); err != nil {
			t.Fatal(err)
		}
		cli.waitFor(t, wait, "disconnected")
		if rc, out := cli.waitExit(t, wait); rc != 0 {
			t.Errorf("A's client exit status %d:\n%s", rc, out)
		}
		expect(t, c, abi.CMTimewaitExit)
		for _, x := range []uint32{id, lid} {
			if _, err := c.DestroyID(x); err != nil {
				t.Errorf("DESTROY_ID %d: %v", x, err)
			}
		}
	})

	fullStackRC(t, node)
}

// hgid is B's IPv4-mapped GID on rxe0 (sysfs, like a libibcm client would
// query it).
func hgid(t *testing.T) [16]byte {
	t.Helper()
	b, err := os.ReadFile("/sys/class/infiniband/rxe0/ports/1/gids/1")
	if err != nil {
		t.Fatal(err)
	}
	var g [16]byte
	h := strings.ReplaceAll(strings.TrimSpace(string(b)), ":", "")
	for i := range g {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			t.Fatalf("GID %q", b)
		}
		g[i] = byte(v)
	}
	if g != [16]byte(gidB4()) {
		t.Fatalf("rxe0 GID 1 is %x, want ::ffff:%v", g, ipB)
	}
	return g
}

func gidB4() [16]byte { return ipB.As16() }

// RC data end to end: `ucmd serve` in B plus the project's C client
// (test/clients/ucmclient --rdma-cm: the raw ucm ABI as libibcm wrote it,
// libibverbs RC QPs on rxe0) against cmpeer in A with its RC data mode, in
// both roles: 4 messages of 64 bytes each way, checked byte for byte by both
// programs (the same pattern, see cmpeer.c), then a clean disconnect.
const (
	portRCActive  = 7477 // cmpeer server in A
	portRCPassive = 7487 // ucmclient's listener in B
	rcMsgs        = "4"
	rcSize        = "64"
)

// ucmclientCmd is ucmclient (built by run.sh next to the test binary) on
// ucmd's node for rxe0, in rdma_cm mode.
func ucmclientCmd(t *testing.T, node string, args ...string) (*exec.Cmd, *syncbuf.Buffer) {
	t.Helper()
	bin := besideTest(t, "ucmclient")
	args = append([]string{"-D", node, "-d", "rxe0", "--rdma-cm", "-M", rcMsgs, "-z", rcSize, "-t", "20000", "-T", "90", "-v"}, args...)
	out := &syncbuf.Buffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	t.Logf("B: ucmclient %s", strings.Join(args, " "))
	return cmd, out
}

// waitCmd waits for cmd (started) up to timeout and returns its exit error.
func waitCmd(t *testing.T, cmd *exec.Cmd, timeout time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("ucmclient still running after %v", timeout)
		return nil
	}
}

func wantLines(t *testing.T, who, out string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("%s output lacks %q:\n%s", who, s, out)
		}
	}
}

func fullStackRC(t *testing.T, node string) {
	t.Run("RCUcmclientActive", func(t *testing.T) {
		srv := runA(t, "server", strconv.Itoa(portRCActive), "accept", "kernel-rep", "0", rcMsgs, rcSize)
		srv.waitFor(t, wait, "listening")
		cmd, out := ucmclientCmd(t, node, "-c", "-g", "::ffff:"+ipA.String(),
			"-s", "0x"+strconv.FormatUint(tcpSID(portRCActive), 16),
			"--pdata", "ucm-req", "--src-port", strconv.Itoa(srcPortActive))
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		err := waitCmd(t, cmd, 2*wait)
		t.Logf("ucmclient (%v, %v):\n%s", time.Since(t0).Round(time.Millisecond), err, out.String())
		if err != nil {
			t.Errorf("ucmclient: %v", err)
		}
		wantLines(t, "ucmclient", out.String(), "conn 0 ok: client", "msgs "+rcMsgs+"+"+rcMsgs+" x "+rcSize+"B",
			"established_by RTU", "timewait yes", "rep_pd 'kernel-rep'", "client: 1 of 1 connections ok")
		req := srv.waitFor(t, wait, "RDMA_CM_EVENT_CONNECT_REQUEST")
		if !strings.Contains(field(req, "pd"), hexPD("ucm-req")) {
			t.Errorf("A's connect request data %s, want ours", field(req, "pd"))
		}
		r := srv.waitFor(t, wait, "request peer=")
		if got, want := field(r, "peer"), ipB.String()+":"+strconv.Itoa(srcPortActive); got != want {
			t.Errorf("A saw peer %s, want %s (from ucmclient's cma_hdr)", got, want)
		}
		srv.waitFor(t, wait, "data posted")
		if d := srv.waitFor(t, wait, "data"); !strings.Contains(d, "data ok recv="+rcMsgs+" sent="+rcMsgs+" size="+rcSize) {
			t.Errorf("A's data exchange: %s", d)
		}
		srv.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
		srv.waitFor(t, wait, "RDMA_CM_EVENT_DISCONNECTED")
		srv.waitFor(t, wait, "closed")
	})

	t.Run("RCUcmclientPassive", func(t *testing.T) {
		cmd, out := ucmclientCmd(t, node, "-l", "0x"+strconv.FormatUint(tcpSID(portRCPassive), 16),
			"-n", "1", "--pdata", "ucm-rep")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.Now().Add(wait)
		for !strings.Contains(out.String(), "listening on") {
			select {
			case err := <-done:
				t.Fatalf("ucmclient server exited (%v):\n%s", err, out.String())
			default:
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				<-done
				t.Fatalf("ucmclient server not listening after %v:\n%s", wait, out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		cli := runA(t, "client", ipB.String(), strconv.Itoa(portRCPassive), "kernel-req", "300", rcMsgs, rcSize)
		est := cli.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
		if !strings.HasPrefix(field(est, "pd"), hexPD("ucm-rep")) {
			t.Errorf("A's ESTABLISHED data %s, want our REP's", field(est, "pd"))
		}
		if d := cli.waitFor(t, wait, "data"); !strings.Contains(d, "data ok recv="+rcMsgs+" sent="+rcMsgs+" size="+rcSize) {
			t.Errorf("A's data exchange: %s", d)
		}
		cli.waitFor(t, wait, "disconnected")
		if rc, aout := cli.waitExit(t, wait); rc != 0 {
			t.Errorf("A's client exit status %d:\n%s", rc, aout)
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(wait):
			cmd.Process.Kill()
			err = <-done
			t.Errorf("ucmclient server still running %v after A's client ended", wait)
		}
		t.Logf("ucmclient server (%v):\n%s", err, out.String())
		if err != nil {
			t.Errorf("ucmclient server: %v", err)
		}
		wantLines(t, "ucmclient server", out.String(),
			"REQ cma_hdr ipv4 src "+ipA.String()+":", "dst "+ipB.String(),
			"conn 0 ok: server", "msgs "+rcMsgs+"+"+rcMsgs+" x "+rcSize+"B", "req_pd 'kernel-req'",
			"server: 1 of 1 connections ok")
	})
}
