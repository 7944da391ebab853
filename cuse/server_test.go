package cuse_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"github.com/ucmd/ucmd/internal/syncbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBlockedWriteDoesNotDelaySecondWrite(t *testing.T) {
	d := newTestDev()
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)

	blocked := f.WriteAsync(alice, []byte("block"))
	d.awaitBlocked(t, blocked.Unique)

	// Same handle, another thread: served while the first is stuck.
	if n, errno := f.Write(cuse.Caller{Pid: 1235, Uid: 1000, Gid: 100}, []byte("hello")); errno != 0 || n != 5 {
		t.Fatalf("second write = %d, %v; want 5, 0", n, errno)
	}
	if blocked.Answered() {
		t.Fatal("blocked write answered before it was released")
	}
	if n, errno := f.Write(alice, []byte("unblock")); errno != 0 || n != 7 {
		t.Fatalf("unblock = %d, %v", n, errno)
	}
	if r := blocked.Wait(); r.Errno != 0 || r.Size() != 5 {
		t.Fatalf("released write = %d, %v; want 5, 0", r.Size(), r.Errno)
	}
}

func TestInterruptCancelsOnlyThatRequest(t *testing.T) {
	d := newTestDev()
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)

	a := f.WriteAsync(alice, []byte("block"))
	b := f.WriteAsync(alice, []byte("block"))
	d.awaitBlocked(t, a.Unique)
	d.awaitBlocked(t, b.Unique)

	intr := k.Interrupt(a.Unique)
	if r := a.Wait(); r.Errno != unix.EINTR {
		t.Fatalf("interrupted write = %v, want EINTR", r.Errno)
	}
	d.mu.Lock()
	shut, ok := d.cancelled[a.Unique]
	d.mu.Unlock()
	if !ok || shut {
		t.Errorf("the interrupted handler's context: ended %v, ShuttingDown %v; want ended, not shutting down", ok, shut)
	}
	k.Sync()
	if b.Answered() {
		t.Fatal("the other blocked write was answered too")
	}
	if intr.Answered() {
		t.Fatalf("INTERRUPT of a known request was answered: %v", intr.Wait().Errno)
	}

	// An interrupt for a request the server does not know: EAGAIN, so
	// that a real kernel would requeue it (it may be racing the request).
	if r := k.Interrupt(1000).Wait(); r.Errno != unix.EAGAIN {
		t.Fatalf("INTERRUPT of an unknown request = %v, want EAGAIN", r.Errno)
	}

	f.Write(alice, []byte("unblock"))
	if r := b.Wait(); r.Errno != 0 {
		t.Fatalf("second write = %v", r.Errno)
	}
}

func TestPollWakeUpOnce(t *testing.T) {
	d := newTestDev()
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)
	other := mustOpen(t, k, alice, unix.O_RDWR)

	// Readiness change before anyone polled: nothing to wake.
	other.Write(alice, []byte("ready"))
	k.Sync()
	if n := len(k.Notifications()); n != 0 {
		t.Fatalf("%d notifications without a registered poller", n)
	}

	revents, errno := f.Poll(alice, unix.POLLIN|unix.POLLOUT)
	if errno != 0 || revents != unix.POLLOUT {
		t.Fatalf("Poll = %#x, %v; want POLLOUT", revents, errno)
	}
	// The device wakes twice; the poller gets exactly one notification.
	f.Write(alice, []byte("ready"))
	k.Sync()
	if got := drain(k); len(got) != 1 || got[0] != f.Kh {
		t.Fatalf("notifications = %v, want exactly [%d]", got, f.Kh)
	}
	// Woken, the poller polls again and finds the file readable.
	if revents, _ := f.Poll(alice, unix.POLLIN); revents != unix.POLLIN {
		t.Fatalf("Poll after wake-up = %#x, want POLLIN", revents)
	}

	// Once released, a file's Waker does nothing, even if armed.
	h := mustOpen(t, k, alice, unix.O_RDWR)
	h.Poll(alice, unix.POLLIN)
	h.Release()
	h.Write(alice, []byte("ready")) // served by nobody: EBADF
	d.mu.Lock()
	last := d.handles[len(d.handles)-1]
	d.mu.Unlock()
	last.w.Wake()
	k.Sync()
	if got := drain(k); len(got) != 0 {
		t.Fatalf("notifications %v after release", got)
	}

	// A poll that does not ask to be notified registers nothing.
	g := mustOpen(t, k, alice, unix.O_RDWR)
	if r := g.PollAsync(alice, unix.POLLIN, 0).Wait(); r.Errno != 0 {
		t.Fatalf("Poll: %v", r.Errno)
	}
	g.Write(alice, []byte("ready"))
	k.Sync()
	if got := drain(k); len(got) != 0 {
		t.Fatalf("notifications %v for a poll without SCHEDULE_NOTIFY", got)
	}
}

