package main

import (
	"path/filepath"
	"runtime/debug"
	"testing"
)

// TestBuiltWithProfile guards the profile-guided build: go build and go
// test pick up default.pgo only next to the main package, and without it
// the request path costs 8–20% more daemon CPU per command in the test VM
// (docs/perf.md, "Built with a profile"). The test binary is built the way
// the daemon is, so it shows whether the profile is still found.
func TestBuiltWithProfile(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	for _, s := range bi.Settings {
		if s.Key == "-pgo" {
			if filepath.Base(s.Value) != "default.pgo" {
				t.Fatalf("built with -pgo=%s, want cmd/ucmd/default.pgo", s.Value)
			}
			return
		}
	}
	t.Fatal("built without a profile: cmd/ucmd/default.pgo is missing, or GOFLAGS has -pgo=off (make pgo writes it)")
}
