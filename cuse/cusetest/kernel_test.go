package cusetest

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/internal/wire"
)

func reply(unique uint64, status int32, body ...byte) []byte {
	b := wire.AppendOutHeader(nil, fuse.OutHeader{Length: uint32(16 + len(body)), Status: status, Unique: unique})
	return append(b, body...)
}

// writeOut is a fuse_write_out body (size, padding) in the host's order.
func writeOut(size uint32) []byte {
	return binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, size), 0)
}

// bareKernel is a Kernel with no server: requests go into a socket only
// the test reads (the second result), and the test injects replies with
// receive.
func bareKernel(t *testing.T) (*Kernel, *os.File) {
	kernelEnd, other, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kernelEnd.Close(); other.Close() })
	return &Kernel{
		t: t, conn: kernelEnd, timeout: time.Second,
		notes:   make(chan uint64, 4),
		pending: make(map[uint64]*Pending), answered: make(map[uint64]bool),
		nextUnique: 2, nextKh: 1,
	}, other
}

// The fake kernel must catch what the real one rejects.
func TestKernelFlagsViolations(t *testing.T) {
	k, _ := bareKernel(t)
	c := cuse.Caller{Pid: 1}
	f := &File{k: k, Fh: 1, Kh: 7}
	write := func() uint64 { return f.WriteAsync(c, []byte("x")).Unique }
	for _, tc := range []struct {
		name string
		msg  func() []byte
		want string
	}{
		{"length", func() []byte { return reply(write(), 0, make([]byte, 8)...)[:20] }, "length"},
		{"errno range", func() []byte { return reply(write(), -512) }, "outside"},
		{"positive error", func() []byte { return reply(write(), 1) }, "outside"},
		{"error with body", func() []byte { return reply(write(), -5, 1, 2) }, "error reply with"},
		{"wrong size", func() []byte { return reply(write(), 0, 1, 0, 0, 0) }, "want 8"},
		{"wrote more", func() []byte { return reply(write(), 0, writeOut(2)...) }, "claims 2 of 1"},
		{"never sent", func() []byte { return reply(1<<40, 0) }, "never sent"},
		{"interrupt ENOSYS", func() []byte { return reply(k.Interrupt(1<<41).Unique, -int32(unix.ENOSYS)) }, "only EAGAIN"},
		{"notify code", func() []byte { return reply(0, 2, make([]byte, 8)...) }, "notification code"},
		{"notify size", func() []byte { return reply(0, wire.FUSE_NOTIFY_POLL, 1) }, "FUSE_NOTIFY_POLL with"},
	} {
		k.violations = nil
		k.receive(tc.msg())
		if v := k.Violations(); len(v) != 1 || !strings.Contains(v[0], tc.want) {
			t.Errorf("%s: violations %q, want one containing %q", tc.name, v, tc.want)
		}
	}

	// A well-formed reply is delivered, and a second one is flagged.
	k.violations = nil
	p := f.WriteAsync(c, []byte("x"))
	k.receive(reply(p.Unique, 0, writeOut(1)...))
	if r, ok := p.WaitFor(0); !ok || r.Size() != 1 || r.Errno != 0 {
		t.Fatalf("reply = %+v, %v", r, ok)
	}
	k.receive(reply(p.Unique, 0, writeOut(1)...))
	if v := k.Violations(); len(v) != 1 || !strings.Contains(v[0], "twice") {
		t.Errorf("violations %q, want a double answer", v)
	}
	// A poll wake-up is delivered.
	k.receive(reply(0, wire.FUSE_NOTIFY_POLL, binary.NativeEndian.AppendUint64(nil, 7)...))
	if kh := <-k.Notifications(); kh != 7 {
		t.Errorf("notification for kh %d, want 7", kh)
	}
}