func drain(k *cusetest.Kernel) []uint64 {
	var got []uint64
	for {
		select {
		case kh := <-k.Notifications():
			got = append(got, kh)
		default:
			return got
		}
	}
}

func TestNonblockIsPerRequest(t *testing.T) {
	d := newTestDev()
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)

	// fcntl(F_SETFL, O_NONBLOCK) after open: only the request tells.
	f.SetFlags(unix.O_RDWR | unix.O_NONBLOCK)
	if _, errno := f.Write(alice, []byte("wait")); errno != unix.EAGAIN {
		t.Fatalf("non-blocking write = %v, want EAGAIN", errno)
	}
	if !d.lastWrite().Nonblock() {
		t.Fatal("request did not carry O_NONBLOCK")
	}
	f.SetFlags(unix.O_RDWR)
	p := f.WriteAsync(alice, []byte("wait"))
	d.awaitBlocked(t, p.Unique)
	if d.lastWrite().Nonblock() {
		t.Fatal("request still carried O_NONBLOCK")
	}
	f.Write(alice, []byte("unblock"))
	p.Wait()

	// A file opened O_NONBLOCK is non-blocking from its first request on.
	g := mustOpen(t, k, alice, unix.O_RDWR|unix.O_NONBLOCK)
	if _, errno := g.Write(alice, []byte("wait")); errno != unix.EAGAIN {
		t.Fatalf("write on an O_NONBLOCK open = %v, want EAGAIN", errno)
	}
}

func TestReleaseWhileRequestsInFlight(t *testing.T) {
	d := newTestDev()
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)
	g := mustOpen(t, k, alice, unix.O_RDWR)

	onG := g.WriteAsync(alice, []byte("block"))
	onF := f.WriteAsync(alice, []byte("block"))
	d.awaitBlocked(t, onG.Unique)
	d.awaitBlocked(t, onF.Unique)

	if errno := f.Release(); errno != 0 {
		t.Fatalf("Release = %v", errno)
	}
	if d.releasedCount() != 1 {
		t.Fatalf("%d handles released, want 1", d.releasedCount())
	}
	if onG.Answered() || onF.Answered() {
		t.Fatal("release answered other requests")
	}
	// The released fh is gone for new requests.
	if _, errno := f.Write(alice, []byte("x")); errno != unix.EBADF {
		t.Fatalf("write after release = %v, want EBADF", errno)
	}
	g.Write(alice, []byte("unblock"))
	onG.Wait()
	onF.Wait()
}

func TestUnsupportedRequests(t *testing.T) {
	k := start(t, newTestDev())
	f := mustOpen(t, k, alice, unix.O_RDWR)
	if r := k.Send(cusetest.Header{Opcode: 9999, Caller: alice}).Wait(); r.Errno != unix.ENOSYS {
		t.Fatalf("unknown opcode = %v, want ENOSYS", r.Errno)
	}
	// FLUSH never reaches CUSE, but if it did: ENOSYS too.
	if r := k.Send(cusetest.Header{Opcode: 25, Caller: alice}, make([]byte, 24)).Wait(); r.Errno != unix.ENOSYS {
		t.Fatalf("FLUSH = %v, want ENOSYS", r.Errno)
	}
	if errno := f.Ioctl(alice, 0x5401, 0); errno != unix.ENOTTY {
		t.Fatalf("ioctl = %v, want ENOTTY", errno)
	}
}

