package cusetest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/internal/wire"
)

// Reply is the server's answer to one request.
type Reply struct {
	Errno unix.Errno // 0 on success
	Body  []byte     // after the out header; empty when Errno != 0
}

// Size decodes the fuse_write_out of a WRITE reply.
func (r Reply) Size() int {
	out, err := wire.DecodeWriteOut(r.Body)
	if err != nil {
		return -1
	}
	return int(out.Size)
}

// Fh decodes the fuse_open_out of an OPEN reply.
func (r Reply) Fh() uint64 {
	out, _ := wire.DecodeOpenOut(r.Body)
	return out.Fh
}

// Revents decodes the fuse_poll_out of a POLL reply.
func (r Reply) Revents() uint32 {
	var out wire.PollOut
	_ = out.Decode(r.Body)
	return out.Revents
}

// Pending is a request sent and maybe not yet answered.
type Pending struct {
	k      *Kernel
	Unique uint64
	Opcode uint32
	want   replyShape
	done   chan struct{}
	reply  Reply
	sent   bool // written to the server; guarded by the Kernel's mu
}

// Done is closed when the reply has arrived.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Answered reports whether the reply has arrived, without waiting.
func (p *Pending) Answered() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitFor waits up to d for the reply and reports whether it came; it
// never fails the test, so it may be called from any goroutine.
func (p *Pending) WaitFor(d time.Duration) (Reply, bool) {
	if p.Answered() {
		return p.reply, true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.reply, true
	case <-t.C:
		return Reply{}, false
	}
}

// Wait waits for the reply, failing the test after the kernel's timeout.
// The failure says where the request was stuck (see stuck), so that a
// rare one seen on a loaded machine can still be told apart: a daemon
// that lost it, one that is slow, or this fake kernel.
func (p *Pending) Wait() Reply {
	p.k.t.Helper()
	if r, ok := p.WaitFor(p.k.timeout); ok {
		return r
	}
	p.k.t.Fatalf("cusetest: no reply to %v unique %d after %v: %s", wire.Opcode(p.Opcode), p.Unique, p.k.timeout, p.stuck())
	return Reply{}
}

// stuck describes a request Wait gave up on: whether the server has read
// it, whether replies wait unread by readLoop, and whether the reply comes
// within another timeout after all. It logs every goroutine's stack first,
// taken at the timeout, before anything moves on.
func (p *Pending) stuck() string {
	k := p.k
	stacks := make([]byte, 1<<20)
	stacks = stacks[:runtime.Stack(stacks, true)]
	k.t.Logf("cusetest: goroutines at the timeout of unique %d:\n%s", p.Unique, stacks)
	var unread, replies int
	var qerr error
	if rc, err := k.conn.SyscallConn(); err != nil {
		qerr = err
	} else if err := rc.Control(func(fd uintptr) {
		// AF_UNIX: SIOCOUTQ counts what this end sent that the server
		// has not consumed (skb truesize), SIOCINQ the reply bytes this
		// end has not read.
		if unread, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); qerr == nil {
			replies, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		}
	}); err != nil {
		qerr = err
	}
	var where string
	switch {
	case qerr != nil:
		where = fmt.Sprintf("socket queues unknown (%v)", qerr)
	case unread > 0:
		where = fmt.Sprintf("requests not yet read by the server (%d bytes of socket buffer)", unread)
	default:
		where = "the server has read every request"
	}
	if replies > 0 {
		where += fmt.Sprintf("; %d reply bytes wait unread by the fake kernel", replies)
	}
	start := time.Now()
	if _, ok := p.WaitFor(k.timeout); ok {
		return fmt.Sprintf("%s; the reply came %v after the timeout (late, not lost)", where, time.Since(start).Round(time.Millisecond))
	}
	return fmt.Sprintf("%s; no reply in a further %v either", where, k.timeout)
}

// Header describes a request to Send.
type Header struct {
	Opcode uint32
	// Unique is the request id; 0 picks the next even id, as the kernel
	// does. Odd ids are the kernel's INTERRUPT ids.
	Unique uint64
	NodeID uint64
	Caller cuse.Caller
}

