package cuse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse/internal/wire"
)

// DevicePath is the kernel's CUSE channel.
const DevicePath = "/dev/cuse"

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("cuse: server closed")

// Server serves one CUSE device on one channel.
type Server struct {
	ch     *channel
	dev    Device
	log    *slog.Logger
	cfg    Config
	minor  uint32 // negotiated protocol minor
	bufLen int    // read buffer size the kernel requires

	handlers sync.WaitGroup

	// The readers (see reader).
	idle     atomic.Int32 // readers in (or on their way to) read(2)
	maxIdle  int32        // more idle readers than this exit
	stopping atomic.Bool
	readers  sync.WaitGroup
	stuck    bool         // readers could not be woken at shutdown: keep the channel open
	opening  atomic.Int32 // wakeReaders' opens of the node in flight

	// spare keeps what readers that exited read into, for the next ones
	// to start (see readerState).
	spareMu   sync.Mutex
	spare     []*readerState
	spareBufs [][]byte // read buffers of readers whose handler waits (DetachBuffer)
	made      int      // reader states allocated, and dropped (not kept): for the test
	dropped   int
	bufsMade  int // read buffers allocated: for the test

	inflight inflightTable

	// Every request but OPEN looks its file up: the lookups share the
	// lock, so a reader preempted inside one holds up no other.
	filesMu sync.RWMutex
	files   map[uint64]*file // by fh
	nextFh  uint64

	mu      sync.Mutex
	serving bool
	closed  bool
	done    chan struct{} // closed when Serve has shut down
	readErr chan error    // why the reader stopped
}

// Causes of request context cancellation; they pick the client's errno.
var (
	errInterrupted = errors.New("interrupted by the client")
	errShutdown    = errors.New("server shutting down")
)

// Open opens /dev/cuse and registers the device described by cfg. It
// returns once the kernel accepted the registration, when the device node
// exists (udev may still be adjusting its mode). Call Serve next.
func Open(ctx context.Context, cfg Config, dev Device) (*Server, error) {
	fd, err := unix.Open(DevicePath, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s (is the cuse module loaded?): %w", DevicePath, err)
	}
	s, err := NewServer(ctx, os.NewFile(uintptr(fd), DevicePath), cfg, dev)
	if err != nil {
		return nil, err // NewServer closed the fd
	}
	// The kernel validates our CUSE_INIT reply inside our write and, on
	// failure (a duplicate name, a busy device number), aborts the
	// connection without failing the write. An aborted channel polls
	// EPOLLERR (fuse_dev_poll); a live one never does.
	if err := s.ch.checkConnected(); err != nil {
		s.Close()
		return nil, fmt.Errorf("cuse init of %s: kernel rejected the device (name or number in use?): %w", cfg.DevName, err)
	}
	return s, nil
}