func TestCallerAndFlagsReachDevice(t *testing.T) {
	d := newTestDev()
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR|unix.O_CLOEXEC)
	bob := cuse.Caller{Pid: 77, Uid: 2000, Gid: 200}
	f.Write(bob, []byte("x"))

	d.mu.Lock()
	open, write := d.opens[0], d.writes[0]
	d.mu.Unlock()
	if open.Caller != alice || open.Flags != unix.O_RDWR|unix.O_CLOEXEC {
		t.Errorf("open request = %+v", open)
	}
	if write.Caller != bob || write.Flags != unix.O_RDWR|unix.O_CLOEXEC {
		t.Errorf("write request = %+v", write)
	}
}

func TestOpenErrors(t *testing.T) {
	d := newTestDev()
	d.openErr = unix.EBUSY
	k := start(t, d)
	if _, errno := k.Open(alice, unix.O_RDWR); errno != unix.EBUSY {
		t.Fatalf("Open = %v, want EBUSY", errno)
	}
	// ENOSYS would tell the kernel to open every later file unasked.
	d.mu.Lock()
	d.openErr = fmt.Errorf("a system call refused: %w", unix.ENOSYS)
	d.mu.Unlock()
	if _, errno := k.Open(alice, unix.O_RDWR); errno != unix.EIO {
		t.Fatalf("Open failing with ENOSYS = %v, want EIO", errno)
	}
	d.mu.Lock()
	d.openErr = nil
	d.mu.Unlock()
	f1 := mustOpen(t, k, alice, unix.O_RDWR)
	f2 := mustOpen(t, k, alice, unix.O_RDWR)
	if f1.Fh == f2.Fh {
		t.Fatalf("two opens share fh %d", f1.Fh)
	}
}

func TestReadWritePayload(t *testing.T) {
	k := start(t, newTestDev())
	f := mustOpen(t, k, alice, unix.O_RDWR)
	data, errno := f.Read(alice, 64)
	if errno != 0 || string(data) != "data" {
		t.Fatalf("Read = %q, %v", data, errno)
	}
	big := make([]byte, cuse.DefaultMaxIO)
	if n, errno := f.Write(alice, big); errno != 0 || n != len(big) {
		t.Fatalf("max_write-sized write = %d, %v", n, errno)
	}
}

func TestShutdownAnswersInFlightAndReleases(t *testing.T) {
	d := newTestDev()
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)
	mustOpen(t, k, alice, unix.O_RDWR)
	p := f.WriteAsync(alice, []byte("block"))
	d.awaitBlocked(t, p.Unique)

	if err := k.Close(); err != cuse.ErrServerClosed {
		t.Fatalf("Serve returned %v, want ErrServerClosed", err)
	}
	// What the kernel answers for requests a daemon read but never
	// answered when its channel closes.
	if r := p.Wait(); r.Errno != unix.ECONNABORTED {
		t.Fatalf("in-flight write at shutdown = %v, want ECONNABORTED", r.Errno)
	}
	d.mu.Lock()
	shut, ok := d.cancelled[p.Unique]
	d.mu.Unlock()
	if !ok || !shut {
		t.Errorf("the handler's context at shutdown: ended %v, ShuttingDown %v; want both", ok, shut)
	}
	if cuse.ShuttingDown(context.Background()) {
		t.Error("ShuttingDown of a context that is not a request's")
	}
	if n := d.releasedCount(); n != 2 {
		t.Fatalf("%d handles released at shutdown, want 2", n)
	}
}

