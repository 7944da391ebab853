package conformance

import (
	"context"
	"errors"
	"testing"
)

// TestFake runs every case over the fake kernel, each on a fresh device.
func TestFake(t *testing.T) {
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			d := NewFake(t, nil)
			err := RunCase(context.Background(), d, c)
			if errors.Is(err, ErrSkip) {
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
	d := NewFake(t, nil)
	n := 0
	failed := Run(context.Background(), d, func(c Case, err error) {
		n++
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	})
	if failed != 0 || n != len(Cases()) {
		t.Errorf("%d failed of %d run, %d cases", failed, n, len(Cases()))
	}
}
