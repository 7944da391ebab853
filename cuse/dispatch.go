package cuse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse/internal/wire"
)

// request is one FUSE request in flight. It is also the context its
// Device or Handle method gets: cancelled by INTERRUPT or shutdown, with
// its Done channel made only when a method waits on it (GET_EVENT does;
// most commands never look), so that a request costs no registration in a
// parent context. Each reader reuses one request for everything it reads
// (reset), so a request costs no allocation either: once answered, it is
// out of the inflight table, and what the Handle was given is valid only
// until its method returns.
type request struct {
	hdr  fuse.InHeader
	body []byte // after the in_header; in the reader's buffer, valid while it serves (until DetachBuffer)
	done bool   // answered; only the serving goroutine touches it
	rs   *readerState

	mu     sync.Mutex
	doneCh chan struct{} // made by the first Done
	cause  error         // errInterrupted or errShutdown once cancelled
}

var _ context.Context = (*request)(nil)

// Deadline implements context.Context: requests have none.
func (r *request) Deadline() (time.Time, bool) { return time.Time{}, false }

// Value implements context.Context: requests carry no values.
func (r *request) Value(any) any { return nil }

// Done implements context.Context.
func (r *request) Done() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.doneCh == nil {
		r.doneCh = make(chan struct{})
		if r.cause != nil {
			close(r.doneCh)
		}
	}
	return r.doneCh
}

// Err implements context.Context: context.Canceled once cancelled.
func (r *request) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause != nil {
		return context.Canceled
	}
	return nil
}

// cancel cancels the request with cause, if it is not already cancelled.
func (r *request) cancel(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause == nil {
		r.cause = cause
		if r.doneCh != nil {
			close(r.doneCh)
		}
	}
}

// reset makes r ready for the reader's next request. Only the reader that
// owns r calls it, after r was answered: nothing else refers to r then
// (reply took it out of the inflight table under its shard's lock, and
// interrupt and cancelAll cancel only under that lock).
func (r *request) reset() {
	r.hdr, r.body, r.done = fuse.InHeader{}, nil, false
	r.doneCh, r.cause = nil, nil
}

// DetachBuffer tells the Server that the handler serving ctx, a
// request's context given to a Device or Handle method, is about to wait
// for long (for an event, for its turn): the buffer the request was read
// into goes to other readers meanwhile, which keeps a waiting request at
// a few KiB instead of MaxWrite and more. From then on the data the
// handler was given may be overwritten: it must have taken what it
// needs. Call it on the goroutine the handler was called on; a ctx that
// is not a request's, or a second call, does nothing.
func DetachBuffer(ctx context.Context) {
	r, ok := ctx.(*request)
	if !ok || r.rs == nil || r.rs.buf == nil {
		return
	}
	r.body = nil
	r.rs.s.detach(r.rs)
}

// ShuttingDown reports whether ctx, a request's context given to a Device
// or Handle method, was cancelled because the server is shutting down:
// the client is then answered ECONNABORTED, not the EINTR of an interrupt.
func ShuttingDown(ctx context.Context) bool {
	r, ok := ctx.(*request)
	return ok && r.cancelCause() == errShutdown
}

// cancelCause is why the request was cancelled; nil while it is not.
func (r *request) cancelCause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause
}

func (r *request) op() wire.Opcode { return wire.Opcode(r.hdr.Opcode) }

func (r *request) public(flags uint32) Request {
	return Request{
		Unique: r.hdr.Unique,
		Caller: Caller{Pid: int(r.hdr.Pid), Uid: r.hdr.Uid, Gid: r.hdr.Gid},
		Flags:  flags,
	}
}

// file is the server side of one open file; it is the Handle's Waker.
type file struct {
	s         *Server
	fh        uint64
	openFlags uint32
	h         Handle

	mu       sync.Mutex
	kh       uint64 // the kernel's poll handle, one per open file
	armed    bool   // a poller asked for FUSE_NOTIFY_POLL and has not had it
	released bool
}

// Wake implements Waker.
func (f *file) Wake() {
	f.mu.Lock()
	if !f.armed || f.released {
		f.mu.Unlock()
		return
	}
	f.armed = false
	kh := f.kh
	f.mu.Unlock()
	f.s.notifyPoll(kh)
}

