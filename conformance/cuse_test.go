package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/ucm"
)

// TestNodeOverCUSE runs the suite through a real device node: a ucm
// device on the simulated fabric registered with the kernel's CUSE, and
// the real-node DUT writing to it from this process. It needs root and
// /dev/cuse (the project's VM has both, see requireCUSE). Once those are
// there, every failure fails the test, the registration included.
func TestNodeOverCUSE(t *testing.T) {
	requireCUSE(t)
	fab := sim.New(sim.Config{Seed: 1})
	sd, err := fab.AddIB("cusetest0", 1)
	if err != nil {
		t.Fatal(err)
	}
	cm := cmcore.New(sd, cmcore.Options{})
	if err := cm.Start(); err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	dev, err := ucm.New(ucm.Config{CM: cm, Memory: callermem.ProcessVM{}})
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("ucmtest%d", os.Getpid())
	srv, err := cuse.Open(context.Background(), cuse.Config{DevName: name, MaxWrite: ucm.MaxWrite}, dev)
	if err != nil {
		t.Fatalf("CUSE registration: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	defer func() {
		srv.Close()
		if err := <-served; err != nil && !errors.Is(err, cuse.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()

	path := "/dev/" + name
	var dut conformance.DUT
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if dut, err = conformance.OpenPath(path); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer dut.Close()
	a, err := sd.Port(1).Attr()
	if err != nil {
		t.Fatal(err)
	}
	lp := conformance.LoopbackPath(a.GIDs[0].GID, a.LID)
	dut.(*conformance.Node).Loopback = &lp

	failed := conformance.Run(context.Background(), dut, func(c conformance.Case, err error) {
		if err != nil && !errors.Is(err, conformance.ErrSkip) {
			t.Errorf("%s: %v", c.Name, err)
		}
	})
	if failed != 0 {
		t.Errorf("%d cases failed", failed)
	}
}

// requireCUSE decides the way test/e2e does: in the test VM
// (UCMD_VM_GUEST=1) root and /dev/cuse are part of the environment, and
// their absence fails the test. Elsewhere (a host without the cuse module,
// a non-root run) the test is skipped, and says that nothing ran over a
// real node.
func requireCUSE(t *testing.T) {
	t.Helper()
	var missing string
	if os.Geteuid() != 0 {
		missing = "not root"
	} else if _, err := os.Stat(cuse.DevicePath); err != nil {
		missing = err.Error()
	}
	if missing == "" {
		return
	}
	if os.Getenv("UCMD_VM_GUEST") == "1" {
		t.Fatalf("%s in the test VM: the VM has root and the cuse module", missing)
	}
	t.Skipf("SKIPPED, the suite did NOT run over a real CUSE node: %s (needs root and %s; make e2e runs the suite on real nodes in the VM)", missing, cuse.DevicePath)
}
