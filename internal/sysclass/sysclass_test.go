package sysclass

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteTree(t *testing.T) {
	run := t.TempDir()
	devs := []Device{{Index: 0, IBDev: "rxe0", Major: 231, Minor: 224}, {Index: 1, IBDev: "mlx5_1", Major: 231, Minor: 225}}
	if err := WriteTree(run, devs); err != nil {
		t.Fatal(err)
	}
	dir := ClassDir(run)
	for path, want := range map[string]string{
		"abi_version": "5\n",
		"ucm0/ibdev":  "rxe0\n",
		"ucm0/dev":    "231:224\n",
		"ucm1/ibdev":  "mlx5_1\n",
		"ucm1/dev":    "231:225\n",
	} {
		if got := read(t, filepath.Join(dir, path)); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}

	// Rewriting replaces the tree: ucm1 disappears, nothing is left behind.
	if err := WriteTree(run, devs[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ucm1")); !os.IsNotExist(err) {
		t.Errorf("ucm1 still present after rewrite: %v", err)
	}
	left, _ := os.ReadDir(filepath.Join(run, "class"))
	if len(left) != 1 || left[0].Name() != ClassName {
		t.Errorf("class dir holds %v, want only %s", left, ClassName)
	}
}

func TestWriteTreeRejectsBadInput(t *testing.T) {
	for _, devs := range [][]Device{
		{{Index: 0, IBDev: "rxe0"}, {Index: 0, IBDev: "rxe1"}},
		{{Index: -1, IBDev: "rxe0"}},
		{{Index: 0, IBDev: "../etc"}},
		{{Index: 0, IBDev: ""}},
	} {
		run := t.TempDir()
		if err := WriteTree(run, devs); err == nil {
			t.Errorf("WriteTree(%v) succeeded", devs)
		}
		if _, err := os.Stat(ClassDir(run)); !os.IsNotExist(err) {
			t.Errorf("WriteTree(%v) left a tree behind", devs)
		}
	}
}

// TestEnter runs the namespace set-up on a locked thread that dies with its
// goroutine, so the test process keeps the host's view.
func TestEnter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN) for a mount namespace")
	}
	run := t.TempDir()
	if err := WriteTree(run, []Device{{Index: 0, IBDev: "rxe0", Major: 231, Minor: 224}}); err != nil {
		t.Fatal(err)
	}
	hostClasses, err := os.ReadDir("/sys/class")
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		abi, ibdev, ibdevAfter string
		classes                []string
		loErr                  error
		err                    error
	}
	done := make(chan result)
	go func() {
		var r result
		defer func() { done <- r }()
		if r.err = Enter(run); r.err != nil {
			runtime.UnlockOSThread()
			return
		}
		b, _ := os.ReadFile("/sys/class/infiniband_cm/abi_version")
		r.abi = string(b)
		b, _ = os.ReadFile("/sys/class/infiniband_cm/ucm0/ibdev")
		r.ibdev = string(b)
		// The daemon rewrites the tree while the program runs.
		if r.err = WriteTree(run, []Device{{Index: 0, IBDev: "rxe9"}}); r.err != nil {
			return
		}
		b, _ = os.ReadFile("/sys/class/infiniband_cm/ucm0/ibdev")
		r.ibdevAfter = string(b)
		_, r.loErr = os.ReadFile("/sys/class/net/lo/address")
		es, _ := os.ReadDir("/sys/class")
		for _, e := range es {
			r.classes = append(r.classes, e.Name())
		}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.abi != "5\n" || r.ibdev != "rxe0\n" || r.ibdevAfter != "rxe9\n" {
		t.Errorf("inside: abi_version %q, ibdev %q then %q", r.abi, r.ibdev, r.ibdevAfter)
	}
	got := strings.Join(r.classes, " ")
	for _, c := range hostClasses {
		if !strings.Contains(" "+got+" ", " "+c.Name()+" ") {
			t.Errorf("class %s missing inside the namespace (have %s)", c.Name(), got)
		}
	}
	// Links inside a class are relative (../../devices/...): they must resolve.
	if r.loErr != nil {
		t.Errorf("inside: /sys/class/net/lo/address: %v", r.loErr)
	}
	if _, err := os.Stat("/sys/class/infiniband_cm"); !os.IsNotExist(err) {
		t.Errorf("host /sys/class/infiniband_cm exists after the test: %v", err)
	}
}
