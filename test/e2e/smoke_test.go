//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestSmokeDeviceNodes: the nodes ucmd and its clients open exist as
// character devices (devtmpfs creates them; there is no udev in the guest).
func TestSmokeDeviceNodes(t *testing.T) {
	for _, p := range []string{
		"/dev/cuse",
		"/dev/infiniband/umad0", "/dev/infiniband/umad1",
		"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1",
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if fi.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("%s: mode %v, want a character device", p, fi.Mode())
		}
	}
}

// TestSmokeRxePorts: both Soft-RoCE ports are ACTIVE with a link-local GID
// at index 0 (the only GIDs that carry MADs between rxe0 and rxe1), and
// umadN serves rxeN port 1, as the other e2e tests assume.
func TestSmokeRxePorts(t *testing.T) {
	for i, dev := range []string{"rxe0", "rxe1"} {
		port := "/sys/class/infiniband/" + dev + "/ports/1/"
		if got := readSysfs(t, port+"state"); got != "4: ACTIVE" {
			t.Errorf("%s port 1 state %q, want \"4: ACTIVE\"", dev, got)
		}
		if gid := readSysfs(t, port+"gids/0"); !strings.HasPrefix(gid, "fe80:0000:0000:0000:") {
			t.Errorf("%s GID 0 = %s, want a link-local fe80::/64 GID", dev, gid)
		}
		umad := fmt.Sprintf("/sys/class/infiniband_mad/umad%d/", i)
		if got := readSysfs(t, umad+"ibdev"); got != dev {
			t.Errorf("umad%d serves %s, want %s", i, got, dev)
		}
		if got := readSysfs(t, umad+"port"); got != "1" {
			t.Errorf("umad%d serves port %s, want 1", i, got)
		}
	}
	if moduleLoaded("ib_cm") {
		t.Error("ib_cm is loaded: it owns the CM MAD class that ucmd needs")
	}
}