// A handler that never returns (a copy into a client whose memory never
// arrives) does not keep the server from stopping: after a grace period
// Serve releases the open files anyway, the channel is closed (the
// request is then the kernel's to abort), and the hung handler, once it
// returns, writes nothing.
func TestShutdownLeavesHungHandler(t *testing.T) {
	defer cuse.SetShutdownGrace(50 * time.Millisecond)()
	d := newTestDev()
	// Not the test's log: the hung handler logs after the test.
	var logs syncbuf.Buffer
	k := cusetest.Start(t, d, &cusetest.Options{Config: cuse.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}})
	f := mustOpen(t, k, alice, unix.O_RDWR)
	p := f.WriteAsync(alice, []byte("hang"))
	d.awaitBlocked(t, p.Unique)
	defer func() {
		d.mu.Lock()
		close(d.unblock) // the hang ends, after the test
		d.unblock = make(chan struct{})
		d.mu.Unlock()
	}()

	closed := make(chan error, 1)
	go func() { closed <- k.Close() }()
	select {
	case err := <-closed:
		if err != cuse.ErrServerClosed {
			t.Fatalf("Serve returned %v, want ErrServerClosed", err)
		}
	case <-time.After(cusetest.DefaultTimeout):
		t.Fatal("Close did not return while a handler hangs")
	}
	if r := p.Wait(); r.Errno != unix.ECONNABORTED {
		t.Fatalf("hung write at shutdown = %v, want ECONNABORTED", r.Errno)
	}
	if n := d.releasedCount(); n != 1 {
		t.Fatalf("%d handles released at shutdown, want 1", n)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"cuse: requests still served after they were cancelled") {
		t.Errorf("no warning of the handler left behind:\n%s", logs.String())
	}
}

// A busy reader yields to the scheduler once YieldAfter has passed since
// its last yield, or the runtime's monitor treats it as hogging its P (see
// yieldAfter), and not before: requests while the clock stands still
// cause no yield, and after each step of the clock by YieldAfter the
// readers that serve the next requests yield once each.
func TestBusyReadersYield(t *testing.T) {
	var yields atomic.Int64
	advance, restore := cuse.FakeYields(&yields)
	defer restore()
	k := start(t, newTestDev())
	f := mustOpen(t, k, alice, unix.O_RDWR)
	write := func(n int) {
		t.Helper()
		for range n {
			if _, errno := f.Write(alice, []byte("x")); errno != 0 {
				t.Fatalf("write: %v", errno)
			}
		}
	}
	write(50)
	if got := yields.Load(); got != 0 {
		t.Fatalf("%d yields with the clock standing still", got)
	}
	readers := int64(k.Server().MaxBlockedReaders())
	const steps = 10
	for range steps {
		advance(cuse.YieldAfter)
		write(int(2 * readers))
	}
	if got := yields.Load(); got < steps || got > steps*readers {
		t.Errorf("%d yields after %d steps of the clock, want %d to %d", got, steps, steps, steps*readers)
	}
	if err := k.Close(); err != nil && !errors.Is(err, cuse.ErrServerClosed) {
		t.Fatal(err)
	}
}

// The readers' yield, linked to the runtime's goyield, really yields: on a
// single P it lets a runnable goroutine run before the reader goes on.
func TestYieldRunsOthers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Bool
	go ran.Store(true)
	for range 100 {
		if ran.Load() {
			return
		}
		cuse.Yield()
	}
	t.Fatal("a runnable goroutine did not run in 100 yields on one P")
}

// Readers started for a burst and gone after it leave their buffers and
// requests to the readers of the next burst, which allocates nothing for
// its readers. The second burst is smaller: after the first, at least
// MaxBlockedReaders states are spare or held by idle readers (the spare
// list is full whenever one was dropped), and a burst of n blocked writes
// needs n+2 readers at most (one answers "unblock", one stays idle).
func TestReaderStatesReused(t *testing.T) {
	d := newTestDev()
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)
	srv := k.Server()
	readerBurst(t, d, f, srv.MaxBlockedReaders()+1)
	first, _ := settledReaders(t, srv)
	if first <= srv.MaxBlockedReaders() {
		t.Fatalf("the burst made only %d reader states: it tests nothing", first)
	}
	readerBurst(t, d, f, srv.MaxBlockedReaders()-2)
	if again, _ := settledReaders(t, srv); again != first {
		t.Errorf("the second burst made %d reader states more", again-first)
	}
	if err := k.Close(); err != nil && !errors.Is(err, cuse.ErrServerClosed) {
		t.Fatal(err)
	}
}