// NewServer performs the CUSE_INIT handshake on an already open channel f,
// which must be in non-blocking mode (O_NONBLOCK) so that the handshake can
// honour ctx through Go's runtime poller. Package cusetest uses this with a
// socketpair. The Server owns f from then on, also on error; after the
// handshake it keeps a duplicate of f's descriptor and closes f itself.
func NewServer(ctx context.Context, f *os.File, cfg Config, dev Device) (*Server, error) {
	if err := cfg.validate(); err != nil {
		f.Close()
		return nil, err
	}
	cfg = cfg.withDefaults()
	ch, err := newChannel(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &Server{
		ch:      ch,
		dev:     dev,
		log:     cfg.Logger.With("dev", cfg.DevName),
		cfg:     cfg,
		bufLen:  max(wire.FUSE_MIN_READ_BUFFER, wire.SizeofMaxRequestHeader+int(cfg.MaxWrite)),
		maxIdle: int32(cfg.IdleReaders),
		files:   make(map[uint64]*file),
		done:    make(chan struct{}),
		readErr: make(chan error, 1),
	}
	s.inflight.init()
	if err := s.init(ctx); err != nil {
		f.Close()
		return nil, fmt.Errorf("cuse init of %s on %s: %w", cfg.DevName, f.Name(), err)
	}
	if err := ch.detach(); err != nil {
		ch.close()
		return nil, fmt.Errorf("cuse %s on %s: %w", cfg.DevName, ch.name, err)
	}
	return s, nil
}

// MaxBlockedReaders is how many of the Server's threads can be blocked in
// read(2) on the channel at once (idle readers). Each such thread holds
// one of the Go runtime's Ps while it waits: a process that leaves no P
// idle makes the runtime's monitor retake one every 20 µs, which costs a
// busy daemon a thread wake-up per request. cmd/ucmd raises GOMAXPROCS
// by the sum of its Servers' MaxBlockedReaders (docs/perf.md).
func (s *Server) MaxBlockedReaders() int { return int(s.maxIdle) + 1 }

// ProtocolMinor is the FUSE protocol minor version agreed with the kernel.
func (s *Server) ProtocolMinor() uint32 { return s.minor }

// init reads CUSE_INIT, which the kernel queues as soon as the channel is
// opened, and answers it.
func (s *Server) init(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		s.ch.f.SetReadDeadline(dl)
	}
	expired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		s.ch.f.SetReadDeadline(time.Unix(1, 0))
		close(expired)
	})
	buf := make([]byte, s.bufLen)
	n, err := s.ch.read(buf)
	if !stop() {
		// The deadline is being set; let that finish before clearing it,
		// or the read loop would find it expired forever.
		<-expired
	}
	s.ch.f.SetReadDeadline(time.Time{})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for CUSE_INIT: %w", context.Cause(ctx))
		}
		return fmt.Errorf("reading CUSE_INIT: %w", err)
	}
	var h fuse.InHeader
	body, err := parseHeader(&h, buf[:n])
	if err != nil {
		return err
	}
	if op := wire.Opcode(h.Opcode); op != wire.CUSE_INIT {
		return fmt.Errorf("first request is %v, want CUSE_INIT", op)
	}
	var in wire.CuseInitIn
	if err := in.Decode(body); err != nil {
		return err
	}
	if in.Major != wire.FUSE_KERNEL_VERSION || in.Minor < wire.CUSE_MIN_MINOR {
		// The kernel aborts the connection on any error reply.
		s.writeReply(h.Unique, -int32(unix.EPROTO), nil, nil)
		return fmt.Errorf("kernel speaks FUSE %d.%d, want %d.%d or later",
			in.Major, in.Minor, wire.FUSE_KERNEL_VERSION, wire.CUSE_MIN_MINOR)
	}
	s.minor = min(in.Minor, wire.FUSE_KERNEL_MINOR_VERSION)
	out := wire.CuseInitOut{
		Major:    wire.FUSE_KERNEL_VERSION,
		Minor:    s.minor,
		MaxRead:  s.cfg.MaxRead,
		MaxWrite: s.cfg.MaxWrite,
		DevMajor: s.cfg.Major,
		DevMinor: s.cfg.Minor,
		// Unrestricted ioctls, which the kernel always offers: it then
		// sends every ioctl as it comes, with no copy of the argument,
		// and our ENOTTY reaches the caller whatever the pointer, as from
		// a driver without unlocked_ioctl. Restricted, it first copies
		// _IOC_SIZE(cmd) bytes in, and a bad pointer got EFAULT.
		Flags: in.Flags & wire.CUSE_UNRESTRICTED_IOCTL,
	}
	info := s.cfg.info()
	body = out.Append(make([]byte, 0, wire.SizeofCuseInitOut))
	if err := s.writeReply(h.Unique, 0, body, info); err != nil {
		return fmt.Errorf("replying to CUSE_INIT: %w", err)
	}
	return nil
}

