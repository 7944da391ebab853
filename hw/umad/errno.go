package umad

import (
	"errors"

	"golang.org/x/sys/unix"
)

func isEINVAL(err error) bool { return errors.Is(err, unix.EINVAL) }
