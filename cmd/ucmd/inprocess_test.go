package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
	"github.com/ucmd/ucmd/internal/status"
	"github.com/ucmd/ucmd/internal/sysmon"
)

// The tests here run the commands in-process on the fake machine of
// daemontest: serve on the simulated fabric and the fake CUSE kernel,
// status over the control socket, conformance against a served node.

// waitFor bounds every wait: a failure timeout, never a synchronisation.
const waitFor = 20 * time.Second

// fakeMachine is an environment without a kernel.
func fakeMachine(t *testing.T) (*daemontest.Fake, environment) {
	f := daemontest.New(t)
	return f, environment{
		daemon:  f.Env(),
		devDir:  f.DevDir,
		dropCap: func(uintptr) (bool, error) { return true, nil },
		openDUT: func(path string) (conformance.DUT, error) {
			rel, err := filepath.Rel(f.DevDir, path)
			if err != nil {
				return nil, err
			}
			return f.DUT(rel, nil)
		},
	}
}

// runIn runs the CLI on env with args and returns what it printed.
func runIn(t *testing.T, env environment, args ...string) (string, error) {
	t.Helper()
	root := newRootCmdIn(env)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

// notifySocket points NOTIFY_SOCKET at a socket of the test's and returns
// a function that reads the next message sent to it.
func notifySocket(t *testing.T) func() string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return func() string {
		t.Helper()
		buf := make([]byte, 4096)
		l.SetReadDeadline(time.Now().Add(waitFor))
		n, err := l.Read(buf)
		if err != nil {
			t.Fatalf("waiting for sd_notify: %v", err)
		}
		return string(buf[:n])
	}
}

// served is `ucmd serve` running in the background.
type served struct {
	cancel context.CancelFunc
	done   chan error
	run    string      // runtime dir
	log    *syncBuffer // its stderr: the log
}

// serve starts `ucmd serve --fabric sim` with args on env and returns
// once it has told systemd it is ready.
func serve(t *testing.T, env environment, next func() string, args ...string) *served {
	t.Helper()
	s := &served{done: make(chan error, 1), run: t.TempDir(), log: new(syncBuffer)}
	ctx, cancel := context.WithCancel(t.Context())
	s.cancel = cancel
	root := newRootCmdIn(env)
	root.SetOut(new(bytes.Buffer))
	root.SetErr(s.log)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's log:\n%s", s.log)
		}
	})
	root.SetArgs(append([]string{"serve", "--fabric", "sim", "--runtime-dir", s.run, "--log-level", "error"}, args...))
	go func() { s.done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(waitFor):
			t.Error("serve did not stop")
		}
	})
	if msg := next(); !strings.HasPrefix(msg, "READY=1\nSTATUS=serving ") {
		t.Fatalf("sd_notify: %q, want READY=1", msg)
	}
	return s
}

func (s *served) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(waitFor):
		t.Fatal("serve did not return")
		return nil
	}
}

