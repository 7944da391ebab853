//go:build !(mips || mipsle || mips64 || mips64le || ppc64 || ppc64le)

package uapi

// The generic _IOC layout (asm-generic/ioctl.h): nr 8 bits, type 8, size
// 14, dir 2, with _IOC_WRITE = 1 and _IOC_READ = 2.
const (
	iocNone     = 0
	iocWrite    = 1
	iocRead     = 2
	iocDirShift = 30
)
