package conformance

import (
	"context"
	"strings"
	"testing"
)

// A case whose code panics on what a device answered (a slice of data a
// device did not mark present) fails, and does not end the run.
func TestRunCaseRecoversAPanic(t *testing.T) {
	c := Case{Name: "x/panics", run: func(*env) error {
		var data []byte
		_ = data[:4][3]
		return nil
	}}
	if err := RunCase(context.Background(), nil, c); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("a panicking case: %v, want a failure naming the panic", err)
	}
}
