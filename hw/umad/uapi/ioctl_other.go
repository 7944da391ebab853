//go:build mips || mipsle || mips64 || mips64le || ppc64 || ppc64le

package uapi

// MIPS and PowerPC use a 13-bit size and 3 direction bits, with
// _IOC_NONE = 1, _IOC_READ = 2 and _IOC_WRITE = 4.
const (
	iocNone     = 1
	iocWrite    = 4
	iocRead     = 2
	iocDirShift = 29
)
