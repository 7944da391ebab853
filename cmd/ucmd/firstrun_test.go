package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/cobra"

	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/sysclass"
)

func runRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// Wrong flags are reported as wrong flags, before /dev/cuse or privileges
// are looked at (issue 14.5).
func TestServeFlagsCheckedFirst(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--fabric", "bogus"}, `--fabric "bogus": want umad`},
		{[]string{"--fabric", "bogus"}, `--fabric "bogus"`},
		{[]string{"serve", "--sim-devices", "-5"}, "--sim-devices -5: want from 1 to 1024"},
		{[]string{"serve", "--fabric", "sim", "--sim-devices", "0"}, "--sim-devices 0"},
		{[]string{"serve", "--fabric", "sim", "--device", "mlx5_0"}, "--device selects"},
		{[]string{"serve", "--device", "../x"}, `--device "../x": not an RDMA device name`},
		{[]string{"serve", "--device", ""}, `--device "": not an RDMA device name`},
		{[]string{"--device", ""}, `--device "": not an RDMA device name`},
		{[]string{"serve", "--device", "rxe0,"}, `--device "": not an RDMA device name`},
		{[]string{"serve", "--mode", "999"}, "--mode"},
		{[]string{"serve", "--auto-mra", "32"}, "--auto-mra 32: want an MRA service timeout from 1 to 31"},
		{[]string{"serve", "--auto-mra", "-1"}, "--auto-mra -1"},
		{[]string{"serve", "--metrics-listen", "9435"}, `--metrics-listen "9435": want HOST:PORT`},
		{[]string{"serve", "--metrics-listen", "127.0.0.1:http"}, `--metrics-listen "127.0.0.1:http": port "http" is not a number`},
	} {
		_, err := runRoot(t, append(tc.args, "--runtime-dir", t.TempDir())...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ucmd %s: %v, want an error mentioning %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	for _, args := range [][]string{{"serve"}, {"status"}, {"trace"}, {"exec", "--", "true"}} {
		args = append([]string{args[0], "--runtime-dir", ""}, args[1:]...)
		if _, err := runRoot(t, args...); err == nil || !strings.Contains(err.Error(), `--runtime-dir "": want a directory`) {
			t.Errorf("ucmd %s: %v", strings.Join(args, " "), err)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	want := "ucmd " + buildVersion() + " (ucm ABI 5, " + runtime.Version() + ")\n"
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := runRoot(t, args...)
		if err != nil || out != want {
			t.Errorf("ucmd %s: %q, %v; want %q", args[0], out, err, want)
		}
	}
}

// Every command's --help shows examples.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Name() != "help" && !c.Hidden {
			n++
			if strings.TrimSpace(c.Example) == "" {
				t.Errorf("%q has no examples in --help", c.CommandPath())
			}
			var out bytes.Buffer
			c.SetOut(&out)
			if err := c.Help(); err != nil || !strings.Contains(out.String(), "Examples:") {
				t.Errorf("%q --help shows no Examples section (%v)", c.CommandPath(), err)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if n < 10 { // ucmd, serve, exec, status, conformance, version, completion and its 4 shells
		t.Errorf("only %d commands walked", n)
	}
}

// conformance refuses what is not a ucm node with one line, running no case.
func TestConformanceRefusesNonUCM(t *testing.T) {
	out, err := runRoot(t, "conformance", "--runtime-dir", t.TempDir(), "/dev/null")
	if !errors.Is(err, conformance.ErrNotUCM) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("ucmd conformance /dev/null: %v, want one line saying it is not a ucm device", err)
	}
	if out != "" {
		t.Fatalf("ucmd conformance /dev/null printed %q, want nothing (no cases run)", out)
	}
}

func TestExecUserDefault(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	sudo := env(map[string]string{"SUDO_USER": "alice"})
	for _, tc := range []struct {
		flag    string
		changed bool
		getenv  func(string) string
		want    string
	}{
		{"", false, sudo, "alice"},
		{"", false, env(nil), ""},
		{"bob", true, sudo, "bob"},
		{"root", true, sudo, ""},
		{"", false, env(map[string]string{"SUDO_USER": "root"}), ""},
	} {
		if got := execUser(tc.flag, tc.changed, tc.getenv); got != tc.want {
			t.Errorf("execUser(%q, %v) = %q, want %q", tc.flag, tc.changed, got, tc.want)
		}
	}
	if !capEffHas("Name:\tx\nCapEff:\t000001ffffffffff\n", 21) || capEffHas("CapEff:\t0000000000000000\n", 21) {
		t.Error("capEffHas")
	}
}

// sharedBin builds ucmd where another user can run it.
func sharedBin(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ucmd-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ucmd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// ucmd exec without root says it needs root, not a mkdir error.
func TestExecNeedsRoot(t *testing.T) {
	bin := sharedBin(t)
	cmd := exec.Command(bin, "exec", "--runtime-dir", t.TempDir(), "--", "true")
	cmd.Dir = "/"
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "exec needs root") || strings.Contains(string(out), "permission denied") {
		t.Fatalf("ucmd exec as a user: %v\n%s", err, out)
	}
}

// ucmd exec runs the program as --user, default the sudo user, inside the
// namespace.
func TestExecAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN) for a mount namespace")
	}
	run := t.TempDir()
	// The program, as the user, follows /sys/class's symlinks into the
	// runtime dir: searchable by all, as systemd's RuntimeDirectory= is.
	for _, d := range []string{run, filepath.Dir(run)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := sysclass.WriteTree(run, []sysclass.Device{{Index: 0, IBDev: "rxe0", Major: 231, Minor: 224}}); err != nil {
		t.Fatal(err)
	}
	bin := sharedBin(t)
	script := `echo "$(id -u):$(id -g):$USER:$(cat /sys/class/infiniband_cm/ucm0/ibdev)"; grep CapEff /proc/self/status`
	for _, tc := range []struct {
		env  []string
		args []string
		want string
		caps bool
	}{
		{[]string{"SUDO_USER=nobody"}, nil, "65534:65534:nobody:rxe0", false},
		{nil, []string{"--user", "nobody"}, "65534:65534:nobody:rxe0", false},
		{[]string{"SUDO_USER=nobody"}, []string{"--user", "root"}, "0:0:", true},
	} {
		args := append(append([]string{"exec", "--runtime-dir", run}, tc.args...), "--", "sh", "-c", script)
		cmd := exec.Command(bin, args...)
		cmd.Dir = "/"
		cmd.Env = append(append(os.Environ()[:0:0], "PATH="+os.Getenv("PATH"), "USER=root"), tc.env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ucmd %v (%v): %v\n%s", args, tc.env, err, out)
		}
		if !strings.HasPrefix(string(out), tc.want) {
			t.Errorf("ucmd %v (%v) printed %q, want %q...", args, tc.env, out, tc.want)
		}
		noCaps := strings.Contains(string(out), "CapEff:\t0000000000000000")
		if noCaps == tc.caps {
			t.Errorf("ucmd %v (%v): capabilities %q", args, tc.env, out)
		}
	}
	// A runtime dir other users cannot reach is reported, not a confusing
	// "Permission denied" from the program.
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := sysclass.WriteTree(private, []sysclass.Device{{Index: 0, IBDev: "rxe0"}}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "exec", "--runtime-dir", private, "--user", "nobody", "--", "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not searchable by other users") {
		t.Errorf("exec --user with a 0700 runtime dir: %v\n%s", err, out)
	}
}

