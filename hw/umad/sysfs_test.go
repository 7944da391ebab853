package umad

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/hw"
)

// tree writes files (path → content) under a temp dir and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const zeroGID = "0000:0000:0000:0000:0000:0000:0000:0000\n"

// fakeSysfs is a RoCE rxe0 like the test VM's and a two-port IB mlx5_0,
// in the formats the kernel's sysfs prints.
func fakeSysfs() map[string]string {
	rxe := "class/infiniband/rxe0/"
	mlx := "class/infiniband/mlx5_0/"
	return map[string]string{
		rxe + "node_guid":                      "5054:00ff:fe77:0001\n",
		rxe + "ports/1/state":                  "4: ACTIVE\n",
		rxe + "ports/1/lid":                    "0x0\n",
		rxe + "ports/1/lid_mask_count":         "0\n",
		rxe + "ports/1/sm_lid":                 "0x0\n",
		rxe + "ports/1/link_layer":             "Ethernet\n",
		rxe + "ports/1/gids/0":                 "fe80:0000:0000:0000:5054:00ff:fe77:0001\n",
		rxe + "ports/1/gids/1":                 "0000:0000:0000:0000:0000:ffff:0a00:0001\n",
		rxe + "ports/1/gids/2":                 zeroGID,
		rxe + "ports/1/gids/3":                 "0000:0000:0000:0000:0000:ffff:0a00:0009\n",
		rxe + "ports/1/gid_attrs/types/0":      "RoCE v2\n",
		rxe + "ports/1/gid_attrs/types/1":      "RoCE v2\n",
		rxe + "ports/1/gid_attrs/types/3":      "IB/RoCE v1\n",
		rxe + "ports/1/pkeys/0":                "0xffff\n",
		mlx + "node_guid":                      "0002:c903:0010:1234\n",
		mlx + "ports/1/state":                  "4: ACTIVE\n",
		mlx + "ports/1/lid":                    "0x12\n",
		mlx + "ports/1/lid_mask_count":         "1\n",
		mlx + "ports/1/sm_lid":                 "0x1\n",
		mlx + "ports/1/link_layer":             "InfiniBand\n",
		mlx + "ports/1/gids/0":                 "fe80:0000:0000:0000:0002:c903:0010:1235\n",
		mlx + "ports/1/gids/1":                 zeroGID,
		mlx + "ports/1/gid_attrs/types/0":      "IB/RoCE v1\n",
		mlx + "ports/1/pkeys/0":                "0xffff\n",
		mlx + "ports/1/pkeys/1":                "0x8001\n",
		mlx + "ports/1/pkeys/2":                "0x0000\n",
		mlx + "ports/2/state":                  "1: DOWN\n",
		mlx + "ports/2/lid":                    "0x0\n",
		mlx + "ports/2/lid_mask_count":         "0\n",
		mlx + "ports/2/sm_lid":                 "0x0\n",
		mlx + "ports/2/link_layer":             "InfiniBand\n",
		mlx + "ports/2/gids/0":                 "fe80:0000:0000:0000:0002:c903:0010:1236\n",
		mlx + "ports/2/pkeys/0":                "0xffff\n",
		"class/infiniband_mad/abi_version":     "5\n",
		"class/infiniband_mad/umad0/ibdev":     "mlx5_0\n", // registered first
		"class/infiniband_mad/umad0/port":      "1\n",
		"class/infiniband_mad/umad1/ibdev":     "rxe0\n",
		"class/infiniband_mad/umad1/port":      "1\n",
		"class/infiniband_mad/issm0/ibdev":     "rxe0\n", // not a umad device
		"class/infiniband_mad/umad1/unrelated": "x\n",
	}
}

