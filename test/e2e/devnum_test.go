//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Many nodes share one dynamic major, as the kernel's ucm did: CUSE gives
// a device that asks for a dynamic number a major of its own, and this
// guest refused the 140th such device (docs/cuse.md §2.1). 150 nodes, one
// major; with --fixed-numbers, ucm0 to ucm31 at 231:224+N and the rest on
// one major at minor N-32. The last node serves a client.
func TestDaemonManyNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		fixed bool
	}{
		{"dynamic", 150, false},
		{"fixed-numbers", 40, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--fabric", "sim", "--sim-devices", fmt.Sprint(tc.n)}
			if tc.fixed {
				args = append(args, "--fixed-numbers")
			}
			d := startDaemon(t, args...)
			shared := uint32(0)
			for i := range tc.n {
				node := fmt.Sprintf("/dev/infiniband/ucm%d", i)
				var st unix.Stat_t
				if err := unix.Stat(node, &st); err != nil {
					t.Fatalf("%s: %v", node, err)
				}
				maj, min := unix.Major(st.Rdev), unix.Minor(st.Rdev)
				if tc.fixed && i < 32 {
					if maj != 231 || min != uint32(224+i) {
						t.Errorf("%s is %d:%d, want 231:%d", node, maj, min, 224+i)
					}
					continue
				}
				if shared == 0 {
					shared = maj
				}
				want := uint32(i)
				if tc.fixed {
					want -= 32
				}
				if maj != shared || maj == 231 || min != want {
					t.Errorf("%s is %d:%d, want %d:%d (the major of the first node on a dynamic one)", node, maj, min, shared, want)
				}
			}
			// /proc/devices lists each region: every node's is the one major.
			b, err := os.ReadFile("/proc/devices")
			if err != nil {
				t.Fatal(err)
			}
			majors := map[string]int{}
			for line := range strings.Lines(string(b)) {
				if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[1], "infiniband/ucm") {
					majors[f[0]]++
				}
			}
			wantMajors := 1
			if tc.fixed {
				wantMajors = 2
			}
			if len(majors) != wantMajors {
				t.Errorf("/proc/devices: the nodes' regions by major %v, want %d majors", majors, wantMajors)
			}
			last := fmt.Sprintf("/dev/infiniband/ucm%d", tc.n-1)
			out, err := d.ucmd("conformance", "--run", "^(write|create_id|connect)/", last)
			if err != nil || !strings.Contains(out, " 0 failed") || strings.Contains(out, " 0 passed") {
				t.Errorf("ucmd conformance %s: %v\n%s", last, err, out)
			}
		})
	}
}