// PROGRAM starts with SIGPIPE at its default action, and ignored with
// --ignore-sigpipe (as systemd starts a service's processes).
func TestExecIgnoreSIGPIPE(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN) for a mount namespace")
	}
	run := t.TempDir()
	if err := sysclass.WriteTree(run, []sysclass.Device{{Index: 0, IBDev: "rxe0", Major: 231, Minor: 224}}); err != nil {
		t.Fatal(err)
	}
	bin := sharedBin(t)
	const pipeBit = 1 << (13 - 1) // SIGPIPE in /proc's SigIgn mask
	for _, tc := range []struct {
		args    []string
		ignored bool
	}{
		{nil, false},
		{[]string{"--ignore-sigpipe"}, true},
	} {
		args := append(append([]string{"exec", "--runtime-dir", run, "--user", "root"}, tc.args...), "--", "grep", "^SigIgn:", "/proc/self/status")
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ucmd %v: %v\n%s", args, err, out)
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(out), "SigIgn:")), 16, 64)
		if err != nil {
			t.Fatalf("ucmd %v printed %q", args, out)
		}
		if got := mask&pipeBit != 0; got != tc.ignored {
			t.Errorf("ucmd %v: SIGPIPE ignored %v, want %v (SigIgn %#x)", args, got, tc.ignored, mask)
		}
	}
}
