//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Issue 12 point 4, on the real kernel: `ucmclient --cred-check` opens a
// node, creates ids A and B, and checks that another of its threads may use
// the fd while a forked child (CREATE_ID, ATTR_ID(A), DESTROY_ID(B)) and a
// program exec'd on the inherited fd get EACCES, as with the kernel's
// ib_safe_file_access; then that A and B are intact. The 32-bit client runs
// it too (issue 12 point 8).
func TestDaemonClientCredentials(t *testing.T) {
	d := startDaemon(t)
	bins := map[string]string{"64-bit": ucmclientBin(t)}
	if p := ucmclient32Bin(t); p != "" {
		bins["32-bit"] = p
	}
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			out, err := runClient(t, bin, "--cred-check", "-D", "/dev/infiniband/ucm0")
			t.Logf("ucmclient --cred-check:\n%s", out)
			if err != nil || !strings.Contains(out, "cred-check: all ok") {
				t.Errorf("ucmclient --cred-check: %v", err)
			}
			for _, want := range []string{
				"ok   another thread: ATTR_ID of the opener's id A allowed",
				"ok   forked child: CREATE_ID -> EACCES",
				"ok   forked child: ATTR_ID of the opener's id A -> EACCES",
				"ok   forked child: DESTROY_ID of the opener's id B -> EACCES",
				"ok   exec'd program: DESTROY_ID of the opener's id B -> EACCES",
				"ok   opener: DESTROY_ID of B allowed",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q", want)
				}
			}
			if name == "32-bit" {
				checkHighPointers(t, out)
			}
		})
	}
	d.wantNoFiles(t)
}

// checkHighPointers: the 32-bit client's buffers lie above 2 GiB, so a
// pointer sign-extended instead of zero-extended would have faulted.
func checkHighPointers(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`\((\d+)-byte pointers, stack at 0x([0-9a-f]+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Errorf("no pointer line in the output")
		return
	}
	addr, _ := strconv.ParseUint(m[2], 16, 64)
	if m[1] != "4" || addr < 0x80000000 || addr > 0xffffffff {
		t.Errorf("%s-byte pointers, stack at %#x: want a 32-bit client with its stack above 2 GiB", m[1], addr)
	}
}

// runClient runs a ucmclient to completion, bounded.
func runClient(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// ucmclient32Bin is the static 32-bit ucmclient (test/clients/build.sh
// -m32), which make e2e builds; "" if this run has none (a test binary run
// by hand), so the 64-bit cases still run. Under make e2e it must be there.
func ucmclient32Bin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("UCMCLIENT32_BIN")
	if p == "" {
		t.Log("UCMCLIENT32_BIN unset: no 32-bit client in this run")
		return ""
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("32-bit ucmclient: %v", err)
	}
	return p
}