// arm records that a poller waits for a wake-up. It is done before asking
// the Handle for readiness, so a Wake racing with that answer is not lost:
// the kernel has already queued the poller when it sends POLL.
func (f *file) arm(kh uint64) {
	f.mu.Lock()
	f.kh, f.armed = kh, true
	f.mu.Unlock()
}

func (f *file) release(ctx context.Context) {
	f.mu.Lock()
	f.released, f.armed = true, false
	f.mu.Unlock()
	f.h.Release(ctx)
}

// dispatch takes one message from a reader and reports whether it is a
// request to serve, which it then decoded into r (the reader's). It never
// blocks on a device: registering the request here, before the next read,
// means a later INTERRUPT always finds a request that is still unanswered.
// The request keeps pointing into the reader's buffer, which the reader
// does not reuse before it has served the request.
//
// It decodes into r even what it drops: r is not registered then, and the
// next message overwrites it.
func (s *Server) dispatch(r *request, msg []byte) bool {
	body, err := parseHeader(&r.hdr, msg)
	if err != nil {
		s.log.Warn("cuse: dropping malformed request", "err", err)
		return false
	}
	h := &r.hdr
	if wire.Opcode(h.Opcode) == wire.FUSE_INTERRUPT {
		s.interrupt(*h, body)
		return false
	}
	r.body = body
	// Counted before it is registered, so that shutdown, which cancels
	// what is registered and then waits for the count, waits for it.
	s.handlers.Add(1)
	if !s.inflight.add(r) {
		s.handlers.Done()
		s.log.Warn("cuse: dropping request reusing an unanswered unique", "op", wire.Opcode(h.Opcode), "unique", h.Unique)
		return false
	}
	return true
}

// interrupt cancels the request a signalled client waits for; that request
// then answers (normally EINTR). The INTERRUPT itself gets no reply, unless
// the request is unknown: EAGAIN makes the kernel queue it again, and never
// ENOSYS, which would disable interrupts for the whole connection.
func (s *Server) interrupt(h fuse.InHeader, body []byte) {
	in, err := wire.DecodeInterruptIn(h, body)
	if err != nil {
		s.log.Warn("cuse: dropping malformed INTERRUPT", "unique", h.Unique, "err", err)
		return
	}
	if s.inflight.cancel(in.Unique, errInterrupted) {
		return
	}
	s.writeReply(h.Unique, -int32(unix.EAGAIN), nil, nil)
}

func (s *Server) serve(r *request) {
	defer s.handlers.Done()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("cuse: device panicked", "op", r.op(), "unique", r.hdr.Unique, "panic", p, "stack", string(debug.Stack()))
			if !r.done {
				s.reply(r, -int32(unix.EIO), nil, nil)
			}
		}
	}()
	switch r.op() {
	case wire.FUSE_OPEN:
		s.open(r)
	case wire.FUSE_READ:
		s.read(r)
	case wire.FUSE_WRITE:
		s.write(r)
	case wire.FUSE_POLL:
		s.poll(r)
	case wire.FUSE_RELEASE:
		s.release(r)
	case wire.FUSE_IOCTL:
		// The ucm ABI has no ioctls; ENOTTY is what the kernel answers
		// for a driver without unlocked_ioctl.
		s.reply(r, -int32(unix.ENOTTY), nil, nil)
	default:
		// Only for opcodes CUSE never sends; ENOSYS would disable POLL or
		// INTERRUPT connection-wide, but those never get here.
		s.log.Debug("cuse: unsupported request", "op", r.op(), "unique", r.hdr.Unique)
		s.reply(r, -int32(unix.ENOSYS), nil, nil)
	}
}

// bad answers a request whose framing was fine but whose body is not: the
// unique can be trusted, and an answer keeps the client from hanging.
func (s *Server) bad(r *request, err error) {
	s.log.Warn("cuse: malformed request", "op", r.op(), "unique", r.hdr.Unique, "err", err)
	s.reply(r, -int32(unix.EIO), nil, nil)
}

func (s *Server) lookup(r *request, fh uint64) *file {
	s.filesMu.RLock()
	f := s.files[fh]
	s.filesMu.RUnlock()
	if f == nil {
		s.log.Warn("cuse: request for an unknown file handle", "op", r.op(), "unique", r.hdr.Unique, "fh", fh)
		s.reply(r, -int32(unix.EBADF), nil, nil)
	}
	return f
}