// ucmd serve on the fake machine: ready once both nodes exist, status
// and conformance against it, and a clean stop when its context ends.
func TestServeStatusConformanceInProcess(t *testing.T) {
	f, env := fakeMachine(t)
	next := notifySocket(t)
	s := serve(t, env, next, "--sim-devices", "2")
	ucm0 := filepath.Join(f.DevDir, "infiniband/ucm0")
	if st, err := os.Stat(ucm0); err != nil || st.Mode().Perm() != 0o666 {
		t.Fatalf("%s: %v", ucm0, err)
	}

	out, err := runIn(t, env, "status", "--runtime-dir", s.run)
	if err != nil || !strings.Contains(out, "sim0") || !strings.Contains(out, "sim1") || !strings.Contains(out, ucm0) {
		t.Fatalf("ucmd status: %v\n%s", err, out)
	}
	out, err = runIn(t, env, "status", "--json", "--runtime-dir", s.run)
	var snap status.Snapshot
	if err != nil || json.Unmarshal([]byte(out), &snap) != nil || len(snap.Devices) != 2 || snap.Fabric != "sim" {
		t.Fatalf("ucmd status --json: %v\n%s", err, out)
	}

	// The RDMA device comes from the running ucmd; umad has no loopback
	// path for a simulated one, so the connecting cases skip.
	out, err = runIn(t, env, "conformance", "--runtime-dir", s.run, "--run", "^write/", ucm0)
	if err != nil || !strings.Contains(out, "note: no loopback path on sim0") || !strings.Contains(out, "PASS write/bad-command") ||
		!strings.Contains(out, "conformance "+ucm0+": ") || !strings.Contains(out, " 0 failed") {
		t.Fatalf("ucmd conformance: %v\n%s", err, out)
	}
	// The suite's failing commands are counted on ucm0 (issue 15.3); the
	// filters select a device (issue 15.5).
	out, err = runIn(t, env, "status", "dev", "ucm0", "--json", "--runtime-dir", s.run)
	snap = status.Snapshot{}
	if err != nil || json.Unmarshal([]byte(out), &snap) != nil || len(snap.Devices) != 1 || snap.Devices[0].Name != "sim0" ||
		snap.Devices[0].Errors["EINVAL"] == 0 {
		t.Fatalf("ucmd status dev ucm0 --json: %v\n%s", err, out)
	}
	out, err = runIn(t, env, "status", "dev", "sim1", "--runtime-dir", s.run)
	if err != nil || strings.Contains(out, "sim0") || !strings.Contains(out, "FAILED-COMMANDS") {
		t.Fatalf("ucmd status dev sim1: %v\n%s", err, out)
	}
	if out, err := runIn(t, env, "status", "bogus", "1", "--runtime-dir", s.run); err == nil || !strings.Contains(out+err.Error(), "unknown filter") {
		t.Errorf("ucmd status bogus 1: %v\n%s", err, out)
	}

	s.cancel()
	if err := s.wait(t); err != nil {
		t.Fatalf("serve after its context ended: %v", err)
	}
	if msg := next(); msg != "STOPPING=1" {
		t.Errorf("sd_notify at the stop: %q", msg)
	}
	if _, err := runIn(t, env, "status", "--runtime-dir", s.run); err == nil {
		t.Error("ucmd status succeeds after serve stopped")
	}
}

// serve logs the limits it serves with, the defaults filled in, each by
// its flag's name.
func TestServeLogsLimits(t *testing.T) {
	_, env := fakeMachine(t)
	next := notifySocket(t)
	s := serve(t, env, next, "--log-level", "info", "--user-waits", "77", "--memory-budget", "2097152")
	for _, want := range []string{"limits.user-waits=77 ", "limits.memory-budget=2097152", "limits.user-ids=65536 ", "limits.copies=1024 "} {
		if !strings.Contains(s.log.String(), want) {
			t.Errorf("serve's log lacks %q:\n%s", want, s.log)
		}
	}
}

// serve gives every device's CUSE readers as many idle ones as the CPUs
// allow, and adds a P for each that can wait in read(2), unless
// GOMAXPROCS is set in the environment: then the readers still follow the
// CPUs, not that setting. The Ps go back when serve ends.
func TestServeSizesReaders(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(base)
	cpus := runtime.NumCPU()
	perDev := min(max(4, min(base, cpus)), sysmon.MaxIdleReaders) + 1 // readers at the default
	serving := max(base, 2*perDev+min(base, cpus, sysmon.WorkProcs))
	for _, c := range []struct {
		name    string
		env     string // GOMAXPROCS
		procs   int    // before serve
		serving int    // GOMAXPROCS while serving
		perDev  int    // readers that may block, per device
		warn    string // in the log, "" for no warning
	}{
		{"default", "", base, serving, perDev, ""},
		{"explicit", strconv.Itoa(base + 20), base + 20, base + 20, perDev, ""},
		// One P for ten waiting readers (two devices of 4 idle and 1
		// more each): the runtime would retake Ps from them.
		{"short", "1", 1, 1, 5, "level=WARN msg=\"GOMAXPROCS from the environment leaves too few Ps for the CUSE readers waiting in read(2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", c.env)
			if c.env == "" {
				os.Unsetenv("GOMAXPROCS")
			}
			runtime.GOMAXPROCS(c.procs)
			f, env := fakeMachine(t)
			next := notifySocket(t)
			s := serve(t, env, next, "--sim-devices", "2", "--log-level", "warn")
			for _, name := range []string{"infiniband/ucm0", "infiniband/ucm1"} {
				if got := f.Channel(name).MaxBlockedReaders(); got != c.perDev {
					t.Errorf("%s: %d readers may block, want %d", name, got, c.perDev)
				}
			}
			if got := runtime.GOMAXPROCS(0); got != c.serving {
				t.Errorf("GOMAXPROCS %d while serving, want %d", got, c.serving)
			}
			s.cancel()
			if err := s.wait(t); err != nil {
				t.Fatal(err)
			}
			if got := runtime.GOMAXPROCS(0); got != c.procs {
				t.Errorf("GOMAXPROCS %d after serve, want %d back", got, c.procs)
			}
			// An explicit GOMAXPROCS of base+20 is short where the CPUs
			// are many: the warning is then right, and not checked.
			short := sysmon.ProcsShort(c.serving, 2*c.perDev) > 0
			log := s.log.String()
			switch {
			case c.warn != "" && !strings.Contains(log, c.warn):
				t.Errorf("serve's log lacks %q:\n%s", c.warn, log)
			case c.warn != "" && !strings.Contains(log, " waiting_readers=10 gomaxprocs_needed=11"):
				t.Errorf("serve's warning names the wrong figures:\n%s", log)
			case c.warn == "" && !short && strings.Contains(log, "level=WARN"):
				t.Errorf("serve warned:\n%s", log)
			}
		})
	}
}

