package umad

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad/uapi"
)

const mgmtClassCM = 0x07

// openAgent opens the umad device, switches it to the 64-byte header with
// pkey_index (IB_USER_MAD_ENABLE_PKEY, before any agent exists), and
// registers one GSI agent. A zero MgmtClass registers a send-only agent.
// The fd is blocking unless nonblock is set; the caller owns it.
func (p *Port) openAgent(reg hw.Registration, nonblock bool) (int, uint32, error) {
	path := p.UMADPath()
	if path == "" {
		return -1, 0, fmt.Errorf("open MAD agent on %s: no umad device in %s (is ib_umad loaded?)",
			p, p.sys.path("infiniband_mad"))
	}
	flags := unix.O_RDWR | unix.O_CLOEXEC
	if nonblock {
		flags |= unix.O_NONBLOCK
	}
	f, err := unix.Open(path, flags, 0)
	if err != nil {
		return -1, 0, fmt.Errorf("open %s for %s: %w", path, p, err)
	}
	if err := ioctl(f, uapi.IB_USER_MAD_ENABLE_PKEY, nil); err != nil {
		unix.Close(f)
		return -1, 0, fmt.Errorf("umad enable P_Key index on %s (%s): %w", p, path, err)
	}
	agent, err := p.registerAgent(f, reg, path)
	if err != nil {
		unix.Close(f)
		return -1, 0, err
	}
	return f, agent, nil
}

// registerAgent registers one GSI agent on an open umad file.
func (p *Port) registerAgent(fd int, reg hw.Registration, path string) (uint32, error) {
	req := uapi.RegReq{QPN: 1, MgmtClass: reg.MgmtClass, MgmtClassVersion: reg.ClassVersion}
	for _, m := range reg.Methods {
		if !req.SetMethod(m) {
			return 0, fmt.Errorf("umad register class %#x on %s: method %#x cannot be registered: %w",
				reg.MgmtClass, p, m, unix.EINVAL)
		}
	}
	var buf [uapi.SizeofRegReq]byte
	req.Encode(buf[:])
	if err := ioctl(fd, uapi.IB_USER_MAD_REGISTER_AGENT, buf[:]); err != nil {
		return 0, p.registerError(reg, path, err)
	}
	agent, _ := uapi.DecodeRegReqID(buf[:])
	return agent, nil
}

// renewSendAgent replaces the send-only agent of a lane (lanes.go). The
// kernel's unregistration returns once every MAD sent through the agent
// has completed and left the file's send list; the new agent has a new
// hi_tid as well.
func (p *Port) renewSendAgent(sf *sendFile) (uint32, error) {
	var id [4]byte
	binary.NativeEndian.PutUint32(id[:], sf.agent)
	if err := ioctl(sf.fd, uapi.IB_USER_MAD_UNREGISTER_AGENT, id[:]); err != nil {
		return 0, fmt.Errorf("umad unregister send agent %d on %s (%s): %w", sf.agent, p, p.UMADPath(), err)
	}
	return p.registerAgent(sf.fd, hw.Registration{}, p.UMADPath())
}

// ioctl passes arg (which the kernel may write back into) to fd.
func ioctl(fd int, req uint, arg []byte) error {
	var ptr unsafe.Pointer // converted to uintptr only in the call itself
	if len(arg) > 0 {
		ptr = unsafe.Pointer(&arg[0])
	}
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(ptr))
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}

// registerError explains a failed registration. The MAD layer answers
// EINVAL when another agent owns one of the methods ("Method 3 already
// in use" in dmesg); for the CM class that is the kernel's ib_cm.
func (p *Port) registerError(reg hw.Registration, path string, err error) error {
	methods := make([]uint16, len(reg.Methods)) // %#x on []uint8 would print one hex string
	for i, m := range reg.Methods {
		methods[i] = uint16(m)
	}
	base := fmt.Sprintf("umad register class %#x version %d methods %#x on %s (%s)",
		reg.MgmtClass, reg.ClassVersion, methods, p, path)
	if reg.MgmtClass != mgmtClassCM || !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%s: %w", base, err)
	}
	return fmt.Errorf("%s: %w: %s (%w)", base, hw.ErrCMClassInUse, unloadAdvice(p.sys.root), err)
}

// unloadAdvice names the modules to unload so ib_cm lets go of the CM
// class, read from the module holders in sysfs: everything that depends
// on ib_cm, dependents first, then ib_cm itself.
func unloadAdvice(sysRoot string) string {
	mods := cmHolders(filepath.Join(sysRoot, "module"))
	if mods == nil {
		return "ib_cm is not loaded as a module here: another process may own the CM class " +
			"(a second ucmd?), or ib_cm is built in; otherwise unload it and its users " +
			"(modprobe -r rdma_ucm rdma_cm ib_cm, plus ib_ipoib, ib_srp, ib_srpt, ib_iser, ib_isert, " +
			"nvme_rdma, nvmet_rdma, rpcrdma if loaded)"
	}
	// The command stands alone, followed by " (": tests and people copy it.
	advice := "unload the kernel CM and its users first: modprobe -r " + strings.Join(mods, " ") + " ("
	if down := slices.DeleteFunc(slices.Clone(mods), func(m string) bool { return !disruptive[m] }); len(down) > 0 {
		advice += "which takes down what " + strings.Join(down, ", ") + " serve, IPoIB interfaces and RDMA " +
			"storage, and a remote login over them; "
	}
	return advice + "or leave them running: systemctl enable ucmd and reboot, and ucmd.service starts " +
		"before rdma-core loads ib_cm; loaded at boot before ucmd all the same? an initramfs with dracut's " +
		"rdma module may have loaded it: see \"An initramfs that loads the RDMA stack\" in ucmd's README)"
}

// disruptive are the ib_cm users whose unloading takes down more than
// rdma_cm's connections: network interfaces and storage.
var disruptive = map[string]bool{
	"ib_ipoib": true, "ib_srp": true, "ib_srpt": true, "ib_iser": true, "ib_isert": true,
	"nvme_rdma": true, "nvmet_rdma": true, "rpcrdma": true, "svcrdma": true, "xprtrdma": true,
}

// cmHolders returns ib_cm and every module that (transitively) holds it,
// ordered so each module comes before the modules it depends on; nil when
// ib_cm is not a loaded module.
func cmHolders(moduleDir string) []string {
	if _, err := os.Stat(filepath.Join(moduleDir, "ib_cm", "holders")); err != nil {
		return nil
	}
	var order []string
	seen := map[string]bool{}
	var visit func(m string)
	visit = func(m string) {
		if seen[m] {
			return
		}
		seen[m] = true
		ents, _ := os.ReadDir(filepath.Join(moduleDir, m, "holders"))
		names := make([]string, 0, len(ents))
		for _, e := range ents {
			names = append(names, e.Name())
		}
		slices.Sort(names)
		for _, h := range names {
			visit(h)
		}
		order = append(order, m) // after all of its holders
	}
	visit("ib_cm")
	return order
}
