//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
)

// The cuse package against the real kernel: this test registers
// /dev/infiniband/ucmtest and is its own client. Client calls are raw
// system calls made by goroutines locked to OS threads, so the kernel sees
// distinct calling threads, each blocked in its own write(2) or poll(2).

const ucmtestPath = "/dev/infiniband/ucmtest"

var response = []byte("RESPONSE-FROM-DAEMON")

// ucmtestDev understands a few write commands:
//
//	"PTR:" + u64 address: write response into the caller at that address
//	"block":   wait for "release" (or an interrupt, which answers EINTR)
//	"release": wake every blocked writer
//	"ready":   make the file readable and wake its pollers
type ucmtestDev struct {
	mem callermem.Memory

	mu         sync.Mutex
	ptrPid     int // caller of the last PTR command
	whoami     cuse.Caller
	release    chan struct{}
	blocked    chan int // tid of each writer that starts blocking
	interrupts int
	ready      bool
	polls      chan struct{}
	wakers     []cuse.Waker
	releases   int
}

func (d *ucmtestDev) Open(ctx context.Context, req cuse.Request, w cuse.Waker) (cuse.Handle, error) {
	d.mu.Lock()
	d.wakers = append(d.wakers, w)
	d.mu.Unlock()
	return &ucmtestFile{d: d}, nil
}

type ucmtestFile struct{ d *ucmtestDev }

func (f *ucmtestFile) Read(ctx context.Context, req cuse.Request, dst []byte) (int, error) {
	return 0, unix.EINVAL
}

func (f *ucmtestFile) Write(ctx context.Context, req cuse.Request, data []byte) (int, error) {
	d := f.d
	switch {
	case len(data) == 12 && bytes.HasPrefix(data, []byte("PTR:")):
		addr := binary.NativeEndian.Uint64(data[4:])
		d.mu.Lock()
		d.ptrPid = req.Caller.Pid
		d.mu.Unlock()
		if err := d.mem.Write(req.Caller.Pid, addr, response); err != nil {
			return 0, err
		}
	case len(data) == 24: // a small ucm-sized command, for the benchmark
	case string(data) == "nonblock?":
		if req.Nonblock() {
			return 0, unix.EAGAIN
		}
	case string(data) == "whoami":
		d.mu.Lock()
		d.whoami = req.Caller
		d.mu.Unlock()
	case string(data) == "block":
		d.mu.Lock()
		release := d.release
		d.mu.Unlock()
		d.blocked <- req.Caller.Pid
		select {
		case <-release:
		case <-ctx.Done():
			d.mu.Lock()
			d.interrupts++
			d.mu.Unlock()
			return 0, ctx.Err()
		}
	case string(data) == "release":
		d.mu.Lock()
		close(d.release)
		d.release = make(chan struct{})
		d.mu.Unlock()
	case string(data) == "ready":
		d.mu.Lock()
		d.ready = true
		wakers := d.wakers
		d.mu.Unlock()
		for _, w := range wakers {
			w.Wake()
		}
	default:
		return 0, unix.EINVAL
	}
	return len(data), nil
}

func (f *ucmtestFile) Poll(ctx context.Context, req cuse.Request, events uint32) (uint32, error) {
	d := f.d
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case d.polls <- struct{}{}:
	default:
	}
	if d.ready {
		return events & unix.POLLIN, nil
	}
	return 0, nil
}

func (f *ucmtestFile) Release(ctx context.Context) {
	f.d.mu.Lock()
	f.d.releases++
	f.d.mu.Unlock()
}

// onThread runs fn on a goroutine locked to its own OS thread and returns
// the thread id and a channel with fn's result.
func onThread[T any](fn func() T) (tid int, result <-chan T) {
	tids := make(chan int)
	res := make(chan T, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked: the thread may have taken a signal; let it exit.
		tids <- unix.Gettid()
		res <- fn()
	}()
	return <-tids, res
}

func rawWrite(fd int, b []byte) error {
	n, err := unix.Write(fd, b)
	if err == nil && n != len(b) {
		return errors.New("short write")
	}
	return err
}