// SIGTERM stops serve cleanly, and so do SIGINT (Ctrl-C) and SIGHUP (the
// terminal closed), whose default would end the process at once, with no
// STOPPING=1 and no clean-up.
func TestServeStopSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			// Held for the whole test, so the signal never kills the test binary.
			keep := make(chan os.Signal, 1)
			signal.Notify(keep, sig)
			defer signal.Stop(keep)
			_, env := fakeMachine(t)
			next := notifySocket(t)
			s := serve(t, env, next, "--sim-devices", "1", "--sim-ib", "--fixed-numbers")
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			if err := s.wait(t); err != nil {
				t.Fatalf("serve after %v: %v", sig, err)
			}
			if msg := next(); msg != "STOPPING=1" {
				t.Errorf("sd_notify after %v: %q", sig, msg)
			}
		})
	}
}

// A signal while serve is still starting (waiting for its devices at boot,
// or registering them) stops it as one while serving does: STOPPING=1 and
// no error, so that systemd's stop leaves the unit inactive, not failed.
func TestServeSignalWhileStarting(t *testing.T) {
	keep := make(chan os.Signal, 1)
	signal.Notify(keep, syscall.SIGTERM)
	defer signal.Stop(keep)
	_, env := fakeMachine(t)
	next := notifySocket(t)
	registering := make(chan struct{})
	env.daemon.Register = func(ctx context.Context, _ cuse.Config, _ cuse.Device) (daemon.Channel, error) {
		close(registering)
		<-ctx.Done()
		return nil, fmt.Errorf("register: %w", ctx.Err())
	}
	done := make(chan error, 1)
	go func() {
		_, err := runIn(t, env, "serve", "--fabric", "sim", "--sim-devices", "1", "--log-level", "error", "--runtime-dir", t.TempDir())
		done <- err
	}()
	select {
	case <-registering:
	case <-time.After(waitFor):
		t.Fatal("serve never registered its device")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve stopped while starting: %v, want no error", err)
		}
	case <-time.After(waitFor):
		t.Fatal("serve did not return")
	}
	if msg := next(); msg != "STOPPING=1" {
		t.Errorf("sd_notify: %q, want STOPPING=1", msg)
	}
}

