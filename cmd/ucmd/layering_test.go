package main

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayering (issue 16.5): the CLI talks to the daemon's packages, never
// to the hardware layer, and the layers from ucm down import nothing of
// internal/ (their clock is hw/clock).
func TestLayering(t *testing.T) {
	const mod = "github.com/ucmd/ucmd/"
	rules := []struct {
		dirs      []string
		forbidden string
	}{
		{[]string{"cmd/ucmd"}, mod + "hw"},
		{[]string{"ucm", "cmcore", "cmcore/wire", "hw", "hw/clock", "hw/sim", "hw/umad", "hw/umad/uapi"}, mod + "internal/"},
	}
	for _, r := range rules {
		for _, dir := range r.dirs {
			p, err := build.ImportDir(filepath.Join("../..", dir), 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, r.forbidden) {
					t.Errorf("%s imports %s", p.ImportPath, imp)
				}
			}
		}
	}
}