func encode(op uint32, unique, nodeID uint64, c cuse.Caller, body ...[]byte) []byte {
	n := wire.SizeofInHeader
	for _, b := range body {
		n += len(b)
	}
	h := fuse.InHeader{Length: uint32(n), Opcode: op, Unique: unique, NodeId: nodeID,
		Caller: fuse.Caller{Owner: fuse.Owner{Uid: c.Uid, Gid: c.Gid}, Pid: uint32(c.Pid)}}
	msg := wire.AppendInHeader(make([]byte, 0, n), &h)
	for _, b := range body {
		msg = append(msg, b...)
	}
	return msg
}

func (k *Kernel) write(msg []byte) error {
	_, err := k.conn.Write(msg)
	return err
}

func (k *Kernel) allocUnique() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	u := k.nextUnique
	k.nextUnique += 2
	return u
}

// Send sends a request made of h and body and returns it pending. The
// reply must be a bare header or carry any body; use the typed helpers to
// have the reply checked against the opcode's reply struct.
func (k *Kernel) Send(h Header, body ...[]byte) *Pending {
	return k.send(h, replyShape{exact: -1, max: wire.CUSE_INIT_INFO_MAX}, body...)
}

// replyShape is what the kernel accepts as the body of a successful reply.
type replyShape struct {
	exact int // the size of the reply struct; -1 for variable-length replies
	max   int // bound for variable-length replies
	count int // WRITE: bytes sent; the reply must not claim more
}

func (k *Kernel) send(h Header, want replyShape, body ...[]byte) *Pending {
	k.t.Helper()
	if h.Unique == 0 {
		h.Unique = k.allocUnique()
	}
	p := &Pending{k: k, Unique: h.Unique, Opcode: h.Opcode, want: want, done: make(chan struct{})}
	k.mu.Lock()
	// The kernel resends an INTERRUPT the daemon answered EAGAIN, with
	// the same id; anything else reusing a pending id is a test bug.
	if k.pending[h.Unique] != nil && h.Opcode != OpInterrupt {
		k.mu.Unlock()
		k.t.Fatalf("cusetest: unique %d already pending", h.Unique)
	}
	if k.aborted {
		k.mu.Unlock()
		p.reply = Reply{Errno: unix.ENOTCONN}
		close(p.done)
		return p
	}
	k.pending[h.Unique] = p
	delete(k.answered, h.Unique)
	k.mu.Unlock()
	err := k.write(encode(h.Opcode, h.Unique, h.NodeID, h.Caller, body...))
	k.mu.Lock()
	mine := k.pending[h.Unique] == p // not answered, nor taken by an abort
	p.sent = err == nil
	if mine && (err != nil || k.aborted) {
		delete(k.pending, h.Unique)
	}
	aborted := k.aborted
	k.mu.Unlock()
	switch {
	case err == nil && mine && aborted:
		// Written before the server closed its end, and left alone by
		// the abort that ran while it was being written: in flight.
		k.answerAborted(p, unix.ECONNABORTED)
	case err == nil:
	case errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET):
		// The server closed its end before this request reached it and
		// before readLoop saw the close. The kernel aborts the connection
		// within the server's close (fuse_abort_conn), so a request sent
		// after it fails ENOTCONN, and those in flight ECONNABORTED.
		k.abortPending()
		k.answerAborted(p, unix.ENOTCONN)
	default:
		k.t.Fatalf("cusetest: sending %v: %v", wire.Opcode(h.Opcode), err)
	}
	return p
}

// abortPending is what the kernel does once the server has closed the
// channel (fuse_abort_conn): every request still unanswered fails with
// ECONNABORTED, and every one sent later with ENOTCONN. A request still
// being written is left to its sender, which learns from the write
// whether it went out before the close.
func (k *Kernel) abortPending() {
	k.mu.Lock()
	k.aborted = true
	var ps []*Pending
	for u, p := range k.pending {
		if p.sent {
			ps = append(ps, p)
			delete(k.pending, u)
		}
	}
	k.mu.Unlock()
	for _, p := range ps {
		k.answerAborted(p, unix.ECONNABORTED)
	}
}