func (s *Server) open(r *request) {
	in, err := wire.DecodeOpenIn(r.hdr, r.body)
	if err != nil {
		s.bad(r, err)
		return
	}
	if s.stopping.Load() {
		// Shutting down: no new files (and the open that wakes a
		// reader blocked in read(2), see wakeReaders, gets this).
		s.reply(r, -int32(unix.ENODEV), nil, nil)
		return
	}
	s.filesMu.Lock()
	s.nextFh++
	f := &file{s: s, fh: s.nextFh, openFlags: in.Flags}
	s.filesMu.Unlock()
	h, err := s.dev.Open(r, r.public(in.Flags), f)
	if err == nil && h == nil {
		err = errors.New("Device.Open returned no Handle and no error")
	}
	if err != nil {
		// Never ENOSYS: the kernel would take it as "no OPEN needed" and
		// open every later file of the node without asking us.
		s.reply(r, notENOSYS(s.errno(r, err)), nil, nil)
		return
	}
	f.h = h
	s.filesMu.Lock()
	s.files[f.fh] = f
	s.filesMu.Unlock()
	var out [wire.SizeofOpenOut]byte
	// open_flags 0: CUSE ignores FOPEN_* (no fuse_finish_open); all I/O
	// is direct.
	wire.AppendOpenOut(out[:0], fuse.OpenOut{Fh: f.fh})
	if err := s.reply(r, 0, out[:], nil); err != nil {
		// The kernel dropped the open (the caller died, or the connection
		// is gone), so it will never send RELEASE for this fh.
		s.filesMu.Lock()
		delete(s.files, f.fh)
		s.filesMu.Unlock()
		f.release(context.Background())
	}
}

func (s *Server) read(r *request) {
	in, err := wire.DecodeReadIn(r.hdr, r.body)
	if err != nil {
		s.bad(r, err)
		return
	}
	if in.Size > s.cfg.MaxRead {
		s.bad(r, fmt.Errorf("read of %d bytes exceeds max_read %d", in.Size, s.cfg.MaxRead))
		return
	}
	f := s.lookup(r, in.Fh)
	if f == nil {
		return
	}
	dst := make([]byte, in.Size)
	req := r.public(in.Flags)
	req.Offset = in.Offset
	n, err := f.h.Read(r, req, dst)
	if err == nil && (n < 0 || n > len(dst)) {
		err = fmt.Errorf("Handle.Read returned %d for a %d-byte buffer", n, len(dst))
	}
	if err != nil {
		s.reply(r, s.errno(r, err), nil, nil)
		return
	}
	s.reply(r, 0, nil, dst[:n])
}

func (s *Server) write(r *request) {
	in, err := wire.DecodeWriteIn(r.hdr, r.body)
	if err != nil {
		s.bad(r, err)
		return
	}
	data := r.body[wire.SizeofWriteIn:]
	if int(in.Size) != len(data) {
		s.bad(r, fmt.Errorf("write_in.size %d, but %d bytes of data", in.Size, len(data)))
		return
	}
	f := s.lookup(r, in.Fh)
	if f == nil {
		return
	}
	req := r.public(in.Flags)
	req.Offset = in.Offset
	n, err := f.h.Write(r, req, data)
	if err == nil && (n < 0 || n > len(data)) {
		// The kernel fails the write(2) with EIO on size > count anyway.
		err = fmt.Errorf("Handle.Write returned %d for %d bytes", n, len(data))
	}
	if err != nil {
		s.reply(r, s.errno(r, err), nil, nil)
		return
	}
	var out [wire.SizeofWriteOut]byte
	wire.AppendWriteOut(out[:0], fuse.WriteOut{Size: uint32(n)})
	s.reply(r, 0, out[:], nil)
}

func (s *Server) poll(r *request) {
	var in wire.PollIn
	if err := in.Decode(r.body); err != nil {
		s.bad(r, err)
		return
	}
	f := s.lookup(r, in.Fh)
	if f == nil {
		return
	}
	if in.Flags&wire.FUSE_POLL_SCHEDULE_NOTIFY != 0 {
		f.arm(in.Kh)
	}
	// fuse_poll_in carries no f_flags; the open flags are the best we have.
	revents, err := f.h.Poll(r, r.public(f.openFlags), in.Events)
	if err != nil {
		// Never ENOSYS from here: the kernel would stop polling the
		// connection for good. Other errors give the poller EPOLLERR.
		s.reply(r, notENOSYS(s.errno(r, err)), nil, nil)
		return
	}
	var out [wire.SizeofPollOut]byte
	wire.PollOut{Revents: revents}.Append(out[:0])
	s.reply(r, 0, out[:], nil)
}