// parseHeader checks the framing of one message as read from the channel.
// A message failing it cannot be answered safely (its unique may be
// garbage), so it is dropped.
// It decodes the header into h and returns the body.
func parseHeader(h *fuse.InHeader, msg []byte) ([]byte, error) {
	if err := wire.DecodeInHeaderTo(h, msg); err != nil {
		return nil, err
	}
	if int(h.Length) != len(msg) {
		return nil, fmt.Errorf("%v request: header length %d, read %d bytes", wire.Opcode(h.Opcode), h.Length, len(msg))
	}
	if h.Unique == 0 {
		// A reply with unique 0 would be taken for a notification.
		return nil, fmt.Errorf("%v request with unique 0", wire.Opcode(h.Opcode))
	}
	return msg[wire.SizeofInHeader:], nil
}

// Serve reads and serves requests until Close is called (it then returns
// ErrServerClosed) or the channel fails (the kernel aborted the connection
// or the other end went away). Before returning it cancels every request
// in flight and waits for its answer (only shutdownGrace for a handler
// stuck where no cancellation reaches), and releases the handles of files
// still open.
func (s *Server) Serve() error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrServerClosed
	case s.serving:
		s.mu.Unlock()
		return errors.New("cuse: Serve called twice")
	}
	s.serving = true
	s.mu.Unlock()

	s.idle.Store(1)
	s.readers.Add(1)
	go s.reader()
	err := <-s.readErr
	s.stop()
	// Readers serving a request finish it (cancelled) and exit; the
	// others are woken by wakeReaders.
	s.inflight.cancelAll()
	s.wakeReaders()
	s.shutdown()
	close(s.done)
	return err
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Test hooks, nil outside tests: spawnWindow runs between a reader taking
// the last idle slot and its look at stopping, spawned when it starts
// another reader.
var spawnWindow, spawned func(*Server)

// reader is one of the readers, as in libfuse's multi-threaded loop: it
// blocks in read(2) on the channel (the kernel wakes one waiting reader
// per request and hands it the request), serves the request itself, and
// reads again. Before serving, a reader that leaves no other reader idle
// starts a new one, so a request that blocks (a GET_EVENT for minutes)
// never holds up the next: every request is still served in its own
// goroutine. After serving, a reader beyond maxIdle idle ones exits. With
// one request at a time a round trip is thus two system calls, read and
// the reply's writev (and the clock read of the yield below, which blocks
// nothing), on the thread the kernel woke, with no goroutine hand-off and
// no wake-up of another thread (cross-CPU wake-ups dominate a CUSE round
// trip).
//
// Requests are registered (dispatch) after the read, not under a lock
// held across it, so an INTERRUPT read by one reader can overtake the
// registration of the request it names, read just before by another: it
// is then answered EAGAIN, which makes the kernel queue it again (see
// interrupt), and the next delivery finds the request.
func (s *Server) reader() {
	defer s.readers.Done()
	rs := s.takeReaderState()
	defer s.putReaderState(rs)
	buf, r := rs.buf, rs.r
	last := readerClock()
	for {
		n, err := s.ch.readBlocking(buf)
		if err != nil {
			s.idle.Add(-1)
			if !s.stopping.Load() {
				// ENODEV or ECONNABORTED: the kernel aborted the
				// connection (for example through
				// /sys/class/cuse/*/abort); EOF: the peer is gone.
				s.fail(fmt.Errorf("cuse %s: reading requests: %w", s.cfg.DevName, err))
			}
			return
		}
		if !s.dispatch(r, buf[:n]) {
			continue // an INTERRUPT, or dropped; still idle
		}
		if s.idle.Add(-1) == 0 {
			// The last idle reader takes this request: start another
			// before serving it. Counted idle before stopping is looked
			// at, as rejoin does: a shutdown beginning now either sees
			// a reader idle (and wakes the one started here) or is seen
			// here (and none starts). Looked at first, a reader could
			// start after wakeReaders had found none idle, and read
			// from the channel as Close closed it.
			s.idle.Add(1)
			if spawnWindow != nil {
				spawnWindow(s)
			}
			if s.stopping.Load() {
				s.idle.Add(-1)
			} else {
				s.readers.Add(1)
				if spawned != nil {
					spawned(s)
				}
				go s.reader()
			}
		}
		s.serve(r)
		if r.done {
			r.reset()
		} else { // never: serve answers every request, even on a panic
			r = &request{rs: rs}
			rs.r = r
		}
		if rs.buf == nil { // the handler waited without it
			s.reattach(rs)
		}
		buf = rs.buf
		if s.stopping.Load() || s.idle.Load() >= s.maxIdle {
			return
		}
		if now := readerClock(); now-last >= yieldAfter.Nanoseconds() {
			// Counted idle only after the yield: a yielding reader waits
			// behind whatever its P runs first, and until it is back the
			// last idle reader must still start another (see yield).
			last = now
			yield()
		}
		if !s.rejoin() {
			return
		}
	}
}