// answerAborted answers p, taken out of the pending table, with errno;
// the kernel drops its INTERRUPTs with the requests.
func (k *Kernel) answerAborted(p *Pending, errno unix.Errno) {
	if p.Opcode == OpInterrupt {
		return
	}
	p.reply = Reply{Errno: errno}
	close(p.done)
}

// SendRaw writes msg to the server as is: malformed requests for
// robustness tests. Nothing is expected back.
func (k *Kernel) SendRaw(msg []byte) {
	k.t.Helper()
	if err := k.write(msg); err != nil {
		k.t.Fatalf("cusetest: sending raw message: %v", err)
	}
}

// Interrupt sends FUSE_INTERRUPT for the request with id unique, as the
// kernel does when the caller gets a signal. The server answers the
// original request (normally EINTR) and not the interrupt, unless it does
// not know the request: then, as the kernel does, the INTERRUPT is sent
// again while the request is unanswered, and the returned Pending gets
// EAGAIN only once it is not pending (or never was).
func (k *Kernel) Interrupt(unique uint64) *Pending {
	in := fuse.InterruptIn{Unique: unique}
	return k.send(Header{Opcode: OpInterrupt, Unique: unique | wire.FUSE_INT_REQ_BIT}, replyShape{},
		wire.AppendInterruptIn(nil, &in))
}

// resendInterrupt writes the INTERRUPT with id unique again; its Pending
// stays in place. It runs on its own goroutine so that readLoop never
// blocks writing while the server blocks writing a reply to it.
func (k *Kernel) resendInterrupt(unique uint64) {
	defer k.resends.Done()
	in := fuse.InterruptIn{Unique: unique &^ wire.FUSE_INT_REQ_BIT}
	if err := k.write(encode(OpInterrupt, unique, 0, cuse.Caller{}, wire.AppendInterruptIn(nil, &in))); err != nil && !k.closing.Load() {
		k.violate("resending INTERRUPT %d: %v", unique, err)
	}
}

// Sync returns once the server has read everything sent before it and
// every reply or notification written before it reached the kernel: it
// round-trips a request the server answers ENOSYS without consulting the
// device (FUSE_INIT, which never reaches a CUSE daemon).
func (k *Kernel) Sync() {
	k.t.Helper()
	r := k.send(Header{Opcode: uint32(wire.FUSE_INIT)}, replyShape{}).Wait()
	if r.Errno != unix.ENOSYS {
		k.t.Fatalf("cusetest: Sync got %v, want ENOSYS", r.Errno)
	}
}

// Open opens the device as caller c with open flags (O_RDWR, O_NONBLOCK,
// ...). On success it returns the open file, carrying the fh the server
// chose and a fresh poll handle.
func (k *Kernel) Open(c cuse.Caller, flags uint32) (*File, unix.Errno) {
	k.t.Helper()
	r := k.OpenAsync(c, flags).Wait()
	if r.Errno != 0 {
		return nil, r.Errno
	}
	k.mu.Lock()
	kh := k.nextKh
	k.nextKh++
	k.mu.Unlock()
	return &File{k: k, Fh: r.Fh(), Kh: kh, Flags: flags}, 0
}

// OpenAsync sends OPEN and returns it pending; Reply.Fh has the result.
func (k *Kernel) OpenAsync(c cuse.Caller, flags uint32) *Pending {
	in := fuse.OpenIn{Flags: flags}
	return k.send(Header{Opcode: OpOpen, Caller: c}, replyShape{exact: wire.SizeofOpenOut}, wire.AppendOpenIn(nil, &in))
}

// File is a file opened on the fake kernel.
type File struct {
	k     *Kernel
	Fh    uint64 // the server's file handle
	Kh    uint64 // the kernel's poll handle for this file
	mu    sync.Mutex
	Flags uint32 // f_flags, sent with every READ and WRITE; see SetFlags
}

// SetFlags changes the file's f_flags, as fcntl(F_SETFL) does: the server
// learns of it only from later requests.
func (f *File) SetFlags(flags uint32) {
	f.mu.Lock()
	f.Flags = flags
	f.mu.Unlock()
}

func (f *File) flags() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Flags
}

// Write writes data as caller c and returns the byte count or the errno.
func (f *File) Write(c cuse.Caller, data []byte) (int, unix.Errno) {
	f.k.t.Helper()
	r := f.WriteAsync(c, data).Wait()
	if r.Errno != 0 {
		return 0, r.Errno
	}
	return r.Size(), 0
}