func gid(t *testing.T, s string) hw.GID {
	g, err := parseGID(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDiscover(t *testing.T) {
	root := tree(t, fakeSysfs())
	devs, err := Discover(Options{SysfsRoot: root, DevDir: "/dev/x", LocalCAAckDelay: map[string]uint8{"rxe0": 15}})
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Name() != "mlx5_0" || devs[1].Name() != "rxe0" {
		t.Fatalf("devices %v, want mlx5_0 and rxe0", devs)
	}
	mlx, rxe := devs[0], devs[1]
	if mlx.NodeGUID() != 0x0002c90300101234 || rxe.NodeGUID() != 0x505400fffe770001 {
		t.Errorf("node GUIDs %#x %#x", mlx.NodeGUID(), rxe.NodeGUID())
	}
	if mlx.LocalCAAckDelay() != DefaultLocalCAAckDelay || rxe.LocalCAAckDelay() != 15 {
		t.Errorf("ack delays %d %d, want default and override", mlx.LocalCAAckDelay(), rxe.LocalCAAckDelay())
	}
	if len(mlx.Ports()) != 2 || mlx.ports[0].UMADPath() != "/dev/x/umad0" || mlx.ports[1].UMADPath() != "" {
		t.Errorf("mlx5_0 ports %d, umad %q %q", len(mlx.Ports()), mlx.ports[0].UMADPath(), mlx.ports[1].UMADPath())
	}

	a, err := rxe.ports[0].Attr()
	if err != nil {
		t.Fatal(err)
	}
	want := []hw.GIDEntry{
		{Index: 0, GID: gid(t, "fe80:0000:0000:0000:5054:00ff:fe77:0001"), Type: hw.GIDTypeRoCEv2},
		{Index: 1, GID: gid(t, "0000:0000:0000:0000:0000:ffff:0a00:0001"), Type: hw.GIDTypeRoCEv2},
		{Index: 3, GID: gid(t, "0000:0000:0000:0000:0000:ffff:0a00:0009"), Type: hw.GIDTypeRoCEv1},
	}
	if a.LinkLayer != hw.LinkEthernet || a.State != hw.PortActive || a.LID != 0 || a.SubnetPrefix != 0xfe80000000000000 {
		t.Errorf("rxe0 port 1: %+v", a)
	}
	if len(a.GIDs) != len(want) {
		t.Fatalf("rxe0 GIDs %v, want %v", a.GIDs, want)
	}
	for i := range want {
		if a.GIDs[i] != want[i] {
			t.Errorf("rxe0 GID %d: %+v, want %+v", i, a.GIDs[i], want[i])
		}
	}
	if a.GIDs[1].GID.String() != "::ffff:10.0.0.1" {
		t.Errorf("GID 1 reads as %v", a.GIDs[1].GID)
	}

	b, err := mlx.ports[0].Attr()
	if err != nil {
		t.Fatal(err)
	}
	if b.LinkLayer != hw.LinkInfiniBand || b.LID != 0x12 || b.LMC != 1 || b.SMLID != 1 ||
		len(b.GIDs) != 1 || b.GIDs[0].Type != hw.GIDTypeIB || len(b.PKeys) != 3 || b.PKeys[1] != 0x8001 {
		t.Errorf("mlx5_0 port 1: %+v", b)
	}
	if c, _ := mlx.ports[1].Attr(); c.State != hw.PortDown {
		t.Errorf("mlx5_0 port 2 state %v", c.State)
	}
}

func TestAttrIsFresh(t *testing.T) {
	root := tree(t, fakeSysfs())
	devs, err := Discover(Options{SysfsRoot: root, AttrMaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	p := devs[1].ports[0]
	// An IP address goes away: its GID slot empties.
	os.WriteFile(filepath.Join(root, "class/infiniband/rxe0/ports/1/gids/1"), []byte(zeroGID), 0o644)
	a, err := p.Attr()
	if err != nil || len(a.GIDs) != 2 {
		t.Fatalf("GIDs after removal %v (%v), want 2 entries", a.GIDs, err)
	}
}

func TestAttrCached(t *testing.T) {
	root := tree(t, fakeSysfs())
	devs, err := Discover(Options{SysfsRoot: root, AttrMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := devs[1].ports[0]
	a, _ := p.Attr()
	a.GIDs[0].GID[0] = 0 // the caller's copy
	os.WriteFile(filepath.Join(root, "class/infiniband/rxe0/ports/1/gids/1"), []byte(zeroGID), 0o644)
	b, err := p.Attr()
	if err != nil || len(b.GIDs) != 3 || b.GIDs[0].GID[0] != 0xfe {
		t.Fatalf("cached GIDs %v (%v), want the first snapshot, unmodified", b.GIDs, err)
	}
	p.mu.Lock()
	p.attrTime = p.attrTime.Add(-90 * time.Minute) // expire it
	p.mu.Unlock()
	// An expired snapshot is still served at once, and refreshed behind.
	if c, _ := p.Attr(); len(c.GIDs) != 3 {
		t.Fatalf("GIDs on expiry %v, want the old 3 entries", c.GIDs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, _ := p.Attr()
		if len(c.GIDs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GIDs %v: the background refresh never landed", c.GIDs)
		}
		time.Sleep(time.Millisecond)
	}
}

// A snapshot twice as old as AttrMaxAge (the port idle meanwhile) is read
// again before it is served: an SM that moved a partition's P_Key while
// the port was idle gave the first connection after the old index.
func TestAttrReadAgainAfterIdle(t *testing.T) {
	root := tree(t, fakeSysfs())
	devs, err := Discover(Options{SysfsRoot: root, AttrMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := devs[0].ports[0] // mlx5_0 port 1, InfiniBand
	if a, _ := p.Attr(); len(a.PKeys) < 2 || a.PKeys[1] != 0x8001 {
		t.Fatalf("P_Keys %#04x, want 0x8001 at index 1", a.PKeys)
	}
	dir := filepath.Join(root, "class/infiniband/mlx5_0/ports/1/pkeys")
	os.WriteFile(filepath.Join(dir, "1"), []byte("0x8002\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "2"), []byte("0x8001\n"), 0o644)
	p.mu.Lock()
	p.attrTime = p.attrTime.Add(-3 * time.Hour) // idle for three times AttrMaxAge
	p.mu.Unlock()
	a, err := p.Attr()
	if i, ok := a.PKeyIndex(0x8001); err != nil || !ok || i != 2 {
		t.Errorf("first lookup after the idle time: 0x8001 at index %d (%v, %v), want 2 as sysfs has it now; P_Keys %#04x", i, ok, err, a.PKeys)
	}
}

// AttrFresh serves a snapshot whose tables were read whole within its
// bound as it is, and reads them again first otherwise.
func TestAttrFresh(t *testing.T) {
	root, p := readRXE0(t, fakeSysfs())
	os.WriteFile(filepath.Join(root, "class/infiniband/rxe0/ports/1/gids/2"), []byte("0000:0000:0000:0000:0000:ffff:0a00:0002\n"), 0o644)
	if a, _ := p.AttrFresh(time.Minute); len(a.GIDs) != 3 {
		t.Errorf("AttrFresh(1m) of a snapshot just read: %d GIDs, want the snapshot's 3", len(a.GIDs))
	}
	p.mu.Lock()
	p.wholeTime = p.wholeTime.Add(-2 * time.Minute)
	p.mu.Unlock()
	if a, _ := p.AttrFresh(time.Minute); len(a.GIDs) != 4 {
		t.Errorf("AttrFresh(1m) of a snapshot 2m old: %d GIDs, want the 4 sysfs has now", len(a.GIDs))
	}
}

// A background refresh that read sysfs before a Refresh, and ends after
// it, must not put its older tables back.
func TestRefreshNotOverwrittenByOlderRead(t *testing.T) {
	root := tree(t, fakeSysfs())
	devs, err := Discover(Options{SysfsRoot: root, AttrMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := devs[1].ports[0]
	if a, _ := p.Attr(); len(a.GIDs) != 3 {
		t.Fatalf("GIDs %v, want 3", a.GIDs)
	}
	read, release := make(chan struct{}), make(chan struct{})
	afterAttrRead = func(background bool) {
		if background {
			close(read)
			<-release
		}
	}
	t.Cleanup(func() { afterAttrRead = nil })
	p.mu.Lock()
	p.attrTime = p.attrTime.Add(-90 * time.Minute) // expired, not idle: refreshed behind
	p.mu.Unlock()
	p.Attr() // starts the background refresh
	<-read   // it has read the 3 GIDs
	p.mu.Lock()
	done := p.refreshed
	p.mu.Unlock()
	os.WriteFile(filepath.Join(root, "class/infiniband/rxe0/ports/1/gids/1"), []byte(zeroGID), 0o644)
	if a, err := p.Refresh(); err != nil || len(a.GIDs) != 2 {
		t.Fatalf("Refresh: GIDs %v (%v), want 2", a.GIDs, err)
	}
	close(release)
	<-done
	if a, _ := p.Attr(); len(a.GIDs) != 2 {
		t.Fatalf("GIDs after the older background read ended: %v, want Refresh's 2", a.GIDs)
	}
}

// ucmN follows the order the devices registered in, as ib_ucm's numbers
// did: the order of their umad numbers (ib_umad numbers a device's ports
// as it registers), then their names with numbers compared as numbers;
// devices without umad files last.
func TestDiscoverOrder(t *testing.T) {
	files := map[string]string{"class/infiniband_mad/abi_version": "5\n"}
	dev := func(name string, umad int) {
		d := "class/infiniband/" + name + "/"
		files[d+"node_guid"] = "0002:c903:0010:0001\n"
		files[d+"ports/1/state"] = "4: ACTIVE\n"
		if umad >= 0 {
			u := fmt.Sprintf("class/infiniband_mad/umad%d/", umad)
			files[u+"ibdev"], files[u+"port"] = name+"\n", "1\n"
		}
	}
	for i := range 12 {
		dev(fmt.Sprintf("mlx5_%d", i), i+1)
	}
	dev("rxe0", 0)    // registered before the HCAs
	dev("iwp3s0", -1) // no umad: iWARP
	dev("siw1", -1)
	devs, err := Discover(Options{SysfsRoot: tree(t, files)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range devs {
		got = append(got, d.Name())
	}
	want := []string{"rxe0", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6",
		"mlx5_7", "mlx5_8", "mlx5_9", "mlx5_10", "mlx5_11", "iwp3s0", "siw1"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v\nwant      %v", got, want)
	}
}

func TestCompareNames(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"mlx5_2", "mlx5_10", -1}, {"mlx5_10", "mlx5_2", 1}, {"mlx5_0", "mlx5_0", 0},
		{"mlx4_9", "mlx5_0", -1}, {"rxe0", "rxe00", -1}, {"rxe007", "rxe8", -1}, {"rxe08", "rxe8", -1},
		{"a", "ab", -1}, {"ib1", "ibp1", -1}, {"", "a", -1},
	} {
		if got := compareNames(c.a, c.b); got != c.want {
			t.Errorf("compareNames(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestDiscoverNoRDMA(t *testing.T) {
	devs, err := Discover(Options{SysfsRoot: t.TempDir()})
	if err != nil || devs != nil {
		t.Fatalf("empty sysfs: %v, %v", devs, err)
	}
}

func TestDiscoverErrors(t *testing.T) {
	for name, c := range map[string]struct {
		path, content, want string
	}{
		"node GUID": {"class/infiniband/rxe0/node_guid", "5054:00ff\n", "rxe0 node GUID"},
		"ABI":       {"class/infiniband_mad/abi_version", "6\n", "ABI version 6"},
	} {
		files := fakeSysfs()
		files[c.path] = c.content
		_, err := Discover(Options{SysfsRoot: tree(t, files)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error mentioning %q", name, err, c.want)
		}
	}
	for name, c := range map[string]struct {
		path, content, want string
	}{
		"state":      {"state", "ACTIVE\n", "rxe0 port 1 state"},
		"link layer": {"link_layer", "Token Ring\n", "link layer"},
		"GID":        {"gids/0", "fe80::1\n", "gids/0"},
		"GID type":   {"gid_attrs/types/0", "RoCE v3\n", "gid_attrs/types/0"},
		"P_Key":      {"pkeys/0", "ffffff\n", "pkeys/0"},
		"LMC":        {"lid_mask_count", "9\n", "lid_mask_count"},
	} {
		files := fakeSysfs()
		files["class/infiniband/rxe0/ports/1/"+c.path] = c.content
		devs, err := Discover(Options{SysfsRoot: tree(t, files)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = devs[1].ports[0].Attr()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error mentioning %q", name, err, c.want)
		}
	}
}

func TestUnloadAdvice(t *testing.T) {
	root := tree(t, map[string]string{
		"module/ib_cm/holders/rdma_cm":     "",
		"module/ib_cm/holders/ib_ipoib":    "",
		"module/rdma_cm/holders/rdma_ucm":  "",
		"module/rdma_cm/holders/ib_isert":  "",
		"module/ib_isert/holders/":         "",
		"module/rdma_ucm/holders/":         "",
		"module/ib_ipoib/holders/":         "",
		"module/ib_core/holders/ib_cm":     "",
		"class/infiniband_mad/abi_version": "5",
	})
	p := &Port{dev: &Device{name: "rxe0"}, num: 1, umad: "umad0", sys: sysfs{root: root}, opts: Options{DevDir: "/dev/infiniband"}}
	cm := hw.Registration{MgmtClass: 0x07, ClassVersion: 2, Methods: []uint8{3}}
	err := p.registerError(cm, p.UMADPath(), errnoEINVAL)
	if !errors.Is(err, hw.ErrCMClassInUse) || !errors.Is(err, errnoEINVAL) {
		t.Fatalf("%v: want ErrCMClassInUse wrapping EINVAL", err)
	}
	for _, want := range []string{
		"modprobe -r ib_ipoib ib_isert rdma_ucm rdma_cm ib_cm (", // the command alone, as the guest's test copies it
		"rxe0 port 1", "/dev/infiniband/umad0", "class 0x7", "methods [0x3]",
		"An initramfs that loads the RDMA stack",
		"takes down what ib_ipoib, ib_isert serve",
		"systemctl enable ucmd and reboot",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// Without ib_cm as a module, the advice still names the usual suspects.
	p.sys.root = t.TempDir()
	if err := p.registerError(cm, "x", errnoEINVAL); !strings.Contains(err.Error(), "modprobe -r rdma_ucm rdma_cm ib_cm") {
		t.Errorf("without module info: %v", err)
	}
	// Other classes and other errors are passed through.
	if err := p.registerError(hw.Registration{MgmtClass: 0x04}, "x", errnoEINVAL); errors.Is(err, hw.ErrCMClassInUse) {
		t.Errorf("class 4: %v", err)
	}
	if err := p.registerError(cm, "x", errnoEPERM); errors.Is(err, hw.ErrCMClassInUse) || !errors.Is(err, errnoEPERM) {
		t.Errorf("EPERM: %v", err)
	}
}

func TestOpenMADWithoutUMAD(t *testing.T) {
	devs, err := Discover(Options{SysfsRoot: tree(t, fakeSysfs())})
	if err != nil {
		t.Fatal(err)
	}
	_, err = devs[0].ports[1].OpenMAD(hw.Registration{MgmtClass: 0x07, ClassVersion: 2, Methods: []uint8{3}})
	if err == nil || !strings.Contains(err.Error(), "is ib_umad loaded") {
		t.Errorf("OpenMAD on a port without umad: %v", err)
	}
	for _, reg := range []hw.Registration{{MgmtClass: 0}, {MgmtClass: 0x07, ClassVersion: 8}} {
		if _, err := devs[1].ports[0].OpenMAD(reg); !errors.Is(err, errnoEINVAL) || errors.Is(err, hw.ErrCMClassInUse) {
			t.Errorf("OpenMAD(%+v): %v, want plain EINVAL", reg, err)
		}
	}
}

// BenchmarkAttr reads an rxe-sized port (1024 GID slots, two in use) from a
// fake sysfs: uncached, and as callers see it with the cache.
func BenchmarkAttr(b *testing.B) {
	files := fakeSysfs()
	for i := 4; i < 1024; i++ {
		files["class/infiniband/rxe0/ports/1/gids/"+strconv.Itoa(i)] = zeroGID
	}
	root := b.TempDir()
	for p, c := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
	}
	for _, c := range []struct {
		name   string
		maxAge time.Duration
	}{{"uncached", -1}, {"cached", 0}} {
		b.Run(c.name, func(b *testing.B) {
			devs, err := Discover(Options{SysfsRoot: root, AttrMaxAge: c.maxAge})
			if err != nil {
				b.Fatal(err)
			}
			p := devs[1].ports[0]
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Attr(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRefreshReadsPastTheHighestSlot: a background refresh (portAttr with
// the previous snapshot) reads GID slots only up to gidLookahead past the
// highest used one instead of all 1024 of a RoCE table, and still sees
// every GID the kernel adds meanwhile: in the holes, one after another
// past the highest, and past a slot that reads as empty but is not free
// yet; a full read sees everything.
func TestRefreshReadsPastTheHighestSlot(t *testing.T) {
	files := fakeSysfs()
	for i := 4; i < 1024; i++ {
		files["class/infiniband/rxe0/ports/1/gids/"+strconv.Itoa(i)] = zeroGID
	}
	root := tree(t, files)
	s := sysfs{root: root}
	prev, err := s.portAttr("rxe0", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	gids := func(a hw.PortAttr) []int {
		var idx []int
		for _, g := range a.GIDs {
			idx = append(idx, g.Index)
		}
		return idx
	}
	if got := gids(prev); len(got) != 3 || got[2] != 3 {
		t.Fatalf("first read: GID slots %v, want 0 1 3", got)
	}
	write := func(slot int, gid string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, "class/infiniband/rxe0/ports/1/gids", strconv.Itoa(slot)), []byte(gid), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(2, "0000:0000:0000:0000:0000:ffff:0a00:0002\n") // the hole, the kernel's next slot
	// Three more past the highest, one after another (an address has a
	// RoCE v1 and a v2 GID on a port with both), then one past slot 7,
	// which reads as empty while its deleted GID is still in use.
	for slot := 4; slot <= 6; slot++ {
		write(slot, fmt.Sprintf("0000:0000:0000:0000:0000:ffff:0a00:%04x\n", slot))
	}
	write(8, "0000:0000:0000:0000:0000:ffff:0a00:0008\n")
	write(900, "0000:0000:0000:0000:0000:ffff:0a00:0384\n")
	os.WriteFile(filepath.Join(root, "class/infiniband/rxe0/ports/1/pkeys/0"), []byte("0x7fff\n"), 0o644)
	a, err := s.portAttr("rxe0", 1, &prev)
	if err != nil {
		t.Fatal(err)
	}
	if got := gids(a); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 8}) {
		t.Errorf("refresh: GID slots %v, want 0-6 and 8 (slot 900 is past where the kernel adds)", got)
	}
	if len(a.PKeys) != 1 || a.PKeys[0] != 0xffff {
		t.Errorf("refresh of a RoCE port: P_Keys %#x, want the previous table", a.PKeys)
	}
	full, err := s.portAttr("rxe0", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := gids(full); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 8, 900}) {
		t.Errorf("full read: GID slots %v, want 0-6, 8 and 900", got)
	}
	// A refresh of a table that was empty (the link was down) starts at 0.
	empty := full
	empty.GIDs = nil
	if a, err = s.portAttr("rxe0", 1, &empty); err != nil {
		t.Fatal(err)
	}
	if got := gids(a); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 8}) {
		t.Errorf("refresh after an empty table: GID slots %v, want 0-6 and 8", got)
	}
	if full.PKeys[0] != 0x7fff {
		t.Errorf("full read: P_Key %#x, want 0x7fff", full.PKeys[0])
	}
}

// AttrFresh, asked because a GID was not found, reads a RoCE table whole:
// a GID added behind slots that deleted GIDs still hold (eight of them: a
// netdev's four addresses on a port with both RoCE types, removed while
// connections use them) lies past what a background refresh reads.
func TestAttrFreshReadsWhole(t *testing.T) {
	p, gid := behindHeldSlots(t)
	a, err := p.AttrFresh(time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	if i, ok := a.GIDIndex(gid, 0); !ok || i != 12 {
		t.Errorf("AttrFresh: %v at index %d (%v), want 12; GIDs %v", gid, i, ok, a.GIDs)
	}
}

// readRXE0 makes a fake sysfs of files and returns its root and rxe0's
// port, its snapshot read (three GIDs).
func readRXE0(t *testing.T, files map[string]string) (string, *Port) {
	t.Helper()
	root := tree(t, files)
	devs, err := Discover(Options{SysfsRoot: root, AttrMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := devs[1].ports[0] // rxe0
	if a, _ := p.Attr(); len(a.GIDs) != 3 {
		t.Fatalf("GIDs %v, want 3", a.GIDs)
	}
	return root, p
}

// behindHeldSlots is rxe0 of a fake sysfs, its snapshot read, then an
// address added at GID slot 12, behind eight empty slots (4 to 11) that
// deleted GIDs hold; it returns the port and that GID.
func behindHeldSlots(t *testing.T) (*Port, hw.GID) {
	t.Helper()
	files := fakeSysfs()
	for i := 4; i < 1024; i++ {
		files["class/infiniband/rxe0/ports/1/gids/"+strconv.Itoa(i)] = zeroGID
	}
	root, p := readRXE0(t, files)
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/rxe0/ports/1/gids/12"), []byte("0000:0000:0000:0000:0000:ffff:0a00:000c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, hw.GID{10: 0xff, 11: 0xff, 12: 10, 15: 12}
}

// A partial background refresh that stores after AttrFresh's whole read
// replaces the port's snapshot, but not what AttrFresh serves until its
// bound: the whole read's tables.
func TestAttrFreshKeepsItsWholeRead(t *testing.T) {
	p, gid := behindHeldSlots(t)
	p.mu.Lock()
	p.wholeTime = p.wholeTime.Add(-2 * time.Minute) // past AttrFresh's bound
	p.mu.Unlock()
	raced := false
	afterAttrRead = func(background bool) {
		if background || raced {
			return
		}
		raced = true
		// The whole read is done; a partial refresh starts and stores
		// before it.
		p.mu.Lock()
		done := p.refreshLocked()
		p.mu.Unlock()
		<-done
	}
	t.Cleanup(func() { afterAttrRead = nil })
	for i := range 2 {
		a, err := p.AttrFresh(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := a.GIDIndex(gid, 0); !ok {
			t.Errorf("AttrFresh %d: %v missing (GIDs %v)", i+1, gid, a.GIDs)
		}
	}
	if !raced {
		t.Fatal("the whole read never ran")
	}
}

// A caller that joins AttrFresh's whole read takes that read's result: its
// error when it failed, not a snapshot older than its bound.
func TestAttrFreshJoinerTakesTheReadsError(t *testing.T) {
	_, p := readRXE0(t, fakeSysfs())
	failed := errors.New("read gids: no such device")
	r := &fullRead{start: time.Now(), done: make(chan struct{}), err: failed}
	close(r.done)
	p.mu.Lock()
	p.wholeTime = p.wholeTime.Add(-2 * time.Minute) // past AttrFresh's bound
	p.fullRead = r                                  // another caller's read, ended in failed
	p.mu.Unlock()
	if a, err := p.AttrFresh(time.Minute); !errors.Is(err, failed) {
		t.Errorf("AttrFresh joining a failed read: %d GIDs, error %v; want %v", len(a.GIDs), err, failed)
	}
}

// EntriesHold reads the two entries a connection takes and compares them
// with the snapshot's: GID and type on RoCE, GID and P_Key on InfiniBand.
func TestEntriesHold(t *testing.T) {
	root := tree(t, fakeSysfs())
	devs, err := Discover(Options{SysfsRoot: root, AttrMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	mlx, rxe := devs[0].ports[0], devs[1].ports[0]
	ib, _ := mlx.Attr()
	roce, _ := rxe.Attr()
	write := func(rel, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, "class/infiniband", rel), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	holds := func(p *Port, g hw.GIDEntry, pkIdx int, pkey uint16) bool {
		t.Helper()
		ok, err := p.EntriesHold(g, pkIdx, pkey)
		if err != nil {
			t.Fatalf("EntriesHold(%v, %d, %#x): %v", g, pkIdx, pkey, err)
		}
		return ok
	}
	if !holds(mlx, ib.GIDs[0], 1, 0x8001) || !holds(rxe, roce.GIDs[1], 0, 0xffff) {
		t.Fatal("entries as read do not hold")
	}
	if holds(mlx, ib.GIDs[0], 1, 0x8002) || holds(mlx, ib.GIDs[0], 9, 0x8001) {
		t.Error("another P_Key, or a slot past the table, holds")
	}
	write("mlx5_0/ports/1/pkeys/1", "0x8002\n") // the SM rewrote the table
	if !holds(mlx, ib.GIDs[0], 1, 0x8001) {
		t.Error("entries found to hold a moment ago were read again")
	}
	expire := func(p *Port) {
		p.mu.Lock()
		for i := range p.checked {
			p.checked[i].at = p.checked[i].at.Add(-entryCheckAge)
		}
		p.mu.Unlock()
	}
	expire(mlx)
	if holds(mlx, ib.GIDs[0], 1, 0x8001) {
		t.Error("a P_Key the SM replaced still holds")
	}
	expire(rxe)
	write("rxe0/ports/1/gid_attrs/types/1", "IB/RoCE v1\n") // the slot reused for the other type
	if holds(rxe, roce.GIDs[1], 0, 0xffff) {
		t.Error("a RoCE v2 entry whose slot now holds RoCE v1 still holds")
	}
	write("rxe0/ports/1/gids/1", zeroGID) // the address left its netdev
	if holds(rxe, roce.GIDs[1], 0, 0xffff) {
		t.Error("an emptied GID slot still holds")
	}
	if err := os.Remove(filepath.Join(root, "class/infiniband/rxe0/ports/1/gid_attrs/types/3")); err != nil {
		t.Fatal(err)
	}
	if !holds(rxe, roce.GIDs[2], 0, 0xffff) {
		t.Error("a RoCE v1 entry with no type to read (a kernel before 4.9) does not hold")
	}
}

// AttrFresh(0), asked because an entry changed, does not take a whole read
// that was under way before it was called: that read may show the tables
// as they were.
func TestAttrFreshNowTakesNoOlderRead(t *testing.T) {
	root, p := readRXE0(t, fakeSysfs())
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/rxe0/ports/1/gids/2"), []byte("0000:0000:0000:0000:0000:ffff:0a00:0002\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &fullRead{start: time.Now().Add(-time.Second), done: make(chan struct{})}
	p.mu.Lock()
	p.wholeTime = p.wholeTime.Add(-2 * time.Second)
	p.fullRead = r // a read begun a second ago, of the three GIDs
	p.mu.Unlock()
	got := make(chan hw.PortAttr, 1)
	go func() {
		a, err := p.AttrFresh(0)
		if err != nil {
			t.Error(err)
		}
		got <- a
	}()
	time.Sleep(20 * time.Millisecond) // mostly, the call finds the read under way
	p.mu.Lock()
	p.fullRead = nil // as the read's own caller does before it closes done
	p.mu.Unlock()
	close(r.done)
	if a := <-got; len(a.GIDs) != 4 {
		t.Errorf("AttrFresh(0): %d GIDs, want the 4 sysfs has now", len(a.GIDs))
	}
}

// An InfiniBand port's GID table is not filled from its lowest free slot
// (an SM puts alias GUIDs at the indexes it chooses): a refresh reads it
// whole.
func TestRefreshReadsAnIBTableWhole(t *testing.T) {
	files := fakeSysfs()
	for i := 2; i < 128; i++ {
		files["class/infiniband/mlx5_0/ports/1/gids/"+strconv.Itoa(i)] = zeroGID
	}
	root := tree(t, files)
	s := sysfs{root: root}
	prev, err := s.portAttr("mlx5_0", 1, nil)
	if err != nil || len(prev.GIDs) != 1 {
		t.Fatalf("first read: %v, %v", prev.GIDs, err)
	}
	alias := "fe80:0000:0000:0000:0002:c903:0010:9999\n"
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/mlx5_0/ports/1/gids/100"), []byte(alias), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := s.portAttr("mlx5_0", 1, &prev)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.GIDs) != 2 || a.GIDs[1].Index != 100 || a.GIDs[1].GID != gid(t, alias[:len(alias)-1]) {
		t.Errorf("refresh: GIDs %+v, want slot 0 and the alias GUID's GID at slot 100", a.GIDs)
	}
}

// openFilesOf counts this process's descriptors open on path.
func openFilesOf(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && l == path {
			n++
		}
	}
	return n
}

// A port whose agent cannot be set up (here: its umad node is a plain
// file, so IB_USER_MAD_ENABLE_PKEY fails with ENOTTY) keeps no descriptor
// of it: the daemon retries a device it could not serve, at most a minute
// apart, for as long as it runs (internal/daemon/hotplug.go).
func TestFailedOpenMADClosesTheFile(t *testing.T) {
	devDir := t.TempDir()
	node := filepath.Join(devDir, "umad1")
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	devs, err := Discover(Options{SysfsRoot: tree(t, fakeSysfs()), DevDir: devDir})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		_, err := devs[1].ports[0].OpenMAD(hw.Registration{MgmtClass: 0x07, ClassVersion: 2, Methods: []uint8{3}})
		if !errors.Is(err, unix.ENOTTY) {
			t.Fatalf("OpenMAD on a plain file: %v, want ENOTTY", err)
		}
	}
	if n := openFilesOf(t, node); n != 0 {
		t.Errorf("%d descriptors of %s left open after 5 failed OpenMADs, want 0", n, node)
	}
}
