package umad

import "golang.org/x/sys/unix"

var (
	errnoEINVAL error = unix.EINVAL
	errnoEPERM  error = unix.EPERM
)
