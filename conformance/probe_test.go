package conformance

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// OpenPath refuses what is not a ucm node, with one line saying why, and
// without running anything against it.
func TestOpenPathRefusesNonUCM(t *testing.T) {
	regular := t.TempDir() + "/file"
	if err := os.WriteFile(regular, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, sysfs, want string }{
		{"/dev/null", "/sys", `"null"`},                          // sysfs names the device
		{"/dev/zero", t.TempDir(), "unknown command returned 8"}, // no sysfs: the write probe
		{regular, "/sys", "not a character device"},
	} {
		err := probeNode(tc.path, tc.sysfs)
		if !errors.Is(err, ErrNotUCM) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("probeNode(%s, %s) = %v, want ErrNotUCM mentioning %q on one line", tc.path, tc.sysfs, err, tc.want)
		}
	}
	if b, _ := os.ReadFile(regular); string(b) != "x" {
		t.Errorf("the probe wrote into a regular file: %q", b)
	}
	if _, err := OpenPath("/dev/null"); !errors.Is(err, ErrNotUCM) {
		t.Errorf("OpenPath(/dev/null) = %v, want ErrNotUCM", err)
	}
}
