package ucm_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"golang.org/x/sys/unix"
)

const wait = 5 * time.Second

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErrno(t testing.TB, what string, err error, want unix.Errno) {
	t.Helper()
	if got := conformance.Errno(err); got != want {
		t.Errorf("%s: got %v (%v), want %v", what, got, err, want)
	}
}

// env is a fake device with a listening file b and an active file a.
type env struct {
	d        *fakedut.DUT
	a, b     *conformance.Client
	path     abi.PathRec
	listener uint32
	sid      uint64
}

func newEnv(t *testing.T, opts *fakedut.Options) *env {
	t.Helper()
	e := &env{d: fakedut.New(t, opts), sid: 0x1000}
	var err error
	e.a, err = conformance.NewClient(e.d, false)
	must(t, err)
	e.b, err = conformance.NewClient(e.d, false)
	must(t, err)
	e.path, _ = e.d.LoopbackPath()
	e.listener, err = e.b.CreateID(0xb0)
	must(t, err)
	must(t, e.b.Listen(e.listener, e.sid, 0))
	return e
}

// req creates an id on a and sends a REQ to b's listener.
func (e *env) req(t *testing.T, uid uint64) uint32 {
	t.Helper()
	id, err := e.a.CreateID(uid)
	must(t, err)
	must(t, e.a.SendREQ(e.a.REQ(id, e.sid, e.path, 0x100+id)))
	return id
}

func (e *env) waitReadable(t *testing.T, c *conformance.Client) {
	t.Helper()
	ok, err := c.F.WaitReadable(wait)
	must(t, err)
	if !ok {
		t.Fatal("no event")
	}
}

func fake(c *conformance.Client) *fakedut.File { return c.F.(*fakedut.File) }

// eventGet encodes a GET_EVENT with fresh 255-byte buffers.
func eventGet(c *conformance.Client) ([]byte, *abi.EventGet) {
	g := &abi.EventGet{
		Response: c.Mem.Alloc(abi.EventRespSize), Data: c.Mem.Alloc(255), Info: c.Mem.Alloc(255),
		DataLen: 255, InfoLen: 255,
	}
	return conformance.Encode(abi.CmdEvent, abi.EventRespSize, g), g
}

func replyOf(t testing.TB, p *cusetest.Pending) cusetest.Reply {
	t.Helper()
	select {
	case <-p.Done():
		return p.Wait()
	case <-time.After(wait):
		t.Fatalf("request %d not answered within %v", p.Unique, wait)
		return cusetest.Reply{}
	}
}

func answered(p *cusetest.Pending, d time.Duration) bool {
	select {
	case <-p.Done():
		return true
	case <-time.After(d):
		return false
	}
}

// gate stalls the device's writes to one address until opened.
type gate struct {
	callermem.Memory
	mu       sync.Mutex
	addr     uint64
	entered  chan struct{}
	open     chan struct{}
	openOnce sync.Once
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) wrap(m callermem.Memory) callermem.Memory { g.Memory = m; return g }

// release opens the gate. Tests also register it as a cleanup after the
// device's, so that a failing test does not leave a request stalled.
func (g *gate) release() { g.openOnce.Do(func() { close(g.open) }) }

func (g *gate) arm(addr uint64) {
	g.mu.Lock()
	g.addr = addr
	g.mu.Unlock()
}

func (g *gate) Write(pid int, addr uint64, b []byte) error {
	g.mu.Lock()
	hit := addr != 0 && addr == g.addr
	if hit {
		g.addr = 0
	}
	g.mu.Unlock()
	if hit {
		close(g.entered)
		<-g.open
	}
	return g.Memory.Write(pid, addr, b)
}