// readerBurst makes n writes that block in d at once, each holding a
// reader, then releases them all.
func readerBurst(t *testing.T, d *testDev, f *cusetest.File, n int) {
	t.Helper()
	releaseWrites(t, f, blockWrites(t, d, f, n))
}

// blockWrites makes n writes that block in d, each holding a reader.
func blockWrites(t *testing.T, d *testDev, f *cusetest.File, n int) []*cusetest.Pending {
	t.Helper()
	var ps []*cusetest.Pending
	for range n {
		p := f.WriteAsync(alice, []byte("block"))
		d.awaitBlocked(t, p.Unique)
		ps = append(ps, p)
	}
	return ps
}

// releaseWrites unblocks the writes ps and waits for their answers.
func releaseWrites(t *testing.T, f *cusetest.File, ps []*cusetest.Pending) {
	t.Helper()
	if _, errno := f.Write(alice, []byte("unblock")); errno != 0 {
		t.Fatalf("unblock: %v", errno)
	}
	for _, p := range ps {
		if r := p.Wait(); r.Errno != 0 {
			t.Fatalf("blocked write: %v", r.Errno)
		}
	}
}

// settledReaders waits until a burst is over, every reader state spare,
// dropped or held by an idle reader, and returns the states made and the
// idle readers.
func settledReaders(t *testing.T, srv *cuse.Server) (made, idle int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		made, spare, dropped, idle := srv.ReaderStates()
		if made == spare+dropped+idle {
			return made, idle
		}
		if time.Now().After(deadline) {
			t.Fatalf("readers did not settle: %d states, %d spare, %d dropped, %d idle readers", made, spare, dropped, idle)
		}
		time.Sleep(time.Millisecond)
	}
}

// Config.IdleReaders fixes how many readers wait in read(2), whatever
// GOMAXPROCS is: cmd/ucmd adds Ps for the readers it is told of, and
// readers that followed GOMAXPROCS would then grow into the added Ps.
// Without the field, a Server takes max(4, GOMAXPROCS) when it starts.
func TestIdleReaders(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(base)
	if got, want := start(t, newTestDev()).Server().MaxBlockedReaders(), max(4, base)+1; got != want {
		t.Errorf("default: %d readers may block, want %d", got, want)
	}
	runtime.GOMAXPROCS(base + 20) // as ucmd serve raises it for the first devices
	d := newTestDev()
	k := cusetest.Start(t, d, &cusetest.Options{Config: cuse.Config{IdleReaders: 2}})
	srv := k.Server()
	if got := srv.MaxBlockedReaders(); got != 3 {
		t.Fatalf("IdleReaders 2 with GOMAXPROCS %d: %d readers may block, want 3", runtime.GOMAXPROCS(0), got)
	}
	// A host with more CPUs than readers are worth: capped, not refused.
	if got := cusetest.Start(t, newTestDev(), &cusetest.Options{Config: cuse.Config{IdleReaders: 5000}}).Server().MaxBlockedReaders(); got != 1025 {
		t.Errorf("IdleReaders 5000: %d readers may block, want 1,024 and one more", got)
	}
	// A reader for each of 8 blocked writes; once they are answered, no
	// more than 2 stay waiting.
	readerBurst(t, d, mustOpen(t, k, alice, unix.O_RDWR), 8)
	if made, idle := settledReaders(t, srv); made < 8 || idle > 2 {
		t.Errorf("after a burst of 8: %d reader states made, %d readers idle; want at least 8 and at most 2", made, idle)
	}
}

