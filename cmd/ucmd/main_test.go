package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ucmd/ucmd/internal/sysclass"
)

// ucmdBin builds the command once per test binary run.
func ucmdBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ucmd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestVersion(t *testing.T) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "ucmd ") || !strings.Contains(out.String(), "ABI 5") {
		t.Fatalf("version printed %q", out.String())
	}
}

func TestExecShowsClassTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN) for a mount namespace")
	}
	run := t.TempDir()
	if err := sysclass.WriteTree(run, []sysclass.Device{{Index: 0, IBDev: "rxe0", Major: 231, Minor: 224}}); err != nil {
		t.Fatal(err)
	}
	bin := ucmdBin(t)
	out, err := exec.Command(bin, "exec", "--runtime-dir", run, "--",
		"sh", "-c", "cat /sys/class/infiniband_cm/ucm0/ibdev /sys/class/infiniband_cm/abi_version; ls /sys/class/net >/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("ucmd exec: %v\n%s", err, out)
	}
	if string(out) != "rxe0\n5\n" {
		t.Fatalf("ucmd exec printed %q, want \"rxe0\\n5\\n\"", out)
	}
	if _, err := os.Stat("/sys/class/infiniband_cm"); !os.IsNotExist(err) {
		t.Fatalf("the host sees /sys/class/infiniband_cm: %v", err)
	}
}

func TestExecWithoutTreeSaysWhy(t *testing.T) {
	bin := ucmdBin(t)
	out, err := exec.Command(bin, "exec", "--runtime-dir", t.TempDir(), "--", "true").CombinedOutput()
	if err == nil {
		t.Fatal("ucmd exec succeeded without a class tree")
	}
	if !strings.Contains(string(out), "ucmd serve") {
		t.Fatalf("error does not say what to do: %s", out)
	}
}
