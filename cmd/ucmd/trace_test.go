package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/status"
	"github.com/ucmd/ucmd/internal/trace"
)

// syncBuffer is an output the test reads while the command writes, with
// a signal on each write.
type syncBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the output contains want.
func (s *syncBuffer) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(waitFor)
	for !strings.Contains(s.String(), want) {
		select {
		case <-s.wrote:
		case <-deadline:
			t.Fatalf("no %q in %q", want, s.String())
		}
	}
}

// ucmd trace against a served sim device: -w and --json while a REQ is
// rejected on loopback; the JSON lines, the pcapng capture (two RoCEv2
// frames per MAD sent and received), the text lines and the ladder of the
// saved trace (-r).
func TestTraceInProcess(t *testing.T) {
	f, env := fakeMachine(t)
	next := notifySocket(t)
	s := serve(t, env, next, "--sim-devices", "1")

	dir := t.TempDir()
	capPath, jsonPath := filepath.Join(dir, "cm.pcapng"), filepath.Join(dir, "cm.jsonl")
	root := newRootCmdIn(env)
	out := &syncBuffer{wrote: make(chan struct{}, 1)}
	errOut := &syncBuffer{wrote: make(chan struct{}, 1)}
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetArgs([]string{"trace", "--runtime-dir", s.run, "-w", capPath, "--json", "dev", "ucm0", "service-id", "0x5151"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	errOut.waitFor(t, "tracing")

	ctxS, cancelS := context.WithTimeout(t.Context(), waitFor)
	snap, err := status.Fetch(ctxS, s.run)
	cancelS()
	if err != nil {
		t.Fatal(err)
	}
	gid := net.ParseIP(snap.Devices[0].Ports[0].GID0).To16()
	path := conformance.LoopbackPath([16]byte(gid), 0)
	dut, err := f.DUT("infiniband/ucm0", &path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := conformance.NewClient(dut, false)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := conformance.NewClient(dut, false)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l, _ := srv.CreateID(1)
	if err := srv.Listen(l, 0x5151, 0); err != nil {
		t.Fatal(err)
	}
	id, _ := cli.CreateID(2)
	req := cli.REQ(id, 0x5151, path, 0x100)
	// The daemon's clock is real: a response timeout of 2.3 hours keeps
	// a slow machine from retransmitting the REQ before the REJ, which
	// would make five MADs of the four counted below.
	req.RemoteCMResponseTimeout = 31
	if err := cli.SendREQ(req); err != nil {
		t.Fatal(err)
	}
	ev, err := srv.Expect(abi.CMREQReceived, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.SendInfo(abi.CmdSendREJ, ev.ID, 28, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Expect(abi.CMREJReceived, waitFor); err != nil {
		t.Fatal(err)
	}
	// The last of the four MADs is the REJ's receipt.
	for strings.Count(out.String(), "\n") < 4 {
		out.waitFor(t, "\n")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ucmd trace: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "ucmd trace: 4 MADs, 4 frames written to "+capPath) {
		t.Errorf("summary: %q", errOut.String())
	}
	if err := os.WriteFile(jsonPath, []byte(out.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	c, err := os.Open(capPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if fi, _ := c.Stat(); fi.Mode().Perm() != 0o600 {
		t.Errorf("capture mode %v, want 0600", fi.Mode())
	}
	r, err := pcapgo.NewNgReader(c, pcapgo.NgReaderOptions{WantMixedLinkType: true})
	if err != nil {
		t.Fatal(err)
	}
	st := trace.NewReader(strings.NewReader(out.String()))
	for i := range 4 {
		data, _, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		ev, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		frame, _ := trace.Frame(&ev)
		if !bytes.Equal(data, frame) {
			t.Errorf("packet %d is not event %d's frame", i, i)
		}
	}

	text, err := runIn(t, env, "trace", "-r", jsonPath)
	if err != nil || strings.Count(text, " sim0:1 ") != 4 || !strings.Contains(text, "received      REJ") ||
		!strings.Contains(text, "reason 28 (consumer defined)") || !strings.Contains(text, "pid 4200/fakedut") {
		t.Errorf("ucmd trace -r: %v\n%s", err, text)
	}
	ladder, err := runIn(t, env, "trace", "-r", jsonPath, "--ladder", "--service-id", "0x5151")
	if err != nil || !strings.Contains(ladder, "|-- REQ ---") || !strings.Contains(ladder, " REJ --|") || !strings.Contains(ladder, "service id 0x0000000000005151") {
		t.Errorf("ucmd trace -r --ladder: %v\n%s", err, ladder)
	}
	if out, err := runIn(t, env, "trace", "colour", "red"); err == nil || !strings.Contains(out+err.Error(), "unknown trace filter") {
		t.Errorf("ucmd trace colour red: %v %s", err, out)
	}
}

// SIGHUP (the terminal closed) ends a live trace as SIGINT and SIGTERM
// do: the capture finished and the summary printed, where the Go
// runtime's default would end the process at once. The daemon is a fake
// trace socket that subscribes the trace and then sends nothing, so that
// only the signal can end it.
func TestTraceSIGHUP(t *testing.T) {
	keep := make(chan os.Signal, 1) // so that SIGHUP never kills the test binary
	signal.Notify(keep, syscall.SIGHUP)
	defer signal.Stop(keep)
	run := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(run, trace.SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		bufio.NewReader(c).ReadString('\n') // the request
		io.WriteString(c, `{"subscribed":true}`+"\n")
		io.Copy(io.Discard, c) // until the trace closes
	}()
	_, env := fakeMachine(t)
	capPath := filepath.Join(t.TempDir(), "cm.pcapng")
	root := newRootCmdIn(env)
	root.SetOut(new(syncBuffer))
	errOut := &syncBuffer{wrote: make(chan struct{}, 1)}
	root.SetErr(errOut)
	root.SetArgs([]string{"trace", "--runtime-dir", run, "-w", capPath})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(t.Context()) }()
	errOut.waitFor(t, "tracing")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ucmd trace after SIGHUP: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("ucmd trace did not return after SIGHUP")
	}
	if !strings.Contains(errOut.String(), "ucmd trace: 0 MADs, 0 frames written to "+capPath) {
		t.Errorf("summary: %q", errOut.String())
	}
}

// A capture file that cannot be made fails the trace before it connects
// (no "tracing" line, no daemon needed to find out), and a trace that
// fails to start leaves an earlier capture as it was. Under sudo the file
// is opened as the sudo user would: theirs, mode 0600, and never another's
// file through a symlink.
func TestTraceCaptureFile(t *testing.T) {
	_, env := fakeMachine(t)
	out, err := runIn(t, env, "trace", "--runtime-dir", t.TempDir(), "-w", filepath.Join(t.TempDir(), "no", "such", "dir", "x.pcapng"))
	if err == nil || !strings.Contains(err.Error(), "trace -w") || strings.Contains(out, "tracing") {
		t.Errorf("trace -w into a missing directory: %v\n%s", err, out)
	}
	earlier := filepath.Join(t.TempDir(), "earlier.pcapng")
	if err := os.WriteFile(earlier, []byte("an earlier capture"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runIn(t, env, "trace", "--runtime-dir", t.TempDir(), "-w", earlier); err == nil {
		t.Error("trace with no daemon succeeded")
	}
	if b, _ := os.ReadFile(earlier); string(b) != "an earlier capture" {
		t.Errorf("a trace that did not start left the earlier capture as %q", b)
	}

	if os.Geteuid() != 0 {
		t.Skip("the sudo user's capture needs root")
	}
	home := t.TempDir()
	if err := os.Chown(home, 65534, 65533); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(home), 0o755); err != nil { // the test's own, 0700
		t.Fatal(err)
	}
	sudo := func(k string) string { return map[string]string{"SUDO_UID": "65534", "SUDO_GID": "65533"}[k] }
	path := filepath.Join(home, "cm.pcapng")
	f, err := createCapture(path, sudo)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 65534 || sys.Gid != 65533 || st.Mode().Perm() != 0o600 {
		t.Errorf("capture owned by %d:%d mode %v, want 65534:65533 0600", sys.Uid, sys.Gid, st.Mode().Perm())
	}
	// A symlink in the user's directory to root's file: refused, the file
	// neither given away nor emptied.
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(home, "link.pcapng")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if f, err := createCapture(link, sudo); err == nil {
		f.Close()
		t.Error("a capture through a symlink to root's file was opened")
	}
	st, _ = os.Stat(secret)
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || st.Size() != 6 {
		t.Errorf("root's file is now %d's, %d bytes", sys.Uid, st.Size())
	}
}
