package daemon

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad"
)

// fakeSysfs writes the files umad.Discover reads (under class/) for one
// device with one InfiniBand port (LID 0x5) and returns the root.
func fakeSysfs(t *testing.T, dev, gid0 string) string {
	t.Helper()
	root := t.TempDir()
	port := filepath.Join("class", "infiniband", dev, "ports", "1")
	for name, v := range map[string]string{
		filepath.Join("class", "infiniband", dev, "node_guid"): "0002:c903:0000:0001",
		filepath.Join(port, "link_layer"):                      "InfiniBand",
		filepath.Join(port, "state"):                           "4: ACTIVE",
		filepath.Join(port, "lid"):                             "0x5",
		filepath.Join(port, "sm_lid"):                          "0x1",
		filepath.Join(port, "lid_mask_count"):                  "0",
		filepath.Join(port, "gids", "0"):                       gid0,
		filepath.Join(port, "pkeys", "0"):                      "0xffff",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFirstPort(t *testing.T) {
	root := fakeSysfs(t, "mlx4_0", "fe80:0000:0000:0000:0002:c903:0000:0001")
	got, err := firstPort(umad.Options{SysfsRoot: root}, "mlx4_0")
	if err != nil {
		t.Fatal(err)
	}
	want := PortAddress{GID: [16]byte{0xfe, 0x80, 8: 0x00, 9: 0x02, 10: 0xc9, 11: 0x03, 15: 0x01}, LID: 5}
	if got != want {
		t.Errorf("FirstPort = %+v, want %+v", got, want)
	}
	if _, err := firstPort(umad.Options{SysfsRoot: root}, "mlx4_1"); err == nil || !strings.Contains(err.Error(), `"mlx4_1"`) {
		t.Errorf("unknown device: %v", err)
	}
	empty := fakeSysfs(t, "mlx4_0", "0000:0000:0000:0000:0000:0000:0000:0000")
	if _, err := firstPort(umad.Options{SysfsRoot: empty}, "mlx4_0"); err == nil || !strings.Contains(err.Error(), "no GID at index 0") {
		t.Errorf("no GID 0: %v", err)
	}
}

// countingPort counts its Attr calls, and how many run at once; each
// waits until together ran at once, or until deadline (a failure's bound).
type countingPort struct {
	hw.Port
	calls, now, most *atomic.Int32
	together         int32
	deadline         time.Time
}

func (p countingPort) Attr() (hw.PortAttr, error) {
	p.calls.Add(1)
	n := p.now.Add(1)
	for {
		m := p.most.Load()
		if n <= m || p.most.CompareAndSwap(m, n) {
			break
		}
	}
	for p.most.Load() < p.together && time.Now().Before(p.deadline) {
		time.Sleep(time.Millisecond)
	}
	p.now.Add(-1)
	return hw.PortAttr{}, nil
}

type portsDevice struct {
	hw.Device
	ports []hw.Port
}

func (d portsDevice) Ports() []hw.Port { return d.ports }

// warmPorts reads every port of every device once, several at a time but
// no more than GOMAXPROCS.
func TestWarmPorts(t *testing.T) {
	var calls, now, most atomic.Int32
	procs := int32(runtime.GOMAXPROCS(0))
	together := min(2, procs)
	deadline := time.Now().Add(10 * time.Second)
	var devs []hw.Device
	for range 10 {
		d := portsDevice{}
		for range 2 {
			d.ports = append(d.ports, countingPort{calls: &calls, now: &now, most: &most, together: together, deadline: deadline})
		}
		devs = append(devs, d)
	}
	warmPorts(devs)
	if calls.Load() != 20 {
		t.Errorf("%d port reads, want 20", calls.Load())
	}
	if m := most.Load(); m > procs || m < together {
		t.Errorf("%d reads at once with GOMAXPROCS %d, want %d to %d", m, procs, together, procs)
	}
}