func waitFor[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// serveUcmtest registers /dev/infiniband/ucmtest; stop closes the server
// and checks that the node is gone.
func serveUcmtest(t testing.TB) (dev *ucmtestDev, stop func()) {
	t.Helper()
	if _, err := os.Stat(cuse.DevicePath); err != nil {
		t.Fatalf("%s: %v (the VM loads the cuse module)", cuse.DevicePath, err)
	}
	dev = &ucmtestDev{
		mem:     callermem.ProcessVM{},
		release: make(chan struct{}),
		blocked: make(chan int, 10),
		polls:   make(chan struct{}, 1),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The historic ib_ucm number (IB_UCM_MAJOR:IB_UCM_BASE_MINOR), free
	// since ucm.c was removed: umad and uverbs use other minors of 231.
	srv, err := cuse.Open(ctx, cuse.Config{DevName: "infiniband/ucmtest", Major: 231, Minor: 224}, dev)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	return dev, func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; !errors.Is(err, cuse.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		// The kernel removes the node when the channel closes.
		if _, err := os.Stat(ucmtestPath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Close: %v, want it gone", ucmtestPath, err)
		}
	}
}

func TestCUSEDevice(t *testing.T) {
	dev, stop := serveUcmtest(t)
	defer stop()

	// Open returned after the kernel accepted CUSE_INIT: the node is there.
	var st unix.Stat_t
	if err := unix.Stat(ucmtestPath, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Fatalf("%s: mode %#o, %v; want a character device", ucmtestPath, st.Mode, err)
	}
	if st.Rdev != unix.Mkdev(231, 224) {
		t.Errorf("%s is %d:%d, want the fixed 231:224", ucmtestPath, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	fd, err := unix.Open(ucmtestPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", ucmtestPath, err)
	}
	closed := false
	defer func() {
		if !closed {
			unix.Close(fd)
		}
	}()

	t.Run("DuplicateNameRejected", func(t *testing.T) {
		// The kernel refuses a second CUSE device of the same name by
		// aborting the new connection; Open must notice and fail.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv, err := cuse.Open(ctx, cuse.Config{DevName: "infiniband/ucmtest"}, dev)
		if err == nil {
			srv.Close()
			t.Fatal("second registration of infiniband/ucmtest succeeded")
		}
		t.Logf("second registration: %v", err)
		if _, err := os.Stat(ucmtestPath); err != nil {
			t.Fatalf("the first device's node is gone: %v", err)
		}
	})

	t.Run("CallerCredentials", func(t *testing.T) {
		// setresuid/setresgid as raw syscalls change only this thread's
		// credentials (Go's wrappers change every thread); the locked
		// thread then dies with its goroutine.
		tid, res := onThread(func() error {
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, 4321, 4321, 4321); e != 0 {
				return e
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 1234, 1234, 1234); e != 0 {
				return e
			}
			return rawWrite(fd, []byte("whoami"))
		})
		if err := waitFor(t, "whoami", res); err != nil {
			t.Fatalf("whoami: %v", err)
		}
		dev.mu.Lock()
		got := dev.whoami
		dev.mu.Unlock()
		if want := (cuse.Caller{Pid: tid, Uid: 1234, Gid: 4321}); got != want {
			t.Fatalf("caller %+v, want %+v", got, want)
		}
	})

	t.Run("NonblockPerCall", func(t *testing.T) {
		// fcntl(F_SETFL) reaches the daemon only through later requests.
		if err := rawWrite(fd, []byte("nonblock?")); err != nil {
			t.Fatalf("blocking write: %v", err)
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags|unix.O_NONBLOCK); err != nil {
			t.Fatal(err)
		}
		defer unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags)
		if err := rawWrite(fd, []byte("nonblock?")); err != unix.EAGAIN {
			t.Fatalf("write after F_SETFL O_NONBLOCK: %v, want EAGAIN", err)
		}
	})

	t.Run("PointerIntoCallerMemory", func(t *testing.T) {
		// The answer lands in a buffer of the calling thread's process,
		// addressed by a pointer inside the written command, as ucm's
		// response field is.
		buf := make([]byte, 64)
		cmd := make([]byte, 12)
		copy(cmd, "PTR:")
		binary.NativeEndian.PutUint64(cmd[4:], uint64(uintptr(unsafe.Pointer(&buf[0]))))
		tid, res := onThread(func() error { return rawWrite(fd, cmd) })
		if err := waitFor(t, "PTR write", res); err != nil {
			t.Fatalf("write PTR: %v", err)
		}
		runtime.KeepAlive(buf)
		if !bytes.Equal(buf[:len(response)], response) {
			t.Fatalf("buffer holds %q, want %q", buf[:len(response)], response)
		}
		dev.mu.Lock()
		pid := dev.ptrPid
		dev.mu.Unlock()
		if pid != tid {
			t.Errorf("request pid %d, want the calling thread %d", pid, tid)
		}
		// A bad pointer is EFAULT to the client, as copy_to_user gave.
		binary.NativeEndian.PutUint64(cmd[4:], 8)
		if err := rawWrite(fd, cmd); err != unix.EFAULT {
			t.Errorf("write PTR to address 8: %v, want EFAULT", err)
		}
	})

	t.Run("BlockedWriteReleasedByAnotherThread", func(t *testing.T) {
		tidA, resA := onThread(func() error { return rawWrite(fd, []byte("block")) })
		if got := waitFor(t, "blocked writer", dev.blocked); got != tidA {
			t.Fatalf("blocked writer is thread %d, want %d", got, tidA)
		}
		select {
		case err := <-resA:
			t.Fatalf("blocked write returned early: %v", err)
		default:
		}
		_, resB := onThread(func() error { return rawWrite(fd, []byte("release")) })
		if err := waitFor(t, "releasing write", resB); err != nil {
			t.Fatalf("release write: %v", err)
		}
		if err := waitFor(t, "released write", resA); err != nil {
			t.Fatalf("released write: %v", err)
		}
	})

	t.Run("PollWokenByReadiness", func(t *testing.T) {
		type pollResult struct {
			n       int
			revents int16
			err     error
		}
		_, res := onThread(func() pollResult {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 30000)
			return pollResult{n, fds[0].Revents, err}
		})
		// The poller asked and found nothing ready; now it sleeps.
		waitFor(t, "first POLL", dev.polls)
		_, resB := onThread(func() error { return rawWrite(fd, []byte("ready")) })
		if err := waitFor(t, "ready write", resB); err != nil {
			t.Fatalf("ready write: %v", err)
		}
		got := waitFor(t, "poll(2) to return", res)
		if got.err != nil || got.n != 1 || got.revents != unix.POLLIN {
			t.Fatalf("poll = %d, revents %#x, %v; want 1, POLLIN", got.n, got.revents, got.err)
		}
	})

	t.Run("SignalInterruptsWithEINTR", func(t *testing.T) {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, unix.SIGUSR1)
		defer signal.Stop(sigs)
		tid, res := onThread(func() error { return rawWrite(fd, []byte("block")) })
		if got := waitFor(t, "blocked writer", dev.blocked); got != tid {
			t.Fatalf("blocked writer is thread %d, want %d", got, tid)
		}
		if err := unix.Tgkill(unix.Getpid(), tid, unix.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(t, "interrupted write", res); err != unix.EINTR {
			t.Fatalf("interrupted write: %v, want EINTR", err)
		}
		waitFor(t, "SIGUSR1", sigs)
		dev.mu.Lock()
		n := dev.interrupts
		dev.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d requests cancelled, want 1", n)
		}
	})

	// The last close is a synchronous RELEASE.
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close: %v", err)
	}
	closed = true
	dev.mu.Lock()
	releases := dev.releases
	dev.mu.Unlock()
	if releases != 1 {
		t.Errorf("%d releases after close, want 1", releases)
	}
}