// rejoin counts a reader that has answered among the idle ones, unless
// maxIdle already are: readers that answer at once (a burst released
// together) must not all pass the look above and all come back, or more
// would wait in read(2), each holding a P, than MaxBlockedReaders says.
// Nor once the server stops: counted first and then looking, a reader
// either sees stopping or is seen idle by wakeReaders, which stopped
// first and then looks, so none reads after wakeReaders saw none idle.
func (s *Server) rejoin() bool {
	for {
		n := s.idle.Load()
		if n >= s.maxIdle {
			return false
		}
		if s.idle.CompareAndSwap(n, n+1) {
			break
		}
	}
	if s.stopping.Load() {
		s.idle.Add(-1)
		return false
	}
	return true
}

// readerState is what a reader reads into: its buffer, of bufLen bytes
// (a large object, zeroed when allocated), and its request. Readers come
// and go with the load (one starts when the last idle one takes a
// request, one exits when too many are idle), and under four client
// threads in the test VM 209 started in 16,000 commands; their buffers,
// allocated afresh, were most of the daemon's heap growth and so of its
// garbage collections. An exiting reader leaves its state in the
// Server's spare list, which holds as many as can be idle at once.
//
// A handler about to wait for long gives its reader's buffer back
// (DetachBuffer), and the reader takes one again once it has answered.
type readerState struct {
	s   *Server
	buf []byte // nil while the handler waits without it
	r   *request
}

func (s *Server) takeReaderState() *readerState {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	if rs, ok := pop(&s.spare); ok {
		return rs
	}
	s.made++
	rs := &readerState{s: s, buf: s.takeBufLocked(), r: new(request)}
	rs.r.rs = rs
	return rs
}

// takeBufLocked is a spare read buffer, or a new one.
func (s *Server) takeBufLocked() []byte {
	if b, ok := pop(&s.spareBufs); ok {
		return b
	}
	s.bufsMade++
	return make([]byte, s.bufLen)
}

// pop takes the last of a spare list, leaving nothing behind to keep
// alive.
func pop[T any](list *[]T) (T, bool) {
	var zero T
	n := len(*list)
	if n == 0 {
		return zero, false
	}
	v := (*list)[n-1]
	(*list)[n-1] = zero
	*list = (*list)[:n-1]
	return v, true
}

// reattach gives rs a buffer again after its handler detached it.
func (s *Server) reattach(rs *readerState) {
	s.spareMu.Lock()
	rs.buf = s.takeBufLocked()
	s.spareMu.Unlock()
}

// detach keeps rs's buffer for another reader while rs's handler waits.
func (s *Server) detach(rs *readerState) {
	s.spareMu.Lock()
	if len(s.spareBufs) < s.MaxBlockedReaders() {
		s.spareBufs = append(s.spareBufs, rs.buf)
	}
	s.spareMu.Unlock()
	rs.buf = nil
}

