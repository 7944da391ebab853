package cuse

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse/internal/wire"
)

// channel is the message transport: /dev/cuse, or one end of a
// SOCK_SEQPACKET socketpair in tests. One read returns one whole request;
// one write must carry one whole reply.
type channel struct {
	f  *os.File
	rc syscall.RawConn

	// State of the one reader, and the RawConn callback bound to it once,
	// so that a read allocates nothing.
	rbuf   []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool

	writers sync.Pool // of *writeOp
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
	c := &channel{f: f, rc: rc}
	c.readFn = func(fd uintptr) bool {
		for {
			c.rn, c.rerr = unix.Read(int(fd), c.rbuf)
			if c.rerr != unix.EINTR {
				return c.rerr != unix.EAGAIN
			}
		}
	}
	c.writers.New = func() any {
		w := &writeOp{}
		w.fn = w.write
		return w
	}
	return c, nil
}

// read reads one message into b, parking in the runtime poller. Only one
// goroutine may read.
func (c *channel) read(b []byte) (int, error) {
	c.rbuf = b
	err := c.rc.Read(c.readFn)
	c.rbuf = nil
	if err != nil {
		return 0, err
	}
	if c.rerr != nil {
		return 0, os.NewSyscallError("read", c.rerr)
	}
	if c.rn == 0 {
		return 0, errChannelEOF
	}
	return c.rn, nil
}

var errChannelEOF = errors.New("cuse channel closed by the other end")

// writeOp is one writev in progress; pooled, with its RawConn callback
// bound once, so that a reply allocates nothing.
type writeOp struct {
	hdr   [wire.SizeofOutHeader]byte
	fixed [wire.SizeofCuseInitOut]byte // the largest reply struct
	iov   [3]unix.Iovec
	niov  int
	n     int
	errno unix.Errno
	fn    func(fd uintptr) bool
}

func (w *writeOp) write(fd uintptr) bool {
	for {
		r, _, e := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(w.niov))
		w.n, w.errno = int(r), e
		if e != unix.EINTR {
			return e != unix.EAGAIN
		}
	}
}

// writev writes one message with a single writev(2), as the kernel takes
// one whole message per write: the out header h (its Length computed
// here), a fixed-size reply struct (copied, so callers may keep it on their
// stack) and a payload.
func (c *channel) writev(h fuse.OutHeader, fixed, payload []byte) error {
	w := c.writers.Get().(*writeOp)
	defer func() {
		w.iov = [3]unix.Iovec{} // drop the reference to the payload
		c.writers.Put(w)
	}()
	if len(fixed) > len(w.fixed) {
		return fmt.Errorf("writev: %d-byte reply struct", len(fixed))
	}
	nfixed := copy(w.fixed[:], fixed)
	h.Length = uint32(len(w.hdr) + nfixed + len(payload))
	wire.PutOutHeader(w.hdr[:], h)
	w.niov = 0
	for _, p := range [3][]byte{w.hdr[:], w.fixed[:nfixed], payload} {
		if len(p) > 0 {
			w.iov[w.niov].Base = &p[0]
			w.iov[w.niov].SetLen(len(p))
			w.niov++
		}
	}
	if err := c.rc.Write(w.fn); err != nil {
		return err
	}
	if w.errno != 0 {
		return os.NewSyscallError("writev", w.errno)
	}
	if w.n != int(h.Length) {
		return fmt.Errorf("writev: wrote %d of %d bytes", w.n, h.Length)
	}
	return nil
}

// errAborted reports a channel the kernel has disconnected.
var errAborted = errors.New("connection aborted by the kernel")

// checkConnected polls the channel without waiting and without consuming a
// request: /dev/cuse reports POLLERR once the connection is aborted.
func (c *channel) checkConnected() error {
	var revents int16
	var perr error
	err := c.rc.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, perr = unix.Poll(pfd, 0)
			if perr != unix.EINTR {
				break
			}
		}
		revents = pfd[0].Revents
	})
	switch {
	case err != nil:
		return err
	case perr != nil:
		return os.NewSyscallError("poll", perr)
	case revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0:
		return errAborted
	}
	return nil
}