// EAGAIN to an INTERRUPT is answered as fuse_dev_do_write does: the
// INTERRUPT is sent again while its request is unanswered, and dropped
// once it is not. Without that, a server whose INTERRUPT overtook the
// request it names (two readers) would leave the caller blocked forever.
func TestKernelResendsInterruptOnEAGAIN(t *testing.T) {
	k, server := bareKernel(t)
	f := &File{k: k, Fh: 1, Kh: 7}
	w := f.WriteAsync(cuse.Caller{Pid: 1}, []byte("x"))
	intr := k.Interrupt(w.Unique)
	buf := make([]byte, 256)
	next := func() fuse.InHeader {
		t.Helper()
		if err := server.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := server.Read(buf)
		if err != nil {
			t.Fatalf("reading what the kernel sent: %v", err)
		}
		h, err := wire.DecodeInHeader(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := next(); h.Opcode != OpWrite {
		t.Fatalf("first request %v, want WRITE", wire.Opcode(h.Opcode))
	}
	for range 2 {
		if h := next(); h.Opcode != OpInterrupt || h.Unique != intr.Unique {
			t.Fatalf("got %v unique %#x, want INTERRUPT %#x", wire.Opcode(h.Opcode), h.Unique, intr.Unique)
		}
		k.receive(reply(intr.Unique, -int32(unix.EAGAIN)))
		if intr.Answered() {
			t.Fatal("EAGAIN to the INTERRUPT of a pending request completed it")
		}
	}
	if h := next(); h.Opcode != OpInterrupt {
		t.Fatalf("got %v, want the INTERRUPT once more", wire.Opcode(h.Opcode))
	}
	k.receive(reply(w.Unique, -int32(unix.EINTR)))
	k.receive(reply(intr.Unique, -int32(unix.EAGAIN)))
	if r, ok := intr.WaitFor(0); !ok || r.Errno != unix.EAGAIN {
		t.Fatalf("INTERRUPT of an answered request: %+v, %v; want EAGAIN", r, ok)
	}
	if v := k.Violations(); len(v) != 0 {
		t.Errorf("violations %q", v)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Once the server has closed its end, the kernel has aborted the
// connection (fuse_abort_conn, within the server's close): a request it
// had sent fails ECONNABORTED, one sent afterwards ENOTCONN, even before
// the kernel's reader has seen the close.
func TestKernelAbortAtServerClose(t *testing.T) {
	k, server := bareKernel(t)
	f := &File{k: k, Fh: 1, Kh: 7}
	inFlight := f.WriteAsync(cuse.Caller{Pid: 1}, []byte("x"))
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	after := f.WriteAsync(cuse.Caller{Pid: 1}, []byte("y"))
	if r, ok := after.WaitFor(time.Second); !ok || r.Errno != unix.ENOTCONN {
		t.Errorf("request sent after the server closed: %+v, %v; want ENOTCONN", r, ok)
	}
	if r, ok := inFlight.WaitFor(time.Second); !ok || r.Errno != unix.ECONNABORTED {
		t.Errorf("request in flight when the server closed: %+v, %v; want ECONNABORTED", r, ok)
	}
	if again := f.WriteAsync(cuse.Caller{Pid: 1}, []byte("z")); again.Wait().Errno != unix.ENOTCONN {
		t.Errorf("a later request: %v, want ENOTCONN", again.Wait().Errno)
	}
}

// fatalRecorder stands in for the test in Kernel.t: Fatalf records the
// message and ends the calling goroutine, as the real one does, and onLog
// runs at each Logf.
type fatalRecorder struct {
	testing.TB
	onLog func(string)
	msg   string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Logf(format string, args ...any) {
	if r.onLog != nil {
		r.onLog(fmt.Sprintf(format, args...))
	}
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// A Wait that times out says where the request is stuck: unread by the
// server, read and unanswered, or answered late; and whether replies wait
// unread by the fake kernel itself. It logs the goroutines at the timeout.
func TestWaitSaysWhereARequestIsStuck(t *testing.T) {
	k, server := bareKernel(t)
	k.timeout = 20 * time.Millisecond
	rec := &fatalRecorder{TB: t}
	k.t = rec
	f := &File{k: k, Fh: 1, Kh: 7}
	c := cuse.Caller{Pid: 1}
	buf := make([]byte, 256)
	take := func() { // the "server" reads one request
		t.Helper()
		if _, err := server.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(p *Pending) string {
		rec.msg = ""
		done := make(chan struct{})
		go func() { defer close(done); p.Wait() }()
		<-done
		return rec.msg
	}
	var dump string
	rec.onLog = func(s string) { dump = s }

	msg := wait(f.WriteAsync(c, []byte("x")))
	for _, want := range []string{"no reply to WRITE", "not yet read by the server", "no reply in a further"} {
		if !strings.Contains(msg, want) {
			t.Errorf("unread request: %q lacks %q", msg, want)
		}
	}
	if !strings.Contains(dump, "goroutines at the timeout") || !strings.Contains(dump, "TestWaitSaysWhereARequestIsStuck") {
		t.Errorf("no goroutine dump logged: %.200q", dump)
	}
	take()

	// Read and unanswered, with a reply the fake kernel has not read yet
	// (nothing reads it here: a bare kernel has no readLoop).
	p := f.WriteAsync(c, []byte("x"))
	take()
	if _, err := server.Write(reply(1<<40, 0)); err != nil {
		t.Fatal(err)
	}
	msg = wait(p)
	for _, want := range []string{"the server has read every request", "reply bytes wait unread by the fake kernel", "no reply in a further"} {
		if !strings.Contains(msg, want) {
			t.Errorf("unanswered request: %q lacks %q", msg, want)
		}
	}

	// Answered after the timeout.
	p = f.WriteAsync(c, []byte("x"))
	take()
	rec.onLog = func(string) { k.receive(reply(p.Unique, 0, writeOut(1)...)) }
	if msg = wait(p); !strings.Contains(msg, "after the timeout (late, not lost)") {
		t.Errorf("late reply: %q", msg)
	}
}