// A stderr whose reader is gone does not end serve: its log lines are
// lost, its clients' connections are not. The runtime's default is to
// die of SIGPIPE at the first write to fd 2 that fails with EPIPE, so the
// test runs serve in a child whose stderr is such a pipe.
func TestServeOutlivesClosedStderr(t *testing.T) {
	if os.Getenv("UCMD_TEST_CLOSED_STDERR") == "1" {
		_, env := fakeMachine(t)
		next := notifySocket(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		root := newRootCmdIn(env) // logs to the real stderr
		root.SetArgs([]string{"serve", "--fabric", "sim", "--sim-devices", "1", "--runtime-dir", t.TempDir(), "--log-level", "debug"})
		done := make(chan error, 1)
		go func() { done <- root.ExecuteContext(ctx) }()
		if msg := next(); !strings.HasPrefix(msg, "READY=1") {
			t.Fatalf("sd_notify: %q", msg)
		}
		cancel()
		fmt.Printf("serve returned: %v\n", <-done)
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeOutlivesClosedStderr$", "-test.v")
	cmd.Env = append(os.Environ(), "UCMD_TEST_CLOSED_STDERR=1")
	cmd.Stderr = w
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "serve returned: <nil>") {
		t.Fatalf("serve with a closed stderr: %v\n%s", err, out)
	}
}

// Under a unit with WatchdogSec=, serve pings systemd's watchdog from
// READY=1 on.
func TestServeFeedsWatchdog(t *testing.T) {
	_, env := fakeMachine(t)
	next := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "20000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	serve(t, env, next, "--sim-devices", "1")
	for range 3 {
		if msg := next(); msg != "WATCHDOG=1" {
			t.Fatalf("sd_notify after READY=1: %q, want WATCHDOG=1", msg)
		}
	}
}

// With --rescan 0, a CUSE channel the kernel aborts ends serve with that
// error: nothing would serve the device again.
func TestServeChannelFails(t *testing.T) {
	f, env := fakeMachine(t)
	next := notifySocket(t)
	s := serve(t, env, next, "--sim-devices", "1", "--log-json", "--rescan", "0")
	f.Channel("infiniband/ucm0").Fail(errors.New("connection aborted"))
	if err := s.wait(t); err == nil || !strings.Contains(err.Error(), "/dev/infiniband/ucm0: CUSE channel failed: connection aborted") {
		t.Fatalf("serve after the channel failed: %v", err)
	}
	if msg := next(); msg != "STOPPING=1" {
		t.Errorf("sd_notify: %q", msg)
	}
}

// Otherwise serve goes on, and the device is served again on a new
// channel (docs/hotplug.md).
func TestServeChannelFailsServedAgain(t *testing.T) {
	f, env := fakeMachine(t)
	next := notifySocket(t)
	s := serve(t, env, next, "--sim-devices", "2", "--rescan", "100ms")
	old := f.Channel("infiniband/ucm0")
	old.Fail(errors.New("connection aborted"))
	for deadline := time.Now().Add(waitFor); f.Channel("infiniband/ucm0") == old || f.Channel("infiniband/ucm0") == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ucm0 was not served again")
		}
	}
	select {
	case err := <-s.done:
		t.Fatalf("serve returned: %v", err)
	default:
	}
}

