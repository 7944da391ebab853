// Package sysclass keeps the /sys/class/infiniband_cm tree that libibcm reads
// to find its device, and shows it to one program at a time.
//
// The kernel removed that class with ib_ucm, and sysfs does not let userspace
// create it again. libibcm reads two paths: <SYSFS_PATH>/class/infiniband_cm/
// abi_version and the hard-coded /sys/class/infiniband_cm/ucmN/ibdev. So the
// daemon writes the tree into its runtime directory (WriteTree), and
// `ucmd exec` runs a program in a private mount namespace whose /sys/class is
// a copy of the real one (symlinks into a second sysfs mount) plus that tree
// (Enter). The host's /sys is untouched.
package sysclass

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// ClassName is the sysfs class libibcm looks for.
const ClassName = "infiniband_cm"

// ABIVersion is what abi_version reads ("5\n").
const ABIVersion = 5

// Device is one ucmN node.
type Device struct {
	Index int    // N in ucmN
	IBDev string // the RDMA device it serves, e.g. "mlx5_0" or "rxe0"
	Major uint32 // device numbers of the CUSE node (0:0 when unknown)
	Minor uint32
}

// ClassDir is where WriteTree puts the class directory under runDir.
func ClassDir(runDir string) string { return filepath.Join(runDir, "class", ClassName) }

// WriteTree replaces the class tree under runDir with abi_version and one
// ucmN directory (ibdev, dev) per device. It writes into a fresh directory
// and swaps it in, so a reader never sees a half-written tree.
func WriteTree(runDir string, devs []Device) error {
	parent := filepath.Join(runDir, "class")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("sysclass: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".new-")
	if err != nil {
		return fmt.Errorf("sysclass: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("sysclass: %w", err)
	}
	if err := writeFile(filepath.Join(tmp, "abi_version"), strconv.Itoa(ABIVersion)); err != nil {
		return err
	}
	seen := make(map[int]bool, len(devs))
	for _, d := range devs {
		if d.Index < 0 || seen[d.Index] {
			return fmt.Errorf("sysclass: bad or duplicate device index %d", d.Index)
		}
		seen[d.Index] = true
		if d.IBDev == "" || filepath.Base(d.IBDev) != d.IBDev {
			return fmt.Errorf("sysclass: bad RDMA device name %q for ucm%d", d.IBDev, d.Index)
		}
		dir := filepath.Join(tmp, "ucm"+strconv.Itoa(d.Index))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("sysclass: %w", err)
		}
		if err := writeFile(filepath.Join(dir, "ibdev"), d.IBDev); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, "dev"), fmt.Sprintf("%d:%d", d.Major, d.Minor)); err != nil {
			return err
		}
	}
	// Swap: rename the old tree away, the new one in. A bind mount held by a
	// running `ucmd exec` keeps the old directory, which is why Enter binds the
	// class parent rather than the class directory itself.
	final := ClassDir(runDir)
	old := final + ".old"
	os.RemoveAll(old)
	if err := os.Rename(final, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sysclass: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("sysclass: %w", err)
	}
	return os.RemoveAll(old)
}

// RemoveTree deletes the class tree (daemon shutdown).
func RemoveTree(runDir string) error {
	return os.RemoveAll(ClassDir(runDir))
}

func writeFile(path, line string) error {
	if err := os.WriteFile(path, []byte(line+"\n"), 0o444); err != nil {
		return fmt.Errorf("sysclass: %w", err)
	}
	return nil
}

// Enter moves the calling OS thread into a new mount namespace in which
// /sys/class also holds runDir's infiniband_cm tree, and leaves the thread
// locked: the caller's next step must be syscall.Exec from this goroutine,
// which makes the new program inherit the namespace.
//
// The steps: a private copy of the mount table (slave, so host mounts still
// propagate in); a tmpfs scratch area under runDir; a second sysfs mounted in
// it; a directory with a symlink to each of that sysfs's class entries plus a
// bind of our class tree; that directory bound read-only over /sys/class.
// Symlinks into the second sysfs keep the relative links inside the classes
// (../../devices/...) resolving.
func Enter(runDir string) error {
	classSrc := ClassDir(runDir)
	if _, err := os.Stat(filepath.Join(classSrc, "abi_version")); err != nil {
		return fmt.Errorf("sysclass: no %s tree in %s (is ucmd serve running with this runtime directory?): %w", ClassName, runDir, err)
	}
	scratch := filepath.Join(runDir, "exec-root")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return fmt.Errorf("sysclass: %w", err)
	}

	runtime.LockOSThread() // deliberately never unlocked: the namespace is this thread's
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("sysclass: unshare mount namespace: %w (needs CAP_SYS_ADMIN)", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("sysclass: make / a slave mount: %w", err)
	}
	if err := unix.Mount("ucmd", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return fmt.Errorf("sysclass: mount tmpfs on %s: %w", scratch, err)
	}
	sys := filepath.Join(scratch, "sys")
	class := filepath.Join(scratch, "class")
	for _, d := range []string{sys, class} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("sysclass: %w", err)
		}
	}
	if err := unix.Mount("sysfs", sys, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("sysclass: mount a second sysfs on %s: %w", sys, err)
	}
	entries, err := os.ReadDir(filepath.Join(sys, "class"))
	if err != nil {
		return fmt.Errorf("sysclass: %w", err)
	}
	for _, e := range entries {
		if e.Name() == ClassName {
			continue // a kernel that still has the class: ours wins
		}
		if err := os.Symlink(filepath.Join(sys, "class", e.Name()), filepath.Join(class, e.Name())); err != nil {
			return fmt.Errorf("sysclass: %w", err)
		}
	}
	// Bind the parent of our class directory, so WriteTree's rename swap is
	// visible to programs already running.
	classParent := filepath.Join(scratch, "ucmd-class")
	if err := os.Mkdir(classParent, 0o755); err != nil {
		return fmt.Errorf("sysclass: %w", err)
	}
	if err := unix.Mount(filepath.Dir(classSrc), classParent, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("sysclass: bind %s: %w", filepath.Dir(classSrc), err)
	}
	if err := os.Symlink(filepath.Join(classParent, ClassName), filepath.Join(class, ClassName)); err != nil {
		return fmt.Errorf("sysclass: %w", err)
	}
	if err := unix.Mount(class, "/sys/class", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("sysclass: bind over /sys/class: %w", err)
	}
	if err := unix.Mount("", "/sys/class", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("sysclass: make /sys/class read-only: %w", err)
	}
	return nil
}
