package ucm

import (
	"errors"

	"golang.org/x/sys/unix"
)

func errnoOf(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return ""
}
