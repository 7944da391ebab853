//go:build e2e

package e2e

import (
	"debug/buildinfo"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Deployment (issue 14): Type=notify readiness, capabilities, ucmd exec
// --user and the conformance node check, on the real kernel.

// capBit reads bit of the named capability set (CapEff, CapBnd, ...) of pid.
func capBit(t *testing.T, pid int, set string, bit uint) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, set+":"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<bit) != 0
		}
	}
	t.Fatalf("no %s in /proc/%d/status", set, pid)
	return false
}

// cgoBuild reports whether the ucmd under test was built with cgo (make
// e2e's E2E_RACE=1, since the race detector needs it).
func cgoBuild(t *testing.T) bool {
	t.Helper()
	info, err := buildinfo.ReadFile(ucmdBin(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Settings {
		if s.Key == "CGO_ENABLED" {
			return s.Value == "1"
		}
	}
	return false
}

// READY=1 arrives over $NOTIFY_SOCKET once every node exists (Type=notify),
// STOPPING=1 on SIGTERM; ucmd no longer holds CAP_SYS_MODULE by then.
func TestDeployNotifyReadyAndCaps(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	run := t.TempDir()
	cmd := exec.Command(ucmdBin(t), "serve", "--fixed-numbers", "--wait-devices", "5s", "--runtime-dir", run)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if !capBit(t, os.Getpid(), "CapBnd", unix.CAP_SYS_MODULE) {
		t.Fatal("the test runs without CAP_SYS_MODULE: nothing to drop")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("ucmd log:\n%s", logs.String())
		}
	}()
	buf := make([]byte, 4096)
	l.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := l.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message: %v", err)
	}
	msg := string(buf[:n])
	// at READY=1, every node and the status socket are in place
	for i := range 2 {
		node := "/dev/infiniband/ucm" + strconv.Itoa(i)
		var st unix.Stat_t
		if err := unix.Stat(node, &st); err != nil {
			t.Fatalf("at %q: %s: %v", msg, node, err)
		}
		if st.Mode&0o777 != 0o666 || unix.Major(uint64(st.Rdev)) != 231 || unix.Minor(uint64(st.Rdev)) != uint32(224+i) {
			t.Errorf("at READY=1: %s mode %o dev %d:%d", node, st.Mode&0o777, unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
		}
	}
	if _, err := os.Stat(filepath.Join(run, "class/infiniband_cm/ucm1/ibdev")); err != nil {
		t.Errorf("at READY=1: %v", err)
	}
	if !strings.HasPrefix(msg, "READY=1\n") || !strings.Contains(msg, "STATUS=serving /dev/infiniband/ucm0 /dev/infiniband/ucm1") {
		t.Errorf("first message %q, want READY=1 and STATUS naming both nodes", msg)
	}
	t.Logf("sd_notify: %q", msg)
	pid := cmd.Process.Pid
	if cgoBuild(t) {
		// E2E_RACE=1: without the runtime's AllThreadsSyscall a cgo build
		// cannot change every thread's sets, so it keeps them and says so.
		if logs.wait(regexp.MustCompile(`level=WARN msg="keeping CAP_SYS_MODULE: this ucmd was built with cgo`)) == nil {
			t.Error("a cgo build of ucmd did not warn that it kept CAP_SYS_MODULE")
		}
	} else {
		for _, set := range []string{"CapEff", "CapPrm", "CapBnd"} {
			if capBit(t, pid, set, unix.CAP_SYS_MODULE) {
				t.Errorf("ucmd still has CAP_SYS_MODULE in %s", set)
			}
		}
	}
	if !capBit(t, pid, "CapEff", unix.CAP_SYS_ADMIN) || !capBit(t, pid, "CapEff", unix.CAP_SYS_PTRACE) {
		t.Error("ucmd lost the capabilities it needs")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	l.SetReadDeadline(time.Now().Add(15 * time.Second))
	if n, err = l.Read(buf); err != nil || string(buf[:n]) != "STOPPING=1" {
		t.Errorf("after SIGTERM: %q, %v; want STOPPING=1", buf[:n], err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("ucmd exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("ucmd did not exit within 15 s of SIGTERM")
	}
}

// ucmd exec --user runs the program unprivileged in the namespace, where it
// finds its device and can open the node.
func TestDeployExecAsUser(t *testing.T) {
	d := startDaemon(t, "--fixed-numbers")
	for p := d.run; p != "/"; p = filepath.Dir(p) { // as /run/ucmd is: 0755
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, st.Mode().Perm()|0o055); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(ucmdBin(t), "exec", "--runtime-dir", d.run, "--", "sh", "-c",
		`id -u; cat /sys/class/infiniband_cm/ucm1/ibdev; exec 3<>/dev/infiniband/ucm1 && echo opened; grep CapEff /proc/self/status`)
	cmd.Env = append(os.Environ(), "SUDO_USER=nobody")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ucmd exec (SUDO_USER=nobody): %v\n%s", err, out)
	}
	if want := "65534\nrxe1\nopened\nCapEff:\t0000000000000000\n"; string(out) != want {
		t.Errorf("ucmd exec as the sudo user printed %q, want %q", out, want)
	}
}

// conformance takes a real node (the check passes through CUSE) and refuses
// /dev/null in one line.
func TestDeployConformanceNodeCheck(t *testing.T) {
	d := startDaemon(t, "--fixed-numbers")
	if out, err := d.ucmd("conformance", "--run", "^write/(short-header|bad-command)$", "/dev/infiniband/ucm0"); err != nil ||
		!strings.Contains(out, "2 passed, 0 failed") {
		t.Errorf("conformance on ucm0: %v\n%s", err, out)
	}
	out, err := d.ucmd("conformance", "/dev/null")
	if err == nil || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "not a ucm device") {
		t.Errorf("conformance /dev/null: %v\n%s", err, out)
	}
}