// serve's failures come back as the command's error.
func TestServeFailsInProcess(t *testing.T) {
	f, env := fakeMachine(t)
	env.dropCap = func(uintptr) (bool, error) { return false, unix.EPERM }
	f.Preflight = func() error { return errors.New("/dev/cuse does not exist: load the CUSE module (modprobe cuse)") }
	if _, err := runIn(t, env, "--fabric", "sim", "--log-level", "error", "--runtime-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "modprobe cuse") {
		t.Errorf("ucmd with a failing preflight: %v", err)
	}
	f.Preflight = nil
	f.Refuse = func(cuse.Config) error { return unix.EBUSY }
	if _, err := runIn(t, env, "serve", "--fabric", "sim", "--log-level", "error", "--runtime-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "another ucmd running?") {
		t.Errorf("ucmd serve with the node taken: %v", err)
	}
	for _, tc := range []struct{ args, want string }{
		{"bogus", `unknown command "bogus"`},
		{"serve --log-level loud", `--log-level "loud"`},
		{"serve --wait-devices -1s", "--wait-devices -1s: cannot be negative"},
		{"serve --rescan 1ms", "--rescan 1ms: want 0 (never) or at least 100ms"},
		{"serve --rescan -2s", "--rescan -2s: want 0 (never) or at least 100ms"},
		{"serve --fabric sim --sim-devices 1025", "--sim-devices 1025: want from 1 to 1024"},
		{"serve --device ..", `--device "..": not an RDMA device name`},
		{"serve --max-ids -1", "cannot be negative"},
	} {
		if _, err := runIn(t, env, append(strings.Fields(tc.args), "--runtime-dir", t.TempDir())...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ucmd %s: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// status and conformance say what is wrong.
func TestStatusAndConformanceErrors(t *testing.T) {
	f, env := fakeMachine(t)
	if _, err := runIn(t, env, "status", "--runtime-dir", t.TempDir()); err == nil {
		t.Error("ucmd status without a daemon succeeded")
	}
	if _, err := runIn(t, env, "conformance", "--run", "[", "/dev/infiniband/ucm0"); err == nil || !strings.Contains(err.Error(), "--run") {
		t.Errorf("conformance --run [: %v", err)
	}
	if _, err := runIn(t, env, "conformance", filepath.Join(f.DevDir, "infiniband/ucm9")); err == nil {
		t.Error("conformance of a node nobody serves succeeded")
	}
	// The device of a node no ucmd serves is unknown; --ibdev names one.
	next := notifySocket(t)
	serve(t, env, next, "--sim-devices", "1")
	ucm0 := filepath.Join(f.DevDir, "infiniband/ucm0")
	out, err := runIn(t, env, "conformance", "--runtime-dir", t.TempDir(), "--run", "^write/short-header$", ucm0)
	if err != nil || !strings.Contains(out, "note: RDMA device of "+ucm0+" unknown") || !strings.Contains(out, "1 passed, 0 failed") {
		t.Errorf("conformance without the daemon's status: %v\n%s", err, out)
	}
	out, err = runIn(t, env, "conformance", "--ibdev", "nosuchdev0", "--run", "^write/short-header$", ucm0)
	if err != nil || !strings.Contains(out, "note: no loopback path on nosuchdev0") {
		t.Errorf("conformance --ibdev: %v\n%s", err, out)
	}
	// A skipped case passes the run, unless --strict.
	for _, strict := range []bool{false, true} {
		args := []string{"conformance", "--ibdev", "nosuchdev0", "--run", "^send_req/private-data-at-limit$", ucm0}
		if strict {
			args = append(args[:1], append([]string{"--strict"}, args[1:]...)...)
		}
		out, err := runIn(t, env, args...)
		if !strings.Contains(out, "0 passed, 0 failed, 1 skipped") || (err != nil) != strict ||
			(strict && !strings.Contains(err.Error(), "1 conformance case(s) skipped (--strict)")) {
			t.Errorf("conformance %v with its one case skipped: %v\n%s", args, err, out)
		}
	}
	// A device that fails every case fails the command.
	env.openDUT = func(path string) (conformance.DUT, error) {
		d, err := f.DUT("infiniband/ucm0", nil)
		return brokenDUT{d}, err
	}
	out, err = runIn(t, env, "conformance", "--ibdev", "x", "--run", "^write/", ucm0)
	if err == nil || !strings.Contains(err.Error(), "conformance case(s) failed") || !strings.Contains(out, "FAIL write/bad-command") || !strings.Contains(out, "kernel: ucm-abi.md") {
		t.Errorf("conformance of a broken device: %v\n%s", err, out)
	}
	// A timeout ends the run.
	out, err = runIn(t, env, "conformance", "--ibdev", "x", "--timeout", "1ns", "--run", "^write/short-header$", ucm0)
	if err == nil {
		t.Errorf("conformance --timeout 1ns: %v\n%s", err, out)
	}
}

// A device that never answers a write fails the case it hangs in when
// --timeout runs out, and the run ends with its summary instead of
// hanging with it.
func TestConformanceHungDevice(t *testing.T) {
	f, env := fakeMachine(t)
	serve(t, env, notifySocket(t), "--sim-devices", "1")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	env.openDUT = func(path string) (conformance.DUT, error) {
		d, err := f.DUT("infiniband/ucm0", nil)
		return hungDUT{d, release}, err
	}
	// The device answers only at the test's cleanup: that the run
	// returns at all shows it did not wait for the device.
	out, err := runIn(t, env, "conformance", "--ibdev", "x", "--timeout", "300ms", "--run", "^write/short-header$", "/dev/infiniband/ucm0")
	if err == nil || !strings.Contains(out, "FAIL write/short-header: no answer from the device before --timeout ran out") || !strings.Contains(out, "0 passed, 1 failed") {
		t.Errorf("conformance of a hung device: %v\n%s", err, out)
	}
}

// hungDUT is a device whose files' writes block until release closes.
type hungDUT struct {
	conformance.DUT
	release chan struct{}
}

func (d hungDUT) Open(bool) (conformance.File, error) { return hungFile{d.release}, nil }

type hungFile struct{ release chan struct{} }

func (f hungFile) Write([]byte) (int, error) { <-f.release; return 0, unix.EIO }
func (hungFile) Read(int) (int, error)       { return 0, unix.EINVAL }
func (hungFile) WaitReadable(time.Duration) (bool, error) {
	return false, nil
}
func (hungFile) SetNonblock(bool) error { return nil }
func (hungFile) Close() error           { return nil }

// brokenDUT is a device whose files cannot be opened.
type brokenDUT struct{ conformance.DUT }

func (brokenDUT) Open(bool) (conformance.File, error) { return nil, unix.EIO }

// exec's refusals come before it enters a namespace or runs anything.
func TestExecErrorsInProcess(t *testing.T) {
	_, env := fakeMachine(t)
	priv := execPrivileged
	t.Cleanup(func() { execPrivileged = priv })

	execPrivileged = func() bool { return false }
	if _, err := runIn(t, env, "exec", "--", "true"); err == nil || !strings.Contains(err.Error(), "exec needs root") {
		t.Errorf("exec without privileges: %v", err)
	}
	execPrivileged = func() bool { return true }
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "ucmd-no-such-user", "--", "true"}, "--user ucmd-no-such-user"},
		{[]string{"--user", "root", "--", "ucmd-no-such-program"}, "executable file not found"},
		{[]string{"--user", "root", "--", "true"}, "ucmd serve"}, // no class tree: refused before the namespace
	} {
		_, err := runIn(t, env, append([]string{"exec", "--runtime-dir", private}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("exec %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := user.Lookup("nobody"); err == nil {
		if _, err := runIn(t, env, "exec", "--runtime-dir", private, "--user", "nobody", "--", "true"); err == nil || !strings.Contains(err.Error(), "not searchable by other users") {
			t.Errorf("exec --user nobody with a 0700 runtime dir: %v", err)
		}
		if _, err := runIn(t, env, "exec", "--runtime-dir", "/", "--user", "nobody", "--", "ucmd-no-such-program"); err == nil || !strings.Contains(err.Error(), "executable file not found") {
			t.Errorf("exec --user nobody of a missing program: %v", err)
		}
	}
	hasCapSysAdmin() // reads /proc/self/status; what it says depends on the machine
}

func TestExecCred(t *testing.T) {
	c, err := lookupExecCred("0", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.uid != 0 || c.u.Username != "root" {
		t.Errorf("uid 0: %+v", c)
	}
	c.u.HomeDir = "/home/x"
	got := c.environ([]string{"PATH=/bin", "HOME=/root", "USER=alice", "X=1"})
	want := "PATH=/bin X=1 HOME=/home/x USER=root LOGNAME=root"
	if strings.Join(got, " ") != want {
		t.Errorf("environ: %v, want %s", got, want)
	}
	if err := searchableByAll("/"); err != nil {
		t.Errorf("searchableByAll(/): %v", err)
	}
	if err := searchableByAll(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("searchableByAll of a missing dir succeeded")
	}
}

// completion prints a script per shell. cobra's completion command took
// os.Stdout when it was made, so that is where it prints.
func TestCompletion(t *testing.T) {
	stdout := os.Stdout
	t.Cleanup(func() { os.Stdout = stdout })
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		tmp, err := os.Create(filepath.Join(t.TempDir(), sh))
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout = tmp
		_, err = runRoot(t, "completion", sh)
		os.Stdout = stdout
		tmp.Close()
		out, _ := os.ReadFile(tmp.Name())
		if err != nil || !bytes.Contains(out, []byte("ucmd")) || len(out) < 200 {
			t.Errorf("completion %s: %v, %d bytes", sh, err, len(out))
		}
	}
}

// The benchmarks run and print, briefly.
func TestBenchInProcess(t *testing.T) {
	dir := t.TempDir()
	out, err := runRoot(t, "bench", "storm", "--nodes", "2,3", "--loss", "0",
		"--cpuprofile", filepath.Join(dir, "cpu"), "--memprofile", filepath.Join(dir, "mem"))
	if err != nil || !strings.Contains(out, "3 nodes") {
		t.Errorf("bench storm: %v\n%s", err, out)
	}
	out, err = runRoot(t, "bench", "storm", "--nodes", "2", "--loss", "0", "--json")
	var rs []json.RawMessage
	if err != nil || json.Unmarshal([]byte(out), &rs) != nil || len(rs) != 1 {
		t.Errorf("bench storm --json: %v\n%s", err, out)
	}
	out, err = runRoot(t, "bench", "listener", "--requests", "20", "--senders", "2", "--accept-rate", "0", "--memprofile", filepath.Join(dir, "mem2"))
	if err != nil || out == "" {
		t.Errorf("bench listener: %v\n%s", err, out)
	}
	out, err = runRoot(t, "bench", "listener", "--requests", "20", "--senders", "2", "--json")
	if err != nil || !json.Valid([]byte(out)) {
		t.Errorf("bench listener --json: %v\n%s", err, out)
	}
	if _, err := runRoot(t, "bench", "storm", "--nodes", "2", "--cpuprofile", filepath.Join(dir, "no/such/dir")); err == nil {
		t.Error("bench storm with an unwritable profile succeeded")
	}
}

// Accounts from LDAP or sssd, which os/user cannot see in a build without
// cgo, are found through getent(1); without getent, the sudo user is who
// sudo says (SUDO_UID, SUDO_GID).
func TestExecCredBeyondEtcPasswd(t *testing.T) {
	saved := getent
	t.Cleanup(func() { getent = saved })
	getent = func(_ context.Context, args ...string) ([]byte, error) {
		switch strings.Join(args, " ") {
		case "passwd ucmd-ldap-alice":
			return []byte("ucmd-ldap-alice:*:5000:5001:Alice:/home/alice:/bin/sh\n"), nil
		case "initgroups ucmd-ldap-alice":
			return []byte("ucmd-ldap-alice        5001 27 100\n"), nil
		}
		return nil, errors.New("exit status 2")
	}
	c, err := lookupExecCred("ucmd-ldap-alice", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.uid != 5000 || c.gid != 5001 || fmt.Sprint(c.groups) != "[5001 27 100]" || c.u.HomeDir != "/home/alice" {
		t.Errorf("through getent: uid %d gid %d groups %v home %q", c.uid, c.gid, c.groups, c.u.HomeDir)
	}

	sudo := map[string]string{"SUDO_USER": "ucmd-ghost", "SUDO_UID": "6000", "SUDO_GID": "6001"}
	for _, name := range []string{"ucmd-ghost", "6000"} {
		c, err := lookupExecCred(name, func(k string) string { return sudo[k] })
		if err != nil {
			t.Fatalf("%s, the sudo user: %v", name, err)
		}
		if c.uid != 6000 || c.gid != 6001 || c.u.Username != "ucmd-ghost" {
			t.Errorf("%s, the sudo user: uid %d gid %d name %q", name, c.uid, c.gid, c.u.Username)
		}
	}
	if _, err := lookupExecCred("ucmd-someone-else", func(k string) string { return sudo[k] }); err == nil || !strings.Contains(err.Error(), "--user ucmd-someone-else: not in /etc/passwd") {
		t.Errorf("an unknown user who is not the sudo user: %v", err)
	}
}

// exec exits as env(1) does (125 its own failure, 126 a program it cannot
// run, 127 none found), and a command line ucmd cannot run with 2.
func TestExitStatuses(t *testing.T) {
	_, env := fakeMachine(t)
	priv := execPrivileged
	t.Cleanup(func() { execPrivileged = priv })
	execPrivileged = func() bool { return true }
	dir := t.TempDir()
	script := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"exec", "--runtime-dir", dir, "--user", "root", "--", "ucmd-no-such-program"}, exitNotFound},
		{[]string{"exec", "--runtime-dir", dir, "--user", "root", "--", filepath.Join(dir, "missing")}, exitNotFound},
		{[]string{"exec", "--runtime-dir", dir, "--user", "root", "--", script}, exitCannotRun},
		{[]string{"exec", "--runtime-dir", dir, "--user", "root", "--", "true"}, exitExecFailed}, // no class tree
		{[]string{"exec", "--runtime-dir", dir, "--no-such-flag", "--", "true"}, exitUsage},
		{[]string{"exec", "--runtime-dir", dir}, exitUsage},
		{[]string{"bogus"}, exitUsage},
		{[]string{"serve", "--rescan", "1ms"}, exitUsage},
		{[]string{"serve", "--sim-devices", "3"}, exitUsage}, // the default fabric is umad
		{[]string{"serve", "--fabric", "sim", "--status-group", "ucmd-no-such-group"}, exitUsage},
		{[]string{"status", "--runtime-dir", "run/ucmd"}, exitUsage},
		{[]string{"status", "state", "establised"}, exitUsage},
		{[]string{"bench", "storm", "--nodes", "0"}, exitUsage},
		{[]string{"bench", "storm", "--loss", "2"}, exitUsage},
		{[]string{"bench", "storm", "--pattern", "star"}, exitUsage},
		{[]string{"bench", "listener", "--accept-rate", "-5"}, exitUsage},
		{[]string{"bench", "listener", "--mra", "sometimes"}, exitUsage},
		{[]string{"status", "--no-such-flag"}, exitUsage},
		{[]string{"trace", "--ladder", "--json"}, exitUsage},
		{[]string{"trace", "--ladder", "-q", "-w", filepath.Join(dir, "x.pcapng")}, exitUsage},
		{[]string{"trace", "-q"}, exitUsage},
		{[]string{"trace", "--count", "-1"}, exitUsage},
	} {
		_, err := runIn(t, env, tc.args...)
		if got := exitStatus(err); got != tc.want {
			t.Errorf("ucmd %v: %v, exit status %d, want %d", tc.args, err, got, tc.want)
		}
	}
	execPrivileged = func() bool { return false }
	if _, err := runIn(t, env, "exec", "--", "true"); exitStatus(err) != exitExecFailed {
		t.Errorf("exec without privileges: %v, exit status %d, want %d", err, exitStatus(err), exitExecFailed)
	}
}

// --mode that the installed udev rule contradicts is warned about: udev
// applies the rule's MODE at every event, after ucmd's chmod. The rule of
// a name in /etc overrides the packaged one.
func TestUDevModeConflict(t *testing.T) {
	etc, lib := t.TempDir(), t.TempDir()
	saved := udevRuleDirs
	t.Cleanup(func() { udevRuleDirs = saved })
	udevRuleDirs = []string{etc, lib}
	packaged, err := os.ReadFile("../../dist/90-ucmd.rules")
	if err != nil {
		t.Fatal(err)
	}
	if why := udevModeConflict(0o600); why != "" {
		t.Errorf("no rule installed: %q", why)
	}
	if err := os.WriteFile(filepath.Join(lib, udevRuleName), packaged, 0o644); err != nil {
		t.Fatal(err)
	}
	if why := udevModeConflict(0o666); why != "" {
		t.Errorf("--mode 0666 with the packaged rule: %q", why)
	}
	if why := udevModeConflict(0o600); !strings.Contains(why, "--mode 0600: udev's rule "+filepath.Join(lib, udevRuleName)+" sets MODE 0666") {
		t.Errorf("--mode 0600 with the packaged rule: %q", why)
	}
	override := strings.ReplaceAll(string(packaged), `MODE="0666"`, `MODE="0600"`)
	if err := os.WriteFile(filepath.Join(etc, udevRuleName), []byte(override), 0o644); err != nil {
		t.Fatal(err)
	}
	if why := udevModeConflict(0o600); why != "" {
		t.Errorf("--mode 0600 with an /etc rule of MODE 0600: %q", why)
	}
}

// A build with cgo cannot drop CAP_SYS_MODULE from every thread, and the
// warning says so and how to build ucmd instead.
func TestServeSaysCgoKeepsCapability(t *testing.T) {
	f, env := fakeMachine(t)
	env.dropCap = func(uintptr) (bool, error) { return true, syscall.ENOTSUP }
	f.Preflight = func() error { return errors.New("stop here") }
	out, _ := runIn(t, env, "serve", "--fabric", "sim", "--runtime-dir", t.TempDir())
	if !strings.Contains(out, "keeping CAP_SYS_MODULE: this ucmd was built with cgo") || !strings.Contains(out, "CGO_ENABLED=0") {
		t.Errorf("serve's log:\n%s", out)
	}
}