// Kernel is the fake kernel f belongs to.
func (f *File) Kernel() *Kernel { return f.k }

// WriteAsync sends WRITE and returns it pending; Reply.Size has the result.
// data must fit the server's max_write: the kernel splits a longer write(2)
// into several WRITE requests (fuse_direct_io), and a request longer than
// the server's buffer never reaches it.
func (f *File) WriteAsync(c cuse.Caller, data []byte) *Pending {
	return f.WriteAsyncAt(c, data, 0)
}

// WriteAsyncAt is WriteAsync at offset off of the write(2) it is part of:
// the kernel's second request of a split write is at max_write.
func (f *File) WriteAsyncAt(c cuse.Caller, data []byte, off uint64) *Pending {
	if max := f.k.Init.MaxWrite; max != 0 && len(data) > int(max) {
		f.k.t.Errorf("cusetest: WRITE of %d bytes, over max_write %d: the kernel would split it", len(data), max)
	}
	in := fuse.WriteIn{Fh: f.Fh, Offset: off, Size: uint32(len(data)), Flags: f.flags()}
	return f.k.send(Header{Opcode: OpWrite, Caller: c}, replyShape{exact: wire.SizeofWriteOut, count: len(data)},
		wire.AppendWriteIn(nil, &in), data)
}

// Read reads up to n bytes as caller c.
func (f *File) Read(c cuse.Caller, n int) ([]byte, unix.Errno) {
	f.k.t.Helper()
	r := f.ReadAsync(c, n).Wait()
	return r.Body, r.Errno
}

// ReadAsync sends READ for n bytes and returns it pending; Reply.Body has
// the data.
func (f *File) ReadAsync(c cuse.Caller, n int) *Pending {
	in := fuse.ReadIn{Fh: f.Fh, Size: uint32(n), Flags: f.flags()}
	return f.k.send(Header{Opcode: OpRead, Caller: c}, replyShape{exact: -1, max: n}, wire.AppendReadIn(nil, &in))
}

// Poll polls for events as a caller that will wait
// (FUSE_POLL_SCHEDULE_NOTIFY set) and returns the ready events.
func (f *File) Poll(c cuse.Caller, events uint32) (uint32, unix.Errno) {
	f.k.t.Helper()
	r := f.PollAsync(c, events, wire.FUSE_POLL_SCHEDULE_NOTIFY).Wait()
	return r.Revents(), r.Errno
}

// PollAsync sends POLL with the given fuse_poll_in.flags (0 for a caller
// that will not wait) and returns it pending; Reply.Revents has the result.
func (f *File) PollAsync(c cuse.Caller, events, flags uint32) *Pending {
	in := wire.PollIn{Fh: f.Fh, Kh: f.Kh, Flags: flags, Events: events}
	return f.k.send(Header{Opcode: OpPoll, Caller: c}, replyShape{exact: wire.SizeofPollOut}, in.Append(nil))
}

// Ioctl sends an IOCTL as caller c.
func (f *File) Ioctl(c cuse.Caller, cmd uint32, arg uint64) unix.Errno {
	f.k.t.Helper()
	in := fuse.IoctlIn{Fh: f.Fh, Cmd: cmd, Arg: arg}
	return f.k.send(Header{Opcode: OpIoctl, Caller: c}, replyShape{exact: -1}, wire.AppendIoctlIn(nil, &in)).Wait().Errno
}

// Release closes the file the way the kernel does after the last close:
// no caller credentials, and the reply is awaited.
func (f *File) Release() unix.Errno {
	f.k.t.Helper()
	return f.ReleaseAsync().Wait().Errno
}

// ReleaseAsync sends RELEASE and returns it pending.
func (f *File) ReleaseAsync() *Pending {
	in := fuse.ReleaseIn{Fh: f.Fh, Flags: f.flags()}
	return f.k.send(Header{Opcode: OpRelease}, replyShape{}, wire.AppendReleaseIn(nil, &in))
}

