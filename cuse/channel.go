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
//
// The channel starts as the *os.File it was given, read through Go's
// runtime poller, which is what the CUSE_INIT handshake uses (it honours
// the caller's context). For serving, detach moves it off the runtime
// poller to a raw descriptor in blocking mode that the readers block in
// read(2) on, as libfuse's threads do: the kernel wakes exactly one
// waiting reader per request, directly, and hands it the request in that
// same system call, with no wake-up of the runtime's poller thread and no
// goroutine hand-off on the way. Nothing interrupts a read(2) blocked on
// /dev/cuse but a request or the connection's end, so Server.stop wakes
// the readers with requests of its own (wake).
type channel struct {
	name string

	// Before detach: the file, and the RawConn callback bound to it once.
	f      *os.File
	rc     syscall.RawConn
	rbuf   []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool

	// After detach. fdMu keeps fd from being closed (and its number
	// reused) under a write in progress; readers need no lock, because
	// the Server closes the channel only once every reader has returned.
	fdMu   sync.RWMutex
	fd     int  // -1 once closed
	socket bool // a socketpair (tests): shutdown(2) wakes its readers
}

func newChannel(f *os.File) (*channel, error) {
	// Deadlines work only on files registered with the runtime poller,
	// which is what lets the CUSE_INIT read honour its context. An fd
	// opened without O_NONBLOCK is not registered.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("cuse channel %s is not pollable (open it O_NONBLOCK): %w", f.Name(), err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("cuse channel %s: %w", f.Name(), err)
	}
	c := &channel{name: f.Name(), f: f, rc: rc, fd: -1}
	c.readFn = func(fd uintptr) bool {
		for {
			c.rn, c.rerr = unix.Read(int(fd), c.rbuf)
			if c.rerr != unix.EINTR {
				return c.rerr != unix.EAGAIN
			}
		}
	}
	return c, nil
}

// read reads one message into b through the runtime poller; only before
// detach, by one goroutine.
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