// Readers that answer together come back one at a time: however many
// finish at once, no more than IdleReaders wait in read(2), each holding
// a P that a caller budgets by MaxBlockedReaders. Here the readers of a
// burst answer together, pass the first look at the idle count (two are
// idle, of four allowed), and wait in their yields until all are there.
func TestIdleReadersAfterABurstTogether(t *testing.T) {
	const burst = 12
	release := make(chan struct{})
	var yields atomic.Int64
	advance, restore := cuse.BlockYields(release, &yields)
	defer restore()
	d := newTestDev()
	k := cusetest.Start(t, d, &cusetest.Options{Config: cuse.Config{IdleReaders: 4}})
	released := false
	defer func() { // also after a failure: the readers must get out of their yield
		if !released {
			close(release)
		}
		if err := k.Close(); err != nil && !errors.Is(err, cuse.ErrServerClosed) {
			t.Error(err)
		}
	}()
	f := mustOpen(t, k, alice, unix.O_RDWR)
	ps := blockWrites(t, d, f, burst)
	advance(cuse.YieldAfter) // each of them yields once it has answered
	releaseWrites(t, f, ps)
	for deadline := time.Now().Add(10 * time.Second); yields.Load() < burst; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the burst's %d readers reached their yield", yields.Load(), burst)
		}
	}
	close(release)
	released = true
	if _, idle := settledReaders(t, k.Server()); idle > 4 {
		t.Errorf("%d readers idle after a burst of %d answered together, want at most 4", idle, burst)
	}
	if _, errno := f.Write(alice, []byte("x")); errno != 0 {
		t.Errorf("a write after the burst: %v", errno)
	}
}

// A reader still in its yield is not idle: the last reader that is starts
// another, so requests keep being answered however many readers wait
// there (behind other goroutines on their P, in the daemon).
func TestYieldingReadersAreNotIdle(t *testing.T) {
	release := make(chan struct{})
	advance, restore := cuse.BlockYields(release, new(atomic.Int64))
	defer restore()
	k := start(t, newTestDev())
	defer func() { // also after a failure: the readers must get out of their yield
		close(release)
		if err := k.Close(); err != nil && !errors.Is(err, cuse.ErrServerClosed) {
			t.Error(err)
		}
	}()
	f := mustOpen(t, k, alice, unix.O_RDWR)
	n := 2*k.Server().MaxBlockedReaders() + 2
	for i := range n {
		advance(cuse.YieldAfter) // the reader of the next write yields, and stays there
		if r, ok := f.WriteAsync(alice, []byte("x")).WaitFor(5 * time.Second); !ok || r.Errno != 0 {
			t.Fatalf("write %d with %d readers in their yield: answered %v, %v", i, i, ok, r.Errno)
		}
	}
}

// A reply that finds the channel full waits for room and loses nothing.
// The server writes a socket (tests) without blocking, as /dev/cuse never
// makes it wait, and waits for room through the runtime. Here the
// server's send buffer is the smallest the kernel allows, and the replies
// of 100 writes pile up before anything reads them.
func TestRepliesWaitForRoom(t *testing.T) {
	kernel, fh := rawServer(t, func(server *os.File) {
		rc, err := server.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 0) })
		if serr != nil {
			t.Fatal(serr)
		}
	})
	const n = 100
	for i := range n {
		if _, err := kernel.Write(writeReq(fh, uint64(100+2*i))); err != nil {
			t.Fatal(err)
		}
	}
	seen := make(map[uint64]bool)
	buf := make([]byte, 8192)
	if err := kernel.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for range n {
		m, err := kernel.Read(buf)
		if err != nil {
			t.Fatalf("after %d replies: %v", len(seen), err)
		}
		u := binary.NativeEndian.Uint64(buf[8:])
		if m != 24 || binary.NativeEndian.Uint32(buf[4:]) != 0 || binary.NativeEndian.Uint32(buf[16:]) != 24 || seen[u] {
			t.Fatalf("reply %x (unique %d seen before: %v)", buf[:m], u, seen[u])
		}
		seen[u] = true
	}
}

