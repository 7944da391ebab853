package umad

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The listing token changes when a device or umad port is added, removed
// or registered again under its old name, and only then.
func TestListing(t *testing.T) {
	root := tree(t, fakeSysfs())
	opts := Options{SysfsRoot: root}
	list := func() string {
		t.Helper()
		s, err := Listing(opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := list()
	for _, name := range []string{"rxe0", "mlx5_0", "umad0", "umad1", "abi_version"} {
		if !strings.Contains(first, " "+name+"=") {
			t.Errorf("listing %q lacks %s", first, name)
		}
	}
	if again := list(); again != first {
		t.Fatalf("nothing changed, but the listing went from %q to %q", first, again)
	}
	// An attribute changed in place is not the listing's business.
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/rxe0/node_guid"), []byte("5054:00ff:fe77:0002\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again := list(); again != first {
		t.Fatalf("an attribute write changed the listing from %q to %q", first, again)
	}

	// rxe0 registered again: its new class entry exists before the old
	// one goes (as a new kernfs node gets a new id), then takes its name.
	ib := filepath.Join(root, "class/infiniband")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(ib, "rxe0.new"), 0o755))
	must(os.RemoveAll(filepath.Join(ib, "rxe0")))
	must(os.Rename(filepath.Join(ib, "rxe0.new"), filepath.Join(ib, "rxe0")))
	again := list()
	if again == first {
		t.Fatalf("rxe0 registered again, but the listing stayed %q", again)
	}
	if strings.Count(again, " rxe0=") != 1 {
		t.Fatalf("listing %q", again)
	}

	// A umad port added.
	must(os.Mkdir(filepath.Join(root, "class/infiniband_mad/umad2"), 0o755))
	if third := list(); third == again {
		t.Fatalf("umad2 added, but the listing stayed %q", third)
	}
}

// No RDMA in the kernel (no class directories) is a listing, not an error;
// a class that cannot be read is an error.
func TestListingNoRDMA(t *testing.T) {
	s, err := Listing(Options{SysfsRoot: t.TempDir()})
	if err != nil || s != "infiniband:\ninfiniband_mad:\n" {
		t.Fatalf("empty sysfs: %q, %v", s, err)
	}
	root := tree(t, map[string]string{"class/infiniband": "not a directory"})
	if _, err := Listing(Options{SysfsRoot: root}); err == nil || !strings.Contains(err.Error(), "class/infiniband") {
		t.Fatalf("class/infiniband a file: %v", err)
	}
}

// A getdents64 buffer the kernel would not write is refused, not read
// past its end.
func TestAppendDirentsMalformed(t *testing.T) {
	rec := func(ino uint64, reclen uint16, name string) []byte {
		b := make([]byte, direntNameOff, reclen)
		binary.NativeEndian.PutUint64(b, ino)
		binary.NativeEndian.PutUint16(b[16:], reclen)
		b = append(b, name...)
		return append(b, make([]byte, int(reclen)-len(b))...)
	}
	var good strings.Builder
	buf := append(rec(7, 24, "."), rec(9, 32, "rxe0\x00")...)
	if err := appendDirents(buf, &good); err != nil || good.String() != " rxe0=9" {
		t.Fatalf("good buffer: %q, %v", good.String(), err)
	}
	for name, buf := range map[string][]byte{
		"short":       make([]byte, 10),
		"reclen 0":    make([]byte, 24),
		"reclen long": rec(1, 24, "x")[:20],
	} {
		var b strings.Builder
		if err := appendDirents(buf, &b); err == nil {
			t.Errorf("%s: no error, listed %q", name, b.String())
		}
	}
}

// More entries than one getdents64 call returns (its buffer is 8 KiB): each
// listed once, as 600 Soft-RoCE devices would be.
func TestListingManyEntries(t *testing.T) {
	root := t.TempDir()
	ib := filepath.Join(root, "class/infiniband")
	const n = 600
	for i := range n {
		if err := os.MkdirAll(filepath.Join(ib, fmt.Sprintf("rxe_with_a_long_name_%03d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Listing(Options{SysfsRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if c := strings.Count(s, fmt.Sprintf(" rxe_with_a_long_name_%03d=", i)); c != 1 {
			t.Fatalf("device %d listed %d times", i, c)
		}
	}
	if len(s) < 8192 {
		t.Fatalf("listing of %d bytes: not more than one call's worth", len(s))
	}
}