// detach takes the channel off the runtime poller: it keeps a duplicate of
// the descriptor (same open file), closes the *os.File, which removes the
// file from the runtime's epoll set (left there, every request would also
// wake the runtime's poller thread), and puts the file in blocking mode.
func (c *channel) detach() error {
	var fd int
	var derr error
	if err := c.rc.Control(func(f uintptr) {
		fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return err
	}
	if derr != nil {
		return os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", derr)
	}
	if err := c.f.Close(); err != nil {
		unix.Close(fd)
		return err
	}
	c.f, c.rc = nil, nil
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return os.NewSyscallError("fcntl F_SETFL", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return os.NewSyscallError("fstat", err)
	}
	c.fd, c.socket = fd, st.Mode&unix.S_IFMT == unix.S_IFSOCK
	return nil
}

// close closes the channel (or the file, if it was never detached).
func (c *channel) close() error {
	c.fdMu.Lock()
	defer c.fdMu.Unlock()
	if c.f != nil {
		f := c.f
		c.f, c.rc = nil, nil
		return f.Close()
	}
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	if err != nil {
		return os.NewSyscallError("close", err)
	}
	return nil
}

// readBlocking reads one message into b, blocking the calling goroutine's
// thread in read(2) until the kernel hands it one. Only after detach, and
// only by readers (see the channel's doc for why it takes no lock).
func (c *channel) readBlocking(b []byte) (int, error) {
	for {
		n, err := unix.Read(c.fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, os.NewSyscallError("read", err)
		case n == 0:
			return 0, errChannelEOF
		}
		return n, nil
	}
}

// shutdownRead ends every read on a socketpair channel, now and later,
// with end of file; false for /dev/cuse, which has no such call.
func (c *channel) shutdownRead() bool {
	if !c.socket {
		return false
	}
	c.fdMu.RLock()
	defer c.fdMu.RUnlock()
	return c.fd >= 0 && unix.Shutdown(c.fd, unix.SHUT_RD) == nil
}

// writev writes one message with a single writev(2), as the kernel takes
// one whole message per write: the out header h (its Length computed
// here), a fixed-size reply struct and a payload. The header and the
// iovecs live on this goroutine's stack, which the system call may point
// into: a stack does not move while its goroutine is in a system call, and
// the iovecs' address goes to the call as its argument, which the
// compiler keeps alive for the call. So a reply allocates nothing and
// takes nothing from a pool.
func (c *channel) writev(h fuse.OutHeader, fixed, payload []byte) error {
	var hdr [wire.SizeofOutHeader]byte
	h.Length = uint32(len(hdr) + len(fixed) + len(payload))
	wire.EncodeOutHeader(hdr[:], h)
	var iov [3]unix.Iovec
	iov[0].Base = &hdr[0]
	iov[0].SetLen(len(hdr))
	niov := 1
	if len(fixed) > 0 {
		iov[niov].Base = &fixed[0]
		iov[niov].SetLen(len(fixed))
		niov++
	}
	if len(payload) > 0 {
		iov[niov].Base = &payload[0]
		iov[niov].SetLen(len(payload))
		niov++
	}
	var n int
	var err error
	c.fdMu.RLock()
	if c.f != nil {
		n, err = c.writeFile(iov[:niov])
	} else {
		n, err = c.writeFd(&iov, niov)
	}
	c.fdMu.RUnlock()
	if err != nil {
		return err
	}
	if n != int(h.Length) {
		return fmt.Errorf("writev: wrote %d of %d bytes", n, h.Length)
	}
	return nil
}

// writeFd writes the first niov of iov to the detached descriptor; the
// caller holds fdMu for reading.
//
// The write is a raw system call, without the runtime's bookkeeping for
// one that may block (about 200 instructions a reply, counted by
// callgrind: docs/perf.md), because it cannot block. /dev/cuse takes a
// reply at once: it copies the message in, completes the request it
// answers and wakes its caller (fuse_dev_do_write), and a poll
// notification only wakes the file's pollers. A socket (tests) is written
// with MSG_DONTWAIT, so that a full one says EAGAIN instead of waiting;
// the wait for room below then goes through the runtime. A raw call keeps
// its P and cannot be stopped for the collector, which is why a call that
// can wait, such as process_vm_writev into a caller's memory (a client can
// back it with a file of its own FUSE mount and never answer the fault),
// never goes this way.
func (c *channel) writeFd(iov *[3]unix.Iovec, niov int) (int, error) {
	for {
		if c.fd < 0 {
			return 0, os.ErrClosed
		}
		var r uintptr
		var errno unix.Errno
		if c.socket {
			msg := unix.Msghdr{Iov: &iov[0]}
			msg.SetIovlen(niov)
			r, _, errno = unix.RawSyscall(unix.SYS_SENDMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT)
		} else {
			r, _, errno = unix.RawSyscall(unix.SYS_WRITEV, uintptr(c.fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(niov))
		}
		switch errno {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
		default:
			return 0, os.NewSyscallError("writev", errno)
		}
		// A socket whose buffer is full. Wait for room, briefly
		// releasing the lock so that close is not held up.
		pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLOUT}}
		c.fdMu.RUnlock()
		unix.Poll(pfd, 100)
		c.fdMu.RLock()
	}
}

// writeFile writes iov through the file before detach (CUSE_INIT), which
// also waits for room should a socket be full. The message is joined into
// one heap buffer first: the file's callback would take the iovecs, and
// so the stack they point into, to the heap. It happens once.
func (c *channel) writeFile(iov []unix.Iovec) (int, error) {
	var msg []byte
	for _, v := range iov {
		msg = append(msg, unsafe.Slice(v.Base, v.Len)...)
	}
	var n int
	var errno error
	if err := c.rc.Write(func(fd uintptr) bool {
		for {
			n, errno = unix.Write(int(fd), msg)
			if errno != unix.EINTR {
				return errno != unix.EAGAIN
			}
		}
	}); err != nil {
		return 0, err
	}
	if errno != nil {
		return 0, os.NewSyscallError("write", errno)
	}
	return n, nil
}

// errAborted reports a channel the kernel has disconnected.
var errAborted = errors.New("connection aborted by the kernel")

// checkConnected polls the channel without waiting and without consuming a
// request: /dev/cuse reports POLLERR once the connection is aborted.
func (c *channel) checkConnected() error {
	c.fdMu.RLock()
	defer c.fdMu.RUnlock()
	poll := func(fd int) (int16, error) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(pfd, 0)
			if err != unix.EINTR {
				return pfd[0].Revents, err
			}
		}
	}
	var revents int16
	var perr error
	switch {
	case c.f != nil:
		if err := c.rc.Control(func(fd uintptr) { revents, perr = poll(int(fd)) }); err != nil {
			return err
		}
	case c.fd >= 0:
		revents, perr = poll(c.fd)
	default:
		return os.ErrClosed
	}
	switch {
	case perr != nil:
		return os.NewSyscallError("poll", perr)
	case revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0:
		return errAborted
	}
	return nil
}