// recDev records what each write carried; writes of odd values give their
// buffer back (DetachBuffer) and wait for release.
type recDev struct {
	release chan struct{}
	mu      sync.Mutex
	seen    map[uint64]int
	waiting atomic.Int32
}

func (d *recDev) Open(context.Context, cuse.Request, cuse.Waker) (cuse.Handle, error) {
	return d, nil
}
func (d *recDev) Read(context.Context, cuse.Request, []byte) (int, error) { return 0, nil }
func (d *recDev) Write(ctx context.Context, _ cuse.Request, data []byte) (int, error) {
	v := binary.NativeEndian.Uint64(data)
	for _, c := range data[8:] {
		if c != byte(v) {
			return 0, fmt.Errorf("write of %d carried byte %#x", v, c)
		}
	}
	d.mu.Lock()
	d.seen[v]++
	d.mu.Unlock()
	if v%2 == 1 {
		cuse.DetachBuffer(ctx)
		cuse.DetachBuffer(ctx) // a second call does nothing
		d.waiting.Add(1)
		<-d.release
	}
	return len(data), nil
}
func (d *recDev) Poll(context.Context, cuse.Request, uint32) (uint32, error) { return 0, nil }
func (d *recDev) Release(context.Context)                                    {}

// Requests whose handlers wait without their buffer leave it to the other
// readers: those read every later request intact, and the waiting ones
// are answered in full once released, after which their readers read
// again into buffers of their own.
func TestDetachBuffer(t *testing.T) {
	d := &recDev{release: make(chan struct{}), seen: map[uint64]int{}}
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)
	write := func(v uint64) *cusetest.Pending {
		b := make([]byte, 64)
		binary.NativeEndian.PutUint64(b, v)
		for i := 8; i < len(b); i++ {
			b[i] = byte(v)
		}
		return f.WriteAsync(alice, b)
	}
	var waiting []*cusetest.Pending
	for v := uint64(1); v < 64; v += 2 {
		waiting = append(waiting, write(v))
	}
	for d.waiting.Load() < 32 {
		time.Sleep(time.Millisecond)
	}
	check := func(from uint64) {
		t.Helper()
		var ps []*cusetest.Pending
		for v := from; v < from+200; v += 2 {
			ps = append(ps, write(v))
		}
		for _, p := range ps {
			if r := p.Wait(); r.Errno != 0 || r.Size() != 64 {
				t.Fatalf("write: %d bytes, %v", r.Size(), r.Errno)
			}
		}
	}
	check(100)
	// The 32 waiting handlers hold no buffer: the readers that took the
	// later requests read into theirs.
	if n := k.Server().ReadBuffers(); n > 16 {
		t.Errorf("%d read buffers allocated with 32 requests waiting, want their buffers reused", n)
	}
	close(d.release)
	for _, p := range waiting {
		if r := p.Wait(); r.Errno != 0 || r.Size() != 64 {
			t.Fatalf("detached write: %d bytes, %v", r.Size(), r.Errno)
		}
	}
	check(1000)
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.seen) != 32+100+100 {
		t.Errorf("%d distinct values written, want %d", len(d.seen), 232)
	}
	for v, n := range d.seen {
		if n != 1 {
			t.Errorf("value %d seen %d times", v, n)
		}
	}
}

// pingDev's odd writes wait (without their buffer) for the next even
// write, as a GET_EVENT waits for the event a MAD brings.
type pingDev struct {
	wake    chan struct{}
	waiting chan struct{}
}

func (d *pingDev) Open(context.Context, cuse.Request, cuse.Waker) (cuse.Handle, error) {
	return d, nil
}
func (d *pingDev) Read(context.Context, cuse.Request, []byte) (int, error) { return 0, nil }
func (d *pingDev) Write(ctx context.Context, _ cuse.Request, data []byte) (int, error) {
	if data[0]%2 == 1 {
		cuse.DetachBuffer(ctx)
		d.waiting <- struct{}{}
		<-d.wake
	} else {
		d.wake <- struct{}{}
	}
	return len(data), nil
}
func (d *pingDev) Poll(context.Context, cuse.Request, uint32) (uint32, error) { return 0, nil }
func (d *pingDev) Release(context.Context)                                    {}

