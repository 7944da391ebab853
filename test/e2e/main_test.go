//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"testing"
)

// TestMain refuses to run outside the VM: on the host these tests would
// either fail for lack of devices or, as root, change the host's kernel.
func TestMain(m *testing.M) {
	if os.Getenv("UCMD_VM_GUEST") != "1" {
		fmt.Fprintln(os.Stderr, "e2e: these tests run inside the test VM only: use `make e2e` (see test/vm/README.md)")
		os.Exit(2)
	}
	os.Exit(m.Run())
}