// putReaderState keeps rs for the next reader; a reader exits only after
// its request was answered, so rs.r is reset and nothing refers to it.
func (s *Server) putReaderState(rs *readerState) {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	if len(s.spare) < s.MaxBlockedReaders() {
		s.spare = append(s.spare, rs)
		return
	}
	if len(s.spareBufs) < s.MaxBlockedReaders() {
		// For a handler that waited without its buffer: it takes one
		// when it has answered.
		s.spareBufs = append(s.spareBufs, rs.buf)
	}
	s.dropped++
}

// A reader that serves request after request never passes through the
// Go scheduler: its blocking read(2) returns on the same P it entered on.
// The runtime's monitor (sysmon) takes a P whose goroutine has not been
// rescheduled for 10 ms as a goroutine hogging it: it retakes the P at the
// reader's next system call and preempts the reader, and every such
// retake resets the monitor to polling every 20 µs. With the kernel
// waking idle readers in turn, every busy reader hit that within 10 ms,
// and the monitor's wake-ups came to 0.6–1.0 per command in the test VM,
// half the daemon's context switches. So a reader yields to the scheduler
// once yieldAfter has passed since its last yield, after the request that
// crossed it. A yield is not free (the scheduler's pass costs more than
// the clock read that spares it), so not after every request; and the
// criterion is time, not a count of requests, because the readers take
// turns: how long a reader's N requests last grows with the number of
// readers (up to IdleReaders+1) and with the request's cost (docs/perf.md).
const yieldAfter = 2 * time.Millisecond

// readerClock is the clock of that decision, in ns: CLOCK_MONOTONIC_COARSE,
// the time of the kernel's last tick, which reads no clock source (on a
// guest whose clock source is the HPET, as the test VM's, a fine clock
// read traps to the hypervisor); CLOCK_MONOTONIC where the ticks are
// coarser than 4 ms (HZ < 250), too coarse for yieldAfter against sysmon's
// 10 ms. clock_gettime never blocks, so a raw system call skips the
// runtime's bookkeeping for blocking ones. A variable for the test.
var readerClock = func() int64 {
	var ts unix.Timespec
	unix.RawSyscall(unix.SYS_CLOCK_GETTIME, readerClockID, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

var readerClockID = func() uintptr {
	var res unix.Timespec
	if unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &res) == nil && res.Nano() <= (4*time.Millisecond).Nanoseconds() {
		return unix.CLOCK_MONOTONIC_COARSE
	}
	return unix.CLOCK_MONOTONIC
}()

// yield puts the reader at the back of its own P's run queue and runs
// the scheduler there, which counts as the reschedule sysmon looks for.
// runtime.Gosched would also wake a thread to spin for the goroutine it
// puts on the global queue: a cross-CPU wake-up per yield, which in the
// test VM cost nearly a fifth of the daemon's context switches per command.
// runtime.goyield is the runtime's own yield without that wake-up; the
// runtime keeps it linkable, with this signature, for gVisor, which yields
// the same way (go.dev/issue/67401). What it gives up: goroutines already
// runnable on the P run before the reader, and should one of them block in
// a system call, the reader waits until another thread steals it or sysmon
// retakes the P. A variable for the test.
var yield = goyield

//go:linkname goyield runtime.goyield
func goyield()

// wakeReaders waits until no reader is in read(2) or on its way there,
// waking those blocked in it: on a socketpair with shutdown(2); on
// /dev/cuse, where nothing else interrupts that read, by opening the
// device node, once per blocked reader: each open is a request, answered
// ENODEV (see open), after which its reader returns. Should that not work
// (the node is gone), it writes the device's abort attribute, which ends
// the connection as closing the channel would. Readers still blocked
// after that are left alone, and the channel is not closed under them.
// Readers serving a request are not waited for here: their handler may
// never return (shutdown).
func (s *Server) wakeReaders() {
	done := make(chan struct{})
	go func() {
		s.readers.Wait()
		close(done)
	}()
	socket := s.ch.shutdownRead()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wakeTimeout)
	aborted := false
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if s.idle.Load() == 0 {
				return
			}
			if socket {
				continue
			}
			// One open in flight per blocked reader: an open blocks
			// until a reader answers it.
			for s.opening.Load() < s.idle.Load() {
				s.opening.Add(1)
				go func() {
					defer s.opening.Add(-1)
					s.openNode()
				}()
			}
		case <-deadline:
			if !aborted {
				aborted = true
				s.log.Warn("cuse: readers did not wake up; aborting the connection", "node", s.cfg.node())
				s.abort()
				deadline = time.After(wakeTimeout)
				continue
			}
			s.log.Error("cuse: readers still blocked in read(2); leaving the channel open", "readers", s.idle.Load())
			s.mu.Lock()
			s.stuck = true
			s.mu.Unlock()
			return
		}
	}
}

