package cuse

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// channel is the message transport: /dev/cuse, or one end of a
// SOCK_SEQPACKET socketpair in tests. One read returns one whole request;
// one write must carry one whole reply.
type channel struct {
	f  *os.File
	rc syscall.RawConn
}

func newChannel(f *os.File) (*channel, error) {
	// Deadlines work only on files registered with the runtime poller,
	// which is what lets a parked reader cost no OS thread and lets Close
	// wake it. An fd opened without O_NONBLOCK is not registered.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("cuse channel %s is not pollable (open it O_NONBLOCK): %w", f.Name(), err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("cuse channel %s: %w", f.Name(), err)
	}
	return &channel{f: f, rc: rc}, nil
}

// read reads one message into b, parking in the runtime poller.
func (c *channel) read(b []byte) (int, error) {
	var n int
	var err error
	rerr := c.rc.Read(func(fd uintptr) bool {
		for {
			n, err = unix.Read(int(fd), b)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
	if rerr != nil {
		return 0, rerr
	}
	if err != nil {
		return 0, os.NewSyscallError("read", err)
	}
	if n == 0 {
		return 0, errChannelEOF
	}
	return n, nil
}

var errChannelEOF = errors.New("cuse channel closed by the other end")

// writev writes one message, a header followed by up to two more parts
// (a reply struct, a payload), with a single writev(2): the kernel takes one
// whole message per write.
func (c *channel) writev(hdr, a, b []byte) error {
	var iov [3]unix.Iovec
	n, total := 0, 0
	for _, p := range [3][]byte{hdr, a, b} {
		if len(p) == 0 {
			continue
		}
		iov[n].Base = &p[0]
		iov[n].SetLen(len(p))
		n++
		total += len(p)
	}
	var wrote int
	var errno unix.Errno
	werr := c.rc.Write(func(fd uintptr) bool {
		for {
			r, _, e := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
			wrote, errno = int(r), e
			if errno != unix.EINTR {
				return errno != unix.EAGAIN
			}
		}
	})
	if werr != nil {
		return werr
	}
	if errno != 0 {
		return os.NewSyscallError("writev", errno)
	}
	if wrote != total {
		return fmt.Errorf("writev: wrote %d of %d bytes", wrote, total)
	}
	return nil
}
