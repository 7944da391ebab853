//go:build e2e

package e2e

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	mgmtClassCM    = 0x07 // IB_MGMT_CLASS_CM
	cmClassVer     = 2    // IB_CM_CLASS_VERSION
	mgmtMethodSend = 0x03 // IB_MGMT_METHOD_SEND: every CM message uses it
)

// registerCM opens umad device dev and registers for unsolicited CM-class
// SENDs, as ucmd does; on success it unregisters again.
func registerCM(t *testing.T, dev string) error {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id, err := umadRegister(f, mgmtClassCM, cmClassVer, mgmtMethodSend)
	if err != nil {
		return err
	}
	if err := umadUnregister(f, id); err != nil {
		t.Fatal(err)
	}
	return nil
}

// TestDeploymentCMClassOwnership is the deployment constraint ucmd depends
// on: the kernel grants the CM class's SEND method to one agent per port. So
// ucmd can register it only while ib_cm is not loaded; with ib_cm loaded the
// registration fails with EINVAL ("Method 3 already in use"), which ucmd must
// report as "unload ib_cm (and rdma_cm, ...)". Unloading ib_cm frees it again.
func TestDeploymentCMClassOwnership(t *testing.T) {
	devs := []string{"/dev/infiniband/umad0", "/dev/infiniband/umad1"}
	if moduleLoaded("ib_cm") {
		t.Fatal("precondition: ib_cm must not be loaded")
	}
	for _, d := range devs {
		if err := registerCM(t, d); err != nil {
			t.Errorf("without ib_cm: %v, want success", err)
		}
	}

	modprobe(t, "ib_cm")
	for _, d := range devs {
		if err := registerCM(t, d); !errors.Is(err, unix.EINVAL) {
			t.Errorf("with ib_cm loaded: got %v, want EINVAL", err)
		}
	}

	rmmod(t, "ib_cm")
	for _, d := range devs {
		if err := registerCM(t, d); err != nil {
			t.Errorf("after unloading ib_cm: %v, want success", err)
		}
	}
}