// A handler that waits without its buffer takes one back when it has
// answered, and in a steady exchange (a wait, the request that ends it)
// that is a buffer an earlier wait left, not a new one.
func TestDetachBufferSteadyState(t *testing.T) {
	d := &pingDev{wake: make(chan struct{}), waiting: make(chan struct{})}
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)
	for i := range 1000 {
		w := f.WriteAsync(alice, []byte{1})
		<-d.waiting
		if r := f.WriteAsync(alice, []byte{2}).Wait(); r.Errno != 0 {
			t.Fatalf("round %d: %v", i, r.Errno)
		}
		if r := w.Wait(); r.Errno != 0 {
			t.Fatalf("round %d: waiting write: %v", i, r.Errno)
		}
	}
	if n := k.Server().ReadBuffers(); n > 8 {
		t.Errorf("%d read buffers allocated in 1,000 rounds", n)
	}
}

// slowRelease is a device whose Release waits to be let go and reports
// whether its context had ended by then.
type slowRelease struct {
	entered, resume chan struct{}
	ctxErr          chan error
}

func (d *slowRelease) Open(context.Context, cuse.Request, cuse.Waker) (cuse.Handle, error) {
	return d, nil
}
func (d *slowRelease) Read(context.Context, cuse.Request, []byte) (int, error)  { return 0, nil }
func (d *slowRelease) Write(context.Context, cuse.Request, []byte) (int, error) { return 0, nil }
func (d *slowRelease) Poll(context.Context, cuse.Request, uint32) (uint32, error) {
	return 0, nil
}
func (d *slowRelease) Release(ctx context.Context) {
	close(d.entered)
	select {
	case <-ctx.Done():
	case <-d.resume:
	}
	d.ctxErr <- ctx.Err()
}

// The kernel can interrupt a RELEASE (its first wait for the reply is
// interruptible, and the closing task may have a signal pending): Release
// runs to the end all the same, with a context that is not cancelled.
func TestInterruptedReleaseStillCleansUp(t *testing.T) {
	d := &slowRelease{entered: make(chan struct{}), resume: make(chan struct{}), ctxErr: make(chan error, 1)}
	k := start(t, d)
	f := mustOpen(t, k, alice, unix.O_RDWR)
	rel := f.ReleaseAsync()
	<-d.entered
	k.Interrupt(rel.Unique) // answered only if the server no longer knows the RELEASE
	// A cancelled context would end Release's wait at once; without one it
	// ends here. (Under load the INTERRUPT may come later than this: the
	// test then passes without having tried.)
	time.AfterFunc(200*time.Millisecond, func() { close(d.resume) })
	if err := <-d.ctxErr; err != nil {
		t.Errorf("Release's context ended by the INTERRUPT: %v", err)
	}
	if r := rel.Wait(); r.Errno != 0 {
		t.Errorf("RELEASE = %v", r.Errno)
	}
}

// A reader that takes the last idle slot as a shutdown begins starts no
// reader once stopping is set: counted idle before it looks, as rejoin
// does. Looked at first, a reader could start after wakeReaders had found
// none idle, and read from the channel as Close closed it.
func TestNoReaderStartsWhileStopping(t *testing.T) {
	var late atomic.Int64
	arm, reached, restore := cuse.RaceShutdownWithSpawn(&late)
	defer restore()
	d := newTestDev()
	k := cusetest.Start(t, d, &cusetest.Options{Config: cuse.Config{IdleReaders: 1}})
	f := mustOpen(t, k, alice, unix.O_RDWR)
	arm()
	for i := 0; i < 20 && !reached(); i++ {
		f.WriteAsync(alice, []byte("hello")).Wait()
	}
	if !reached() {
		t.Fatal("no reader took the last idle slot")
	}
	if n := late.Load(); n != 0 {
		t.Errorf("%d readers started after the Server began stopping", n)
	}
}
