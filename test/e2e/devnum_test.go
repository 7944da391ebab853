//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
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

// Many real devices: twelve more Soft-RoCE devices on six veth pairs, 14
// in all, are served through umad on one major, and two of the new ones
// connect (a QP each side, RC data) through ucmd.
func TestDaemonManyRxeDevices(t *testing.T) {
	const pairs = 6
	names := []string{"rxe0", "rxe1"}
	for i := range pairs {
		// Added before the daemon starts, so removed after it stops.
		names = append(names, vethRXE(t, fmt.Sprintf("vma%d", i), fmt.Sprintf("vmb%d", i), true)...)
	}
	// ucmN in the order the devices registered, as ib_ucm numbered them:
	// the order they were made in, not their names' (rvma0 after rxe1).
	d := startDaemon(t, "--wait-devices", "20s")
	s := d.waitDevices(t, names...)
	shared := uint32(0)
	node := map[string]int{}
	for i, dev := range s.Devices {
		node[dev.Name] = i
		var st unix.Stat_t
		if err := unix.Stat(dev.Node, &st); err != nil {
			t.Fatalf("%s: %v", dev.Node, err)
		}
		if shared == 0 {
			shared = unix.Major(st.Rdev)
		}
		if maj, min := unix.Major(st.Rdev), unix.Minor(st.Rdev); maj != shared || min != uint32(i) {
			t.Errorf("%s (%s) is %d:%d, want %d:%d", dev.Node, dev.Name, maj, min, shared, i)
		}
	}
	gid := waitGID0(t, "rvmb0")
	clientPairOn(t, d, node["rvmb0"], "0x1005", []string{"-d", "rvmb0", "-n", "1"}, []string{"-d", "rvma0", "-g", gid, "-n", "1"})
	d.wantNoFiles(t)
}

// vethRXE adds a veth pair a–b, up, with a Soft-RoCE device "r"+a on a
// (and "r"+b on b if both), and returns the devices' names; t.Cleanup
// removes them all.
func vethRXE(t *testing.T, a, b string, both bool) []string {
	t.Helper()
	ipLink(t, "add", a, "type", "veth", "peer", "name", b)
	ends := []string{a}
	if both {
		ends = append(ends, b)
	}
	t.Cleanup(func() {
		for _, n := range ends {
			exec.Command("rdma", "link", "delete", "r"+n).Run()
		}
		exec.Command("ip", "link", "delete", a).Run()
	})
	ipLink(t, "set", a, "up")
	ipLink(t, "set", b, "up")
	var names []string
	for _, n := range ends {
		rdmaLink(t, "add", "r"+n, "type", "rxe", "netdev", n)
		names = append(names, "r"+n)
	}
	return names
}

func ipLink(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"link"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip link %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// waitGID0 waits for a Soft-RoCE device's GID 0, which it takes from its
// netdev's MAC once the port is up.
func waitGID0(t *testing.T, dev string) string {
	t.Helper()
	path := "/sys/class/infiniband/" + dev + "/ports/1/gids/0"
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if g := strings.TrimSpace(string(b)); err == nil && strings.HasPrefix(g, "fe80:") {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q, %v", path, b, err)
		}
	}
}

// A minor of the shared major that another CUSE device holds: the kernel
// refuses it to the node that would take it, which then takes a major of
// its own and is served.
func TestDaemonSharedMajorMinorTaken(t *testing.T) {
	d := startDaemon(t, "--rescan", "200ms")
	s := d.waitDevices(t, "rxe0", "rxe1")
	var st unix.Stat_t
	if err := unix.Stat(s.Devices[0].Node, &st); err != nil {
		t.Fatal(err)
	}
	shared := unix.Major(st.Rdev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	other, err := cuse.Open(ctx, cuse.Config{DevName: "infiniband/ucmtaken", Major: shared, Minor: 2}, noOpens{})
	if err != nil {
		t.Fatalf("another CUSE device at %d:2: %v", shared, err)
	}
	go other.Serve()
	defer other.Close()

	// A third device, ucm2 by the lowest free number.
	vethRXE(t, "vmt0", "vmt1", false)
	s = d.waitDevices(t, "rxe0", "rxe1", "rvmt0")
	if err := unix.Stat(s.Devices[2].Node, &st); err != nil {
		t.Fatal(err)
	}
	if maj := unix.Major(st.Rdev); maj == shared || maj == 0 {
		t.Errorf("%s is %d:%d, want a major of its own (%d:2 is taken)", s.Devices[2].Node, maj, unix.Minor(st.Rdev), shared)
	}
	if !strings.Contains(d.log.String(), "device number refused; asking for a dynamic one") {
		t.Errorf("the refused number is not logged:\n%s", d.log.String())
	}
}

// noOpens is a CUSE device that refuses every open.
type noOpens struct{}

func (noOpens) Open(context.Context, cuse.Request, cuse.Waker) (cuse.Handle, error) {
	return nil, unix.ENXIO
}