// wakeTimeout bounds each of wakeReaders' two ways of waking readers.
const wakeTimeout = 2 * time.Second

// openNode opens the device node once, which makes the kernel send a
// reader an OPEN; a stopping Server answers it ENODEV.
func (s *Server) openNode() {
	fd, err := unix.Open(s.cfg.node(), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
}

// abort writes the CUSE device's abort attribute (cuse_class_abort_store):
// the kernel ends the connection, and every blocked read fails with ENODEV.
func (s *Server) abort() {
	path := "/sys/class/cuse/" + strings.ReplaceAll(s.cfg.DevName, "/", "!") + "/abort"
	if err := os.WriteFile(path, []byte("1"), 0); err != nil {
		s.log.Warn("cuse: aborting the connection", "err", err)
	}
}

// fail stops the readers and makes Serve return err (the first one), or
// ErrServerClosed after Close.
func (s *Server) fail(err error) {
	if s.isClosed() {
		err = ErrServerClosed
	}
	select {
	case s.readErr <- err:
	default:
	}
	s.stop()
}

// stop tells every reader to exit once it has answered what it serves;
// wakeReaders then wakes those blocked in read(2).
func (s *Server) stop() { s.stopping.Store(true) }

// Close stops Serve, which answers the requests in flight and releases open
// files, then closes the channel; the kernel then removes the device node,
// and clients still holding it open get ENOTCONN. Close must not be called
// from a Device or Handle method. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	serving := s.serving
	s.mu.Unlock()
	if serving {
		s.fail(ErrServerClosed)
		<-s.done
	} else {
		s.shutdown()
		close(s.done)
	}
	s.mu.Lock()
	stuck := s.stuck
	s.mu.Unlock()
	if stuck {
		return fmt.Errorf("cuse %s: readers blocked in read(2) could not be woken; channel left open", s.cfg.DevName)
	}
	if err := s.ch.close(); err != nil {
		return fmt.Errorf("cuse %s: closing channel: %w", s.cfg.DevName, err)
	}
	return nil
}

// shutdownGrace is how long shutdown waits for the handlers it cancelled.
// A handler answers at once when cancelled, unless it is stuck where no
// cancellation reaches, such as a copy into a client whose memory never
// arrives (docs/cuse.md §3); a daemon that waited for that could not be
// stopped, nor tell its connections' peers. A variable for the test.
var shutdownGrace = 5 * time.Second

// shutdown answers every request in flight, waiting up to shutdownGrace
// for them, and releases the open files. A handler still running after
// that is left to the kernel, which aborts its request when the channel
// is closed; if it ever returns, its reply finds the channel closed.
func (s *Server) shutdown() {
	s.inflight.cancelAll()
	done := make(chan struct{})
	go func() {
		s.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
		s.log.Warn("cuse: requests still served after they were cancelled; releasing the open files without them",
			"node", s.cfg.node(), "waited", shutdownGrace,
			"cause", "a copy into or out of a client that does not return, such as a buffer whose pages never arrive (docs/cuse.md §3)")
	}
	s.filesMu.Lock()
	files := s.files
	s.files = make(map[uint64]*file)
	s.filesMu.Unlock()
	for _, f := range files {
		// Not a cancelled request: Release must still clean up.
		f.release(context.Background())
	}
}