// release must answer promptly and always with success: the closing task
// waits uninterruptibly, and the kernel ignores the result anyway.
func (s *Server) release(r *request) {
	in, err := wire.DecodeReleaseIn(r.hdr, r.body)
	if err != nil {
		s.bad(r, err)
		return
	}
	s.filesMu.Lock()
	f := s.files[in.Fh]
	delete(s.files, in.Fh)
	s.filesMu.Unlock()
	if f == nil {
		s.log.Warn("cuse: RELEASE of an unknown file handle", "unique", r.hdr.Unique, "fh", in.Fh)
	} else {
		// Not r: the kernel interrupts a RELEASE like any request (its
		// first wait is interruptible, and the closing task may have a
		// signal pending), and Release must clean up all the same.
		f.release(context.Background())
	}
	s.reply(r, 0, nil, nil)
}

// notENOSYS is errno e, EIO for ENOSYS: for OPEN and POLL the kernel takes
// ENOSYS as "not implemented" and stops sending them on the connection.
func notENOSYS(e int32) int32 {
	if e == -int32(unix.ENOSYS) {
		return -int32(unix.EIO)
	}
	return e
}

// errno turns a Device or Handle error into the negative errno of a reply.
func (s *Server) errno(r *request, err error) int32 {
	var e unix.Errno
	if errors.As(err, &e) {
		if e > 0 && e <= wire.MaxErrno {
			return -int32(e)
		}
		s.log.Error("cuse: device returned an errno the kernel rejects", "op", r.op(), "unique", r.hdr.Unique, "err", err)
		return -int32(unix.EIO)
	}
	if cause := r.cancelCause(); cause != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		switch cause {
		case errInterrupted:
			// The old driver's -ERESTARTSYS; CUSE cannot restart
			// system calls (the kernel rejects errors <= -512).
			return -int32(unix.EINTR)
		case errShutdown:
			// What the kernel itself answers for requests a dying
			// daemon had read.
			return -int32(unix.ECONNABORTED)
		}
	}
	s.log.Error("cuse: device error", "op", r.op(), "unique", r.hdr.Unique, "err", err)
	return -int32(unix.EIO)
}

// reply answers r with one message and retires it. A nonzero status is
// sent header-only, as the kernel requires.
func (s *Server) reply(r *request, status int32, fixed, payload []byte) error {
	r.done = true
	if status != 0 {
		fixed, payload = nil, nil
	}
	err := s.writeReply(r.hdr.Unique, status, fixed, payload)
	s.inflight.remove(r.hdr.Unique)
	return err
}

// writeReply writes one reply: header, fixed reply struct, payload.
func (s *Server) writeReply(unique uint64, status int32, fixed, payload []byte) error {
	err := s.ch.writev(fuse.OutHeader{Status: status, Unique: unique}, fixed, payload)
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOENT):
		// The kernel no longer waits for this request: it was aborted
		// or interrupted and already completed. Normal.
		s.log.Debug("cuse: reply to a request the kernel dropped", "unique", unique)
	case errors.Is(err, os.ErrClosed):
		// A handler that outlived shutdown (shutdownGrace): the kernel
		// aborted its request with the channel.
		s.log.Debug("cuse: reply after the channel was closed", "unique", unique)
	default:
		s.log.Warn("cuse: writing reply", "unique", unique, "err", err)
	}
	return err
}

// notifyPoll sends FUSE_NOTIFY_POLL: the kernel wakes the file whose poll
// handle is kh, and its pollers poll again. Unknown handles are ignored.
func (s *Server) notifyPoll(kh uint64) {
	var body [wire.SizeofNotifyPollWakeupOut]byte
	wire.NotifyPollWakeupOut{Kh: kh}.Append(body[:0])
	// Unique 0 and a positive code in the error field mark a notification.
	if err := s.ch.writev(fuse.OutHeader{Status: wire.FUSE_NOTIFY_POLL}, body[:], nil); err != nil {
		s.log.Warn("cuse: sending poll wake-up", "kh", kh, "err", err)
	}
}
