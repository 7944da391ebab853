package cusetest

import (
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

// bareKernel is a Kernel with no server: requests go into a socket nobody
// reads, and the test injects replies with receive.
func bareKernel(t *testing.T) *Kernel {
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
	}
}

// The fake kernel must catch what the real one rejects.
func TestKernelFlagsViolations(t *testing.T) {
	k := bareKernel(t)
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
		{"wrote more", func() []byte { return reply(write(), 0, 2, 0, 0, 0, 0, 0, 0, 0) }, "claims 2 of 1"},
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
	k.receive(reply(p.Unique, 0, 1, 0, 0, 0, 0, 0, 0, 0))
	if r, ok := p.WaitFor(0); !ok || r.Size() != 1 || r.Errno != 0 {
		t.Fatalf("reply = %+v, %v", r, ok)
	}
	k.receive(reply(p.Unique, 0, 1, 0, 0, 0, 0, 0, 0, 0))
	if v := k.Violations(); len(v) != 1 || !strings.Contains(v[0], "twice") {
		t.Errorf("violations %q, want a double answer", v)
	}
	// A poll wake-up is delivered.
	k.receive(reply(0, wire.FUSE_NOTIFY_POLL, 7, 0, 0, 0, 0, 0, 0, 0))
	if kh := <-k.Notifications(); kh != 7 {
		t.Errorf("notification for kh %d, want 7", kh)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