// readLoop collects replies and notifications, checking each as
// fuse_dev_do_write does.
func (k *Kernel) readLoop() {
	defer close(k.readDone)
	buf := make([]byte, wire.SizeofOutHeader+max(wire.CUSE_INIT_INFO_MAX, cuse.DefaultMaxIO, 1<<20))
	for {
		n, err := k.conn.Read(buf)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				k.violate("reading from the server: %v", err)
			}
			k.abortPending()
			return
		}
		k.receive(append([]byte(nil), buf[:n]...))
	}
}

func (k *Kernel) receive(msg []byte) {
	oh, err := wire.DecodeOutHeader(msg)
	if err != nil {
		k.violate("%v", err)
		return
	}
	body := msg[wire.SizeofOutHeader:]
	if int(oh.Length) != len(msg) {
		k.violate("out header length %d, message %d bytes (kernel: EINVAL)", oh.Length, len(msg))
		return
	}
	if oh.Unique == 0 {
		k.notify(oh, body)
		return
	}
	if oh.Status > 0 || oh.Status <= -512 {
		k.violate("unique %d: error %d outside (-512, 0] (kernel: EINVAL)", oh.Unique, oh.Status)
		return
	}
	k.mu.Lock()
	p := k.pending[oh.Unique]
	if p != nil && p.Opcode == OpInterrupt && oh.Status == -int32(unix.EAGAIN) && len(body) == 0 &&
		k.pending[oh.Unique&^wire.FUSE_INT_REQ_BIT] != nil {
		// As fuse_dev_do_write does: EAGAIN to an INTERRUPT whose request
		// is still unanswered queues the INTERRUPT again. A server with
		// several readers may read the INTERRUPT before it has registered
		// the request another reader read just before.
		k.resends.Add(1)
		k.mu.Unlock()
		go k.resendInterrupt(oh.Unique)
		return
	}
	delete(k.pending, oh.Unique)
	twice := k.answered[oh.Unique]
	k.answered[oh.Unique] = true
	k.mu.Unlock()
	if p == nil {
		if twice {
			k.violate("unique %d answered twice", oh.Unique)
		} else {
			k.violate("reply to unique %d, which was never sent (kernel: ENOENT)", oh.Unique)
		}
		return
	}
	r := Reply{Errno: unix.Errno(-oh.Status), Body: body}
	switch {
	case oh.Status != 0 && len(body) != 0:
		k.violate("unique %d: error reply with a %d-byte body", oh.Unique, len(body))
	case p.Opcode == OpInterrupt && oh.Status != -int32(unix.EAGAIN):
		// ENOSYS would set fc->no_interrupt for good; 0 is meaningless.
		k.violate("INTERRUPT %d answered %d; only EAGAIN (or no reply) is allowed", oh.Unique, oh.Status)
	case oh.Status == 0 && p.want.exact >= 0 && len(body) != p.want.exact:
		k.violate("%v unique %d: %d-byte reply, want %d (kernel: EINVAL)", wire.Opcode(p.Opcode), oh.Unique, len(body), p.want.exact)
	case oh.Status == 0 && p.want.exact < 0 && len(body) > p.want.max:
		k.violate("%v unique %d: %d-byte reply exceeds %d (kernel: EINVAL)", wire.Opcode(p.Opcode), oh.Unique, len(body), p.want.max)
	case p.Opcode == OpWrite && oh.Status == 0 && r.Size() > p.want.count:
		k.violate("WRITE unique %d: claims %d of %d bytes written (kernel: EIO)", oh.Unique, r.Size(), p.want.count)
	}
	p.reply = r
	close(p.done)
}

func (k *Kernel) notify(oh fuse.OutHeader, body []byte) {
	if oh.Status != wire.FUSE_NOTIFY_POLL {
		k.violate("notification code %d, want only FUSE_NOTIFY_POLL", oh.Status)
		return
	}
	var w wire.NotifyPollWakeupOut
	err := w.Decode(body)
	if err != nil || len(body) != wire.SizeofNotifyPollWakeupOut {
		k.violate("FUSE_NOTIFY_POLL with a %d-byte body", len(body))
		return
	}
	select {
	case k.notes <- w.Kh:
	default:
		k.violate("more than %d unread poll notifications", cap(k.notes))
	}
}
