package umad

import (
	"encoding/binary"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// recvFile is the receiving side of an agent's file.
type recvFile interface {
	Read(b []byte) (int, error)
	// Interrupt makes a blocked and every later Read fail.
	Interrupt()
	// Close releases the file once no Read can run any more.
	Close() error
}

// newRecvFile wraps a non-blocking umad fd, which it owns from then on
// (it is closed on error too). The runtime poller serves it
// when the device supports epoll (umad implements poll); if the poller
// refuses the fd, a poll(2) loop with an eventfd for wake-ups takes over.
func newRecvFile(fd int, name string) (recvFile, error) {
	f := os.NewFile(uintptr(fd), name)
	// Deadlines work only on files the poller took.
	if f.SetReadDeadline(time.Time{}) == nil {
		return pollerFile{f}, nil
	}
	nfd, err := unix.Dup(fd)
	if err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	return newPollLoopFile(nfd)
}

// pollerFile is an *os.File in the runtime poller: closing it wakes Read.
type pollerFile struct{ *os.File }

func (f pollerFile) Interrupt()   { f.File.Close() }
func (f pollerFile) Close() error { return nil } // Interrupt closed it

// pollLoopFile waits in poll(2) on the fd and an eventfd, for devices the
// runtime poller does not take. It ties up a thread while it waits.
type pollLoopFile struct {
	fd, wake    int
	interrupted atomic.Bool
}

func newPollLoopFile(fd int) (*pollLoopFile, error) {
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		unix.Close(wake)
		return nil, err
	}
	return &pollLoopFile{fd: fd, wake: wake}, nil
}

func (f *pollLoopFile) Read(b []byte) (int, error) {
	for {
		if f.interrupted.Load() {
			return 0, os.ErrClosed
		}
		n, err := unix.Read(f.fd, b)
		switch err {
		case nil:
			return n, nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
		default:
			return 0, err
		}
		fds := []unix.PollFd{{Fd: int32(f.fd), Events: unix.POLLIN}, {Fd: int32(f.wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return 0, err
		}
	}
}

func (f *pollLoopFile) Interrupt() {
	f.interrupted.Store(true)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(f.wake, one[:])
}

func (f *pollLoopFile) Close() error {
	unix.Close(f.wake)
	return unix.Close(f.fd)
}
