package conformance_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
)

// TestFake runs every case over the fake kernel, each on a fresh device.
func TestFake(t *testing.T) { testFake(t, nil) }

// TestFakeDelivered is TestFake with the CM receiving as on hw/umad: each
// MAD handed to it on the endpoint's goroutine, in a buffer overwritten
// after the call, which shows a CM that keeps a received MAD or a slice
// of it. (The other tests on the simulated fabric take MADs from Recv.)
func TestFakeDelivered(t *testing.T) { testFake(t, &fakedut.Options{Deliver: true}) }

func testFake(t *testing.T, opts *fakedut.Options) {
	for _, c := range conformance.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			d := fakedut.New(t, opts)
			err := conformance.RunCase(context.Background(), d, c)
			if errors.Is(err, conformance.ErrSkip) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatalf("%s: %v", c.Spec, err)
			}
		})
	}
}

// TestRun runs the suite's entry point once over one shared device, as
// `ucmd conformance` will.
func TestRun(t *testing.T) {
	d := fakedut.New(t, nil)
	n := 0
	failed := conformance.Run(context.Background(), d, func(c conformance.Case, err error) {
		n++
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	})
	if failed != 0 || n != len(conformance.Cases()) {
		t.Errorf("%d failed of %d run, %d cases", failed, n, len(conformance.Cases()))
	}
}

// Without a loopback path the connecting cases are skipped, not failed.
func TestSkipWithoutPath(t *testing.T) {
	d := noPath{fakedut.New(t, nil)}
	skipped := 0
	failed := conformance.Run(context.Background(), d, func(c conformance.Case, err error) {
		if errors.Is(err, conformance.ErrSkip) {
			skipped++
		}
	})
	if failed != 0 || skipped == 0 {
		t.Errorf("%d failed, %d skipped", failed, skipped)
	}
}

type noPath struct{ *fakedut.DUT }

func (noPath) LoopbackPath() (p abi.PathRec, ok bool) { return p, false }
