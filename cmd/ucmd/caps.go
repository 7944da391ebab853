package main

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dropCapability removes bit from the bounding, effective, permitted and
// inheritable sets of every thread (capabilities are per thread; the
// runtime's AllThreadsSyscall applies one syscall to all of them). It
// reports whether the bit was held. Without AllThreadsSyscall (cgo builds)
// it returns ENOTSUP and changes nothing.
func dropCapability(bit uintptr) (bool, error) {
	held := false
	if r, _, _ := unix.Syscall(unix.SYS_PRCTL, unix.PR_CAPBSET_READ, bit, 0); r == 1 {
		held = true
		// Needs CAP_SETPCAP; without it the bounding set keeps the bit, but
		// nothing below can regain it once permitted is cleared.
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, bit, 0); e == syscall.ENOTSUP {
			return held, e
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return held, err
	}
	i, m := bit/32, uint32(1)<<(bit%32)
	if (data[i].Effective|data[i].Permitted|data[i].Inheritable)&m == 0 {
		return held, nil
	}
	held = true
	data[i].Effective &^= m
	data[i].Permitted &^= m
	data[i].Inheritable &^= m
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return held, e
	}
	return held, nil
}
