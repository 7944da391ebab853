package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
)

// The real preflight: /dev/cuse first, then both capabilities named with
// what each is for, then Yama.
func TestCheckMachine(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, "cuse")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	yama := filepath.Join(dir, "ptrace_scope")
	if err := os.WriteFile(yama, []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	all := func(uint) bool { return true }
	for _, tc := range []struct {
		dev  string
		has  func(uint) bool
		yama string
		want string // "" for no error
	}{
		{filepath.Join(dir, "none"), all, "", filepath.Join(dir, "none") + " does not exist: load the CUSE module (modprobe cuse)"},
		{dev, func(uint) bool { return false }, "", "missing privileges: CAP_SYS_ADMIN (to register devices through /dev/cuse), " +
			"CAP_SYS_PTRACE (to read and write clients' memory (process_vm_readv/writev)); run ucmd as root or grant these capabilities"},
		{dev, func(b uint) bool { return b != unix.CAP_SYS_PTRACE }, "", "missing privileges: CAP_SYS_PTRACE"},
		{dev, all, yama, "kernel.yama.ptrace_scope is 3"},
		{dev, all, filepath.Join(dir, "no-yama"), ""},
	} {
		err := checkMachine(tc.dev, tc.has, tc.yama)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("checkMachine(%s): %v", tc.dev, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("checkMachine(%s): %v, want %q", tc.dev, err, tc.want)
		}
	}
	// On this machine: whatever it finds, it is one of the above.
	if err := preflight(); err != nil {
		t.Logf("preflight here: %v", err)
	}
}

// The real registrar is cuse.Open: without /dev/cuse it fails, saying so.
func TestRegisterWithoutCUSE(t *testing.T) {
	if _, err := os.Stat(cuse.DevicePath); err == nil {
		t.Skip(cuse.DevicePath + " exists: this would register a device")
	}
	env := Env{}.withDefaults()
	if _, err := env.Register(t.Context(), cuse.Config{DevName: "infiniband/ucm0"}, nil); err == nil || !strings.Contains(err.Error(), cuse.DevicePath) {
		t.Fatalf("register without %s: %v", cuse.DevicePath, err)
	}
}
