//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Helpers shared by every e2e test file. Keep them small and about the guest
// (sysfs, modules, device nodes); product code has its own packages.

// readSysfs returns the whitespace-trimmed content of a sysfs attribute.
func readSysfs(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return strings.TrimSpace(string(b))
}

// moduleLoaded reports whether a loadable kernel module is live.
func moduleLoaded(name string) bool {
	_, err := os.Stat("/sys/module/" + name + "/initstate")
	return err == nil
}

// modprobe loads a module for the rest of the test and unloads it (with any
// dependencies it pulled in) in t.Cleanup, so the next test starts clean.
func modprobe(t testing.TB, name string) {
	t.Helper()
	if out, err := exec.Command("modprobe", name).CombinedOutput(); err != nil {
		t.Fatalf("modprobe %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { rmmod(t, name) })
}

// rmmod unloads a module if it is loaded, failing the test if it stays.
func rmmod(t testing.TB, name string) {
	t.Helper()
	if !moduleLoaded(name) {
		return
	}
	if out, err := exec.Command("modprobe", "-r", name).CombinedOutput(); err != nil {
		t.Fatalf("modprobe -r %s: %v: %s", name, err, out)
	}
	if moduleLoaded(name) {
		t.Fatalf("module %s still loaded after modprobe -r", name)
	}
}

// ucmdBin is the ucmd binary built for this run (test/vm/e2e.sh sets it).
func ucmdBin(t testing.TB) string {
	t.Helper()
	p := os.Getenv("UCMD_BIN")
	if p == "" {
		t.Fatal("UCMD_BIN is not set: run the e2e tests through `make e2e`")
	}
	return p
}

// umadRegReq is the kernel's struct ib_user_mad_reg_req (linux/ib_user_mad.h;
// 28 bytes, 4-byte aligned). method_mask is a bitmap of longs in the kernel;
// on little-endian amd64 that is the same bits as four uint32 words.
type umadRegReq struct {
	ID               uint32
	MethodMask       [4]uint32
	QPN              uint8
	MgmtClass        uint8
	MgmtClassVersion uint8
	OUI              [3]uint8
	RMPPVersion      uint8
	_                uint8
}

var _ [28]byte = [unsafe.Sizeof(umadRegReq{})]byte{}

const (
	// _IOWR(0x1b, 1, struct ib_user_mad_reg_req) and _IOW(0x1b, 2, __u32)
	umadRegisterAgent   = 0xc01c1b01
	umadUnregisterAgent = 0x40041b02
)

// umadRegister registers a MAD agent on an open umad file for one class,
// version and set of unsolicited methods on QP1, returning the agent id.
func umadRegister(f *os.File, class, version uint8, methods ...uint8) (uint32, error) {
	req := umadRegReq{QPN: 1, MgmtClass: class, MgmtClassVersion: version}
	for _, m := range methods {
		req.MethodMask[m/32] |= 1 << (m % 32)
	}
	if err := ioctl(f, umadRegisterAgent, unsafe.Pointer(&req)); err != nil {
		return 0, fmt.Errorf("IB_USER_MAD_REGISTER_AGENT class %#x v%d methods %v on %s: %w",
			class, version, methods, f.Name(), err)
	}
	return req.ID, nil
}

// umadUnregister drops an agent registered by umadRegister.
func umadUnregister(f *os.File, id uint32) error {
	if err := ioctl(f, umadUnregisterAgent, unsafe.Pointer(&id)); err != nil {
		return fmt.Errorf("IB_USER_MAD_UNREGISTER_AGENT %d on %s: %w", id, f.Name(), err)
	}
	return nil
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
