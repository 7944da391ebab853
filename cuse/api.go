package cuse

import (
	"context"

	"golang.org/x/sys/unix"
)

// Caller identifies the thread that made a request, as the kernel put it in
// the request header. The kernel sets these fields; a client cannot forge
// them.
type Caller struct {
	// Pid is the calling thread's id (a TID, not the TGID) in the pid
	// namespace of the process that opened /dev/cuse. It is 0 if the caller
	// is not visible there; never touch memory of pid 0.
	Pid int
	// Uid and Gid are the caller's fsuid and fsgid.
	Uid, Gid uint32
}

// Request describes one client system call on an open file.
type Request struct {
	// Unique is the kernel's id for this request; useful in logs.
	Unique uint64
	// Caller is the thread blocked in the system call until we answer.
	Caller Caller
	// Flags are the file's f_flags (O_NONBLOCK, O_ACCMODE, ...) as the
	// kernel saw them for this very call. A client's later
	// fcntl(F_SETFL, O_NONBLOCK) shows up here and nowhere else. POLL
	// requests carry no f_flags; Poll gets the flags the file was opened
	// with.
	Flags uint32
	// Offset is a READ's or WRITE's position in the system call's
	// transfer: CUSE ignores the file position (cuse_read_iter and
	// cuse_write_iter start at 0) and splits a transfer longer than
	// max_read or max_write into requests at 0, max_write, 2·max_write...
	// So a write with Offset > 0 continues one whose start the device
	// has already served.
	Offset uint64
}

// Nonblock reports whether the file was in O_NONBLOCK mode for this call.
func (r Request) Nonblock() bool { return r.Flags&unix.O_NONBLOCK != 0 }

// Device is what a CUSE device implements: a factory of open files.
//
// Errors returned by a Device or Handle reach the client as an errno. Return
// a unix.Errno (possibly wrapped, found with errors.As) to choose it; the
// value must be below 512. Returning ctx's error after ctx is cancelled
// answers EINTR if the client was interrupted by a signal. Any other error
// is logged and answered EIO.
type Device interface {
	// Open is called for each open(2) of the device node. req.Flags are
	// the open flags. The Handle serves every later call on that file
	// (dup and fork share it) until Release. w wakes the file's pollers;
	// keep it in the Handle.
	Open(ctx context.Context, req Request, w Waker) (Handle, error)
}

// Handle is one open file. Its methods are called concurrently: every
// system call a client makes is served in its own goroutine, so a call that
// blocks (waiting for an event, say) never delays another call on the same
// or another file. The Handle does its own locking.
//
// ctx is cancelled when the client is interrupted by a signal (FUSE
// INTERRUPT) or the server shuts down; a blocking method must then return
// promptly. ctx and the slices passed in are valid only until the method
// returns: the server reuses them for its next request, so a goroutine the
// method starts must not keep them.
type Handle interface {
	// Read serves read(2): fill dst (its length is the requested size) and
	// return the number of bytes.
	Read(ctx context.Context, req Request, dst []byte) (int, error)

	// Write serves write(2): consume data and return how many bytes were
	// taken (at most len(data)). The caller is blocked until Write
	// returns, so its memory (process req.Caller.Pid) may be accessed
	// until then, and not after.
	Write(ctx context.Context, req Request, data []byte) (int, error)

	// Poll serves poll(2), select(2) and epoll: return the ready events
	// among events (unix.POLLIN, unix.POLLOUT, ... ) right away; never
	// block. To wake a poller later, call the Waker given to Open when
	// readiness changes.
	Poll(ctx context.Context, req Request, events uint32) (revents uint32, err error)

	// Release is called once, after the last close of the file or when
	// the server shuts down. It has no caller: the closing task may be
	// another process, and it waits until Release returns, so tear down
	// promptly. ctx is never cancelled: a signal to the closing task does
	// not stop the teardown. The kernel sends it only when no call on the
	// file is in progress, and no method of the Handle is called after it.
	Release(ctx context.Context)
}

// Waker wakes the threads polling one open file.
type Waker interface {
	// Wake tells pollers of the file to poll again. It never blocks for
	// long, may be called from any goroutine and at any time (also after
	// Release, when it does nothing), and coalesces: one wake-up is sent
	// per poll that asked to be notified, however often Wake is called.
	Wake()
}