// BenchmarkCUSEWrite is one write(2) of a 24-byte command through the real
// kernel's CUSE and this package's server, answered at once (compare with
// the libfuse floor in the project's performance notes). Run it in the VM:
// test/vm/run.sh -r -- env UCMD_VM_GUEST=1 e2e.test -test.run=^$ -test.bench=CUSE
func BenchmarkCUSEWrite(b *testing.B) {
	_, stop := serveUcmtest(b)
	defer stop()
	fd, err := unix.Open(ucmtestPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatalf("open %s: %v", ucmtestPath, err)
	}
	defer unix.Close(fd)
	cmd := make([]byte, 24)
	b.ReportAllocs()
	for b.Loop() {
		if err := rawWrite(fd, cmd); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCUSEServeForBenchmark serves /dev/infiniband/ucmtest for an external
// C client (the project's wbench) to measure, and is skipped unless
// CUSE_BENCH_SERVE names a file: it serves until that file exists.
func TestCUSEServeForBenchmark(t *testing.T) {
	stopFile := os.Getenv("CUSE_BENCH_SERVE")
	if stopFile == "" {
		t.Skip("set CUSE_BENCH_SERVE=<stop file> to serve for an external benchmark")
	}
	_, stop := serveUcmtest(t)
	defer stop()
	if err := os.Chmod(ucmtestPath, 0o666); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(stopFile); err == nil {
			return
		}
	}
	t.Error("stop file never appeared")
}
