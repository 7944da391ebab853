package umad

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad/uapi"
)

// umadModel stands in for umad's send side as lanes.go relies on it: a MAD
// written to a file stays on that file's send list until it completes,
// and completions come only when the model says so, here only when an
// agent is unregistered (which waits for them). A write whose agent and
// TID equal those of a MAD on the list is what umad refuses with EINVAL.
type umadModel struct {
	t     *testing.T
	mu    sync.Mutex
	peers map[int]int // lane fd → the model's end
	agent uint32
	sent  map[[2]uint32]int // (agent, low TID) → MADs accepted
	dups  []string
}

func newUMADModel(t *testing.T) *umadModel {
	return &umadModel{t: t, peers: map[int]int{}, agent: 100, sent: map[[2]uint32]int{}}
}

func (m *umadModel) open() (*sendFile, error) {
	a, b := seqpacket(m.t)
	unix.SetNonblock(b, true)
	// Room for every MAD of the test on one file, as an old lane policy
	// (any idle file) would put them, so that it fails rather than hangs.
	unix.SetsockoptInt(a, unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peers[a] = b
	m.agent++
	return &sendFile{fd: a, agent: m.agent}, nil
}

// complete reads what is on fd's send list, checking it for two MADs of
// one agent with one TID.
func (m *umadModel) complete(fd int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	onList := map[[2]uint32]bool{}
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(m.peers[fd], buf)
		if err != nil {
			return
		}
		var h uapi.UserMADHdr
		if err := h.Decode(buf[:n]); err != nil {
			m.t.Error(err)
			return
		}
		k := [2]uint32{h.ID, binary.BigEndian.Uint32(buf[uapi.SizeofUserMADHdr+12:])}
		if onList[k] {
			m.dups = append(m.dups, fmt.Sprintf("agent %d TID %#x", k[0], k[1]))
		}
		onList[k] = true
		m.sent[[2]uint32{0, k[1]}]++
	}
}

func (m *umadModel) renew(sf *sendFile) (uint32, error) {
	m.complete(sf.fd) // unregistration waits for the agent's sends
	m.mu.Lock()
	defer m.mu.Unlock()
	m.agent++
	return m.agent, nil
}

func (m *umadModel) completeAll() {
	m.mu.Lock()
	fds := make([]int, 0, len(m.peers))
	for fd := range m.peers {
		fds = append(fds, fd)
	}
	m.mu.Unlock()
	for _, fd := range fds {
		m.complete(fd)
	}
}

// endpoint is an Endpoint whose lanes are the model's files.
func (m *umadModel) endpoint(sendFiles int, renew func(*sendFile) (uint32, error)) *Endpoint {
	theirs, _ := seqpacket(m.t)
	unix.SetNonblock(theirs, true)
	rd, err := newRecvFile(theirs, "fake-umad")
	if err != nil {
		m.t.Fatal(err)
	}
	p := &Port{dev: &Device{name: "rxe0"}, num: 1, umad: "umad0", opts: Options{SendFiles: sendFiles}}
	e, err := newEndpoint(p, hw.LinkInfiniBand, rd, m.open, renew)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { e.Close() })
	return e
}

func cmMADWithTID(attr uint16, tid uint32) *hw.MAD {
	m := testMAD(0)
	binary.BigEndian.PutUint32(m[12:16], tid)
	binary.BigEndian.PutUint16(m[16:18], attr)
	return m
}

// With no completion ever reported, the CM's same-TID patterns (RTU then
// DREQ, MRA then REJ, DREQ then DREP, a burst of retransmissions) never
// put two MADs of one agent with one TID on a file's send list, and every
// MAD is written once.
func TestSameTIDNeverTwiceInFlightOnOneAgent(t *testing.T) {
	m := newUMADModel(t)
	e := m.endpoint(4, m.renew)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dst := hw.Address{LID: 1, QPN: 1}
	want := map[uint32]int{}
	send := func(tid uint32, attr uint16) {
		if err := e.Send(ctx, dst, cmMADWithTID(attr, tid)); err != nil {
			t.Fatalf("send TID %#x: %v", tid, err)
		}
		want[tid]++
	}
	for r := range uint32(30) { // the socket buffers stand in for send lists: keep them small
		send(r, 0x14)      // RTU
		send(r, 0x15)      // DREQ
		send(1000+r, 0x11) // MRA
		send(1000+r, 0x12) // REJ
		send(2000+r, 0x15) // DREQ
		send(2000+r, 0x16) // DREP (both ends on one port)
	}
	for range 12 { // retransmissions faster than any completion
		send(7777, 0x10)
	}
	m.completeAll()

	if len(m.dups) > 0 {
		t.Errorf("%d MADs would have been refused by umad, e.g. %s", len(m.dups), m.dups[0])
	}
	for tid, n := range want {
		if got := m.sent[[2]uint32{0, tid}]; got != n {
			t.Errorf("TID %#x written %d times, want %d", tid, got, n)
		}
	}
	s := e.Stats()
	if s.Renewals == 0 || s.RenewFailures != 0 {
		t.Errorf("stats %+v: want renewals, no failures", s)
	}
	t.Logf("stats %+v", s)
}

// A lane whose agent cannot be renewed is replaced by a new file, and the
// send still goes out.
func TestRenewFailureOpensNewLane(t *testing.T) {
	m := newUMADModel(t)
	e := m.endpoint(1, func(sf *sendFile) (uint32, error) {
		m.complete(sf.fd) // closing the file waits for its sends too
		return 0, unix.ENODEV
	})
	for range 3 {
		if err := e.Send(context.Background(), hw.Address{LID: 1, QPN: 1}, cmMADWithTID(0x10, 9)); err != nil {
			t.Fatal(err)
		}
	}
	m.completeAll()
	if s := e.Stats(); s.RenewFailures != 2 || len(m.dups) != 0 || m.sent[[2]uint32{0, 9}] != 3 {
		t.Errorf("stats %+v, dups %v, sent %d", s, m.dups, m.sent[[2]uint32{0, 9}])
	}
}

// A send that needs a lane while all are busy waits for one and honours
// its context.
func TestSendWaitsForLane(t *testing.T) {
	e, _ := newTestEndpoint(t, hw.LinkInfiniBand, Options{SendFiles: 1})
	e.mu.Lock()
	busy := e.takeIdle(func(*sendFile) bool { return true })
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := e.Send(ctx, hw.Address{LID: 1, QPN: 1}, testMAD(1)); err != context.DeadlineExceeded {
		t.Fatalf("send with every lane busy: %v, want the deadline", err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Send(context.Background(), hw.Address{LID: 1, QPN: 1}, testMAD(2)) }()
	time.Sleep(10 * time.Millisecond)
	e.release(busy)
	if err := <-done; err != nil {
		t.Fatalf("send after the lane came back: %v", err)
	}
}

// A lane that fails to open gives its place back to the sends waiting for
// one: here the only lane had gone (a renewal failed) and its replacement
// could not be opened, with a second send waiting meanwhile, which must
// then open a lane itself rather than wait for a return that never comes.
func TestFailedOpenWakesWaitingSends(t *testing.T) {
	m := newUMADModel(t)
	e := m.endpoint(1, m.renew)
	e.mu.Lock()
	gone := e.takeIdle(func(*sendFile) bool { return true })
	e.mu.Unlock()
	e.closeLane(gone)

	opening, fail := make(chan struct{}), make(chan struct{})
	var opens atomic.Int32
	e.openSend = func() (*sendFile, error) {
		if opens.Add(1) == 1 {
			close(opening)
			<-fail
			return nil, unix.ENODEV
		}
		return m.open()
	}
	to := hw.Address{LID: 1, QPN: 1}
	first := make(chan error, 1)
	go func() { first <- e.Send(context.Background(), to, cmMADWithTID(0x10, 1)) }()
	<-opening
	second := make(chan error, 1)
	go func() { second <- e.Send(context.Background(), to, cmMADWithTID(0x10, 2)) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		e.mu.Lock()
		w := e.waiting
		e.mu.Unlock()
		if w == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second send never waited for a lane")
		}
	}
	close(fail)
	if err := <-first; !errors.Is(err, unix.ENODEV) {
		t.Errorf("send whose lane failed to open: %v, want ENODEV", err)
	}
	select {
	case err := <-second:
		if err != nil {
			t.Errorf("waiting send: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a send waiting for a lane was not woken when an open failed (10 s)")
	}
	m.completeAll()
}
