package umad

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/neigh"
	"github.com/ucmd/ucmd/hw/umad/uapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seqpacket returns a connected SOCK_SEQPACKET pair: like umad, every
// read returns exactly one written packet.
func seqpacket(t testing.TB) (ours, theirs int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// fakeKernel stands in for umad: it writes packets to the endpoint's
// receive file and reads what the endpoint writes to its send files.
type fakeKernel struct {
	t     testing.TB
	recv  int      // our end of the receive file
	sends chan int // our ends of the send files the endpoint opened
	// renew, if set, replaces a lane's agent (default: a new agent id).
	renew func(*sendFile) (uint32, error)
}

func newTestEndpoint(t testing.TB, ll hw.LinkLayer, opts Options) (*Endpoint, *fakeKernel) {
	t.Helper()
	theirs, ours := seqpacket(t)
	unix.SetNonblock(theirs, true)
	rd, err := newRecvFile(theirs, "fake-umad")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rd.(pollerFile); !ok {
		t.Fatalf("socket not served by the runtime poller (%T)", rd)
	}
	k := &fakeKernel{t: t, recv: ours, sends: make(chan int, 16)}
	agent := uint32(7)
	open := func() (*sendFile, error) {
		a, b := seqpacket(t)
		k.sends <- b
		agent++
		return &sendFile{fd: a, agent: agent}, nil
	}
	p := &Port{dev: &Device{name: "rxe0"}, num: 1, umad: "umad0", opts: opts}
	renew := func(sf *sendFile) (uint32, error) {
		if k.renew != nil {
			return k.renew(sf)
		}
		agent++
		return agent, nil
	}
	e, err := newEndpoint(p, ll, rd, open, renew)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, k
}

// drainLanes reads and forgets what the endpoint writes to its lanes
// until the test ends.
func (k *fakeKernel) drainLanes(t *testing.T) {
	go func() {
		for {
			select {
			case fd := <-k.sends:
				go func() {
					buf := make([]byte, 4096)
					for {
						if n, err := unix.Read(fd, buf); err != nil || n == 0 {
							return // the lane closed
						}
					}
				}()
			case <-t.Context().Done():
				return
			}
		}
	}()
}

// sendToNowhere starts n sends to GIDs nobody owns; their errors come on
// the channel returned.
func sendToNowhere(e *Endpoint, n int) <-chan error {
	errs := make(chan error, n)
	for i := range n {
		to := hw.Address{QPN: 1, GRH: &hw.GRH{GID: hw.GID{0xfe, 0x80, 14: 1, 15: byte(i)}, HopLimit: 64}}
		go func() { errs <- e.Send(context.Background(), to, testMAD(byte(10+i))) }()
	}
	return errs
}

// waitFor bounds a wait that only a failure makes long; never a
// synchronisation.
const waitFor = 10 * time.Second

// waitCount waits until c reaches want.
func waitCount(t *testing.T, c *atomic.Int32, want int32, what string) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); c.Load() < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s, want %d", c.Load(), what, want)
		}
	}
}

// sendWithin sends mad to to, failing with why if it takes waitFor.
func sendWithin(t *testing.T, e *Endpoint, to hw.Address, mad *hw.MAD, why string) {
	t.Helper()
	sent := make(chan error, 1)
	go func() { sent <- e.Send(context.Background(), to, mad) }()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatal(why)
	}
}

// cannotTell is a neighbour resolution that rtnetlink cannot answer: the
// send resolves in its write, on a shared lane.
func cannotTell(context.Context, destination) error {
	return errors.New("rtnetlink: no answer (test)")
}

// deliver writes hdr+mad as the kernel would on receipt.
func (k *fakeKernel) deliver(h uapi.UserMADHdr, payload []byte) {
	b := make([]byte, uapi.SizeofUserMADHdr+len(payload))
	h.Encode(b)
	copy(b[uapi.SizeofUserMADHdr:], payload)
	if _, err := unix.Write(k.recv, b); err != nil {
		k.t.Fatal(err)
	}
}

// sent reads one packet from send file fd.
func (k *fakeKernel) sent(fd int) (uapi.UserMADHdr, []byte) {
	b := make([]byte, 4096)
	n, err := unix.Read(fd, b)
	if err != nil {
		k.t.Fatal(err)
	}
	var h uapi.UserMADHdr
	if err := h.Decode(b[:n]); err != nil {
		k.t.Fatal(err)
	}
	return h, b[uapi.SizeofUserMADHdr:n]
}

func testMAD(tid byte) *hw.MAD {
	var m hw.MAD
	m[0], m[1], m[2], m[3] = 1, 0x07, 2, 0x03
	m[15] = tid
	m[255] = 0x5a
	return &m
}

func recvWithin(t *testing.T, e hw.Endpoint) hw.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.Recv(ctx)
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return r
}

func TestRecvDecodesSource(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkEthernet, Options{})
	src := uapi.UserMADHdr{
		ID: 0, Length: 320, QPN: 1, LID: 0, GRHPresent: 1, GIDIndex: 1, HopLimit: 64,
		TrafficClass: 2, FlowLabel: 0x12345, PKeyIndex: 0,
		GID: [16]byte{0xfe, 0x80, 15: 2},
	}
	k.deliver(src, testMAD(1)[:])
	r := recvWithin(t, e)
	want := hw.GRH{GID: hw.GID{0xfe, 0x80, 15: 2}, SGIDIndex: 1, HopLimit: 64, TrafficClass: 2, FlowLabel: 0x12345}
	if r.Src.GRH == nil || *r.Src.GRH != want || r.Src.QPN != 1 || r.MAD != *testMAD(1) {
		t.Fatalf("received %+v GRH %+v", r.Src, r.Src.GRH)
	}

	ib := uapi.UserMADHdr{Length: 320, QPN: 1, LID: 0x12, SL: 3, PathBits: 1, PKeyIndex: 2}
	k.deliver(ib, testMAD(2)[:])
	r = recvWithin(t, e)
	if (r.Src != hw.Address{LID: 0x12, SL: 3, PathBits: 1, QPN: 1, PKeyIndex: 2}) {
		t.Fatalf("received %+v", r.Src)
	}
}

func TestRecvDropsBadPackets(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkInfiniBand, Options{QueueLen: 2})
	k.deliver(uapi.UserMADHdr{Status: uint32(unix.ETIMEDOUT), Length: 88}, testMAD(1)[:24]) // a send handed back
	k.deliver(uapi.UserMADHdr{QPN: 1}, testMAD(2)[:100])                                    // truncated
	unix.Write(k.recv, []byte{1, 2, 3})                                                     // not even a header
	for i := range 4 {
		k.deliver(uapi.UserMADHdr{QPN: 1}, testMAD(byte(10 + i))[:])
	}
	// The queue holds 2; the reader keeps going, so wait for the count.
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Overflow < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s := e.Stats(); s != (Stats{Received: 2, Overflow: 2, Malformed: 2, SendFailures: 1}) {
		t.Fatalf("stats %+v", s)
	}
	if r := recvWithin(t, e); r.MAD[15] != 10 {
		t.Errorf("first MAD has TID %d, want 10", r.MAD[15])
	}
}

func TestSendEncodes(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkEthernet, Options{})
	dst := hw.Address{QPN: 1, QKey: 0x80010000, PKeyIndex: 0,
		GRH: &hw.GRH{GID: hw.GID{0xfe, 0x80, 15: 2}, SGIDIndex: 1, HopLimit: 64, TrafficClass: 4, FlowLabel: 7}}
	if err := e.Send(context.Background(), dst, testMAD(3)); err != nil {
		t.Fatal(err)
	}
	h, payload := k.sent(<-k.sends)
	want := uapi.UserMADHdr{ID: 8, QPN: 1, QKey: 0x80010000, GRHPresent: 1, GIDIndex: 1, HopLimit: 64,
		TrafficClass: 4, GID: [16]byte{0xfe, 0x80, 15: 2}, FlowLabel: 7}
	if h != want {
		t.Errorf("header %+v, want %+v", h, want)
	}
	if !bytes.Equal(payload, testMAD(3)[:]) {
		t.Errorf("payload is %d bytes, differs from the MAD", len(payload))
	}
	// Echoing a received source back reproduces its GRH.
	if r := addressFromHdr(&want); *r.GRH != *dst.GRH {
		t.Errorf("round trip GRH %+v", r.GRH)
	}

	if err := e.Send(context.Background(), hw.Address{QPN: 1}, testMAD(4)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RoCE send without GRH: %v, want EINVAL", err)
	}
}

func TestSendErrorsCarryContext(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkInfiniBand, Options{})
	e.Send(context.Background(), hw.Address{LID: 1, QPN: 1}, testMAD(1))
	unix.Shutdown(<-k.sends, unix.SHUT_RD) // the peer stops reading: writes fail with EPIPE
	err := e.Send(context.Background(), hw.Address{LID: 0x42, QPN: 1}, testMAD(2))
	if !errors.Is(err, unix.EPIPE) || !bytes.Contains([]byte(err.Error()), []byte("LID 0x42")) {
		t.Errorf("send error %v: want EPIPE and the destination", err)
	}
}

// A send stuck in the kernel (RoCE MAC resolution) holds up neither
// receives nor sends on other files.
func TestSlowSendBlocksNothingElse(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkInfiniBand, Options{SendFiles: 2})
	// Fill the first send file so that its next write blocks.
	e.mu.Lock()
	sf := e.idle[0]
	e.mu.Unlock()
	unix.SetNonblock(sf.fd, true)
	for {
		if _, err := unix.Write(sf.fd, make([]byte, 320)); err != nil {
			break
		}
	}
	unix.SetNonblock(sf.fd, false)
	stuckPeer := <-k.sends

	stuck := make(chan error, 1)
	go func() { stuck <- e.Send(context.Background(), hw.Address{LID: 9, QPN: 1}, testMAD(1)) }()
	for idleLanes(e) != 0 { // wait until the stuck send has taken the file
		time.Sleep(time.Millisecond)
	}

	k.deliver(uapi.UserMADHdr{QPN: 1}, testMAD(2)[:])
	if r := recvWithin(t, e); r.MAD[15] != 2 {
		t.Fatal("wrong MAD")
	}
	if err := e.Send(context.Background(), hw.Address{LID: 5, QPN: 1}, testMAD(3)); err != nil {
		t.Fatalf("second send: %v", err)
	}
	if h, _ := k.sent(<-k.sends); h.LID != 5 {
		t.Errorf("second send went to LID %#x", h.LID)
	}
	// With both files busy, a third send waits for one, honouring ctx.
	e.mu.Lock() // hide the free file
	free := e.takeIdle(func(*sendFile) bool { return true })
	e.mu.Unlock()
	defer unix.Close(free.fd)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := e.Send(ctx, hw.Address{LID: 6, QPN: 1}, testMAD(4)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("third send: %v, want the deadline", err)
	}

	select {
	case err := <-stuck:
		t.Fatalf("stuck send returned early: %v", err)
	default:
	}
	// Resolution completes: drain the peer, the stuck send finishes.
	buf := make([]byte, 4096)
	unix.SetNonblock(stuckPeer, true)
	for {
		if _, err := unix.Read(stuckPeer, buf); err != nil {
			break
		}
	}
	if err := <-stuck; err != nil {
		t.Fatalf("stuck send: %v", err)
	}
}

func idleLanes(e *Endpoint) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.idle)
}

func TestSendFileNoiseDiscarded(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkInfiniBand, Options{})
	e.Send(context.Background(), hw.Address{LID: 1, QPN: 1}, testMAD(1))
	peer := <-k.sends
	k.sent(peer)
	unix.Write(peer, make([]byte, 320)) // a stray response to the send-only agent
	// Only every drainEvery-th send of a lane looks: the first looked at
	// nothing, the next drainEvery-2 must not look, the last must.
	for i := 2; i < drainEvery; i++ {
		e.Send(context.Background(), hw.Address{LID: 1, QPN: 1}, testMAD(byte(i)))
		k.sent(peer)
	}
	if s := e.Stats(); s.Discarded != 0 {
		t.Errorf("stats %+v after %d sends, want nothing discarded yet", s, drainEvery-1)
	}
	e.Send(context.Background(), hw.Address{LID: 1, QPN: 1}, testMAD(drainEvery))
	if s := e.Stats(); s.Discarded != 1 {
		t.Errorf("stats %+v after %d sends, want 1 discarded", s, drainEvery)
	}
}

func TestCloseUnblocksRecv(t *testing.T) {
	e, _ := newTestEndpoint(t, hw.LinkInfiniBand, Options{})
	errc := make(chan error)
	go func() {
		_, err := e.Recv(context.Background())
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, hw.ErrClosed) {
		t.Errorf("Recv after Close: %v", err)
	}
	if err := e.Send(context.Background(), hw.Address{LID: 1, QPN: 1}, testMAD(1)); !errors.Is(err, hw.ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	if err := e.Close(); !errors.Is(err, hw.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

func TestRecvCancel(t *testing.T) {
	e, _ := newTestEndpoint(t, hw.LinkInfiniBand, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := e.Recv(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Recv: %v", err)
	}
}

func TestReadErrorReported(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkInfiniBand, Options{})
	k.deliver(uapi.UserMADHdr{QPN: 1}, testMAD(1)[:])
	time.Sleep(10 * time.Millisecond)
	unix.Close(k.recv) // like a removed device: reads stop working
	recvWithin(t, e)   // queued MADs come first
	_, err := e.Recv(context.Background())
	if err == nil || errors.Is(err, hw.ErrClosed) {
		t.Fatalf("Recv after the file failed: %v", err)
	}
	t.Log(err)
}

func TestPollLoopFallback(t *testing.T) {
	// A regular file is not pollable: newRecvFile must not pick the poller.
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, []byte("x"), 0o644)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := newRecvFile(fd, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rd.(*pollLoopFile); !ok {
		t.Fatalf("regular file served by %T", rd)
	}
	rd.Interrupt()
	rd.Close()

	// The poll loop reads packets and wakes up on Interrupt.
	theirs, ours := seqpacket(t)
	pl, err := newPollLoopFile(theirs)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	unix.Write(ours, []byte("mad"))
	b := make([]byte, 16)
	if n, err := pl.Read(b); err != nil || string(b[:n]) != "mad" {
		t.Fatalf("Read %q, %v", b[:n], err)
	}
	errc := make(chan error)
	go func() {
		_, err := pl.Read(b)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	pl.Interrupt()
	if err := <-errc; !errors.Is(err, os.ErrClosed) {
		t.Errorf("interrupted Read: %v", err)
	}
}

// After Deliver, MADs go to the function on the reading goroutine, in
// order, with their source; what was queued before still comes from Recv,
// which then waits for Close.
func TestDeliver(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkInfiniBand, Options{})
	src := uapi.UserMADHdr{Length: 320, QPN: 1, LID: 0x12}
	k.deliver(src, testMAD(1)[:])
	if r := recvWithin(t, e); r.MAD != *testMAD(1) {
		t.Fatalf("queued MAD %x", r.MAD[15])
	}
	got := make(chan hw.Received, 8)
	e.Deliver(func(r *hw.Received) { got <- *r })
	for tid := byte(2); tid < 6; tid++ {
		k.deliver(src, testMAD(tid)[:])
	}
	for tid := byte(2); tid < 6; tid++ {
		select {
		case r := <-got:
			if r.MAD != *testMAD(tid) || r.Src.LID != 0x12 {
				t.Fatalf("delivered MAD %x from %+v, want %x", r.MAD[15], r.Src, tid)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("MAD %x not delivered", tid)
		}
	}
	errc := make(chan error)
	go func() {
		_, err := e.Recv(context.Background())
		errc <- err
	}()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, hw.ErrClosed) {
		t.Errorf("Recv with Deliver set, after Close: %v", err)
	}
	if st := e.Stats(); st.Received != 5 || st.Overflow != 0 {
		t.Errorf("stats %+v", st)
	}
}

// On RoCE, sends to peers whose MAC does not resolve (each write held for
// about a second, then ETIMEDOUT) take at most half the lanes: a peer a
// send already reached still gets a lane while they block, and a peer
// whose send failed goes back to the shared half.
func TestUnresolvedPeersShareHalfTheLanes(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkEthernet, Options{SendFiles: 4})
	e.resolve = cannotTell
	k.drainLanes(t)
	good := hw.GID{0xfe, 0x80, 15: 2}
	release := make(chan struct{})
	var blocked atomic.Int32
	e.write = func(fd int, b []byte) error {
		var h uapi.UserMADHdr
		if err := h.Decode(b); err != nil {
			return err
		}
		if hw.GID(h.GID) != good {
			blocked.Add(1)
			defer blocked.Add(-1)
			<-release // resolution that never answers
			return unix.ETIMEDOUT
		}
		return writeMAD(fd, b)
	}
	to := func(g hw.GID) hw.Address { return hw.Address{QPN: 1, GRH: &hw.GRH{GID: g, HopLimit: 64}} }
	ctx := context.Background()
	if err := e.Send(ctx, to(good), testMAD(1)); err != nil {
		t.Fatal(err)
	}

	bad := sendToNowhere(e, 8)
	waitCount(t, &blocked, 2, "sends to unresolved peers in their writes")
	// The reached peer: a lane at once, as often as it likes.
	for i := range 5 {
		sendWithin(t, e, to(good), testMAD(byte(20+i)), "a send to a reached peer waited behind blocked sends to unresolved ones")
	}
	if n := blocked.Load(); n != 2 {
		t.Errorf("%d sends to unresolved peers in their writes, want 2 (half of 4 lanes)", n)
	}
	close(release)
	for range 8 {
		if err := <-bad; !errors.Is(err, unix.ETIMEDOUT) {
			t.Errorf("send to an unresolved peer: %v, want ETIMEDOUT", err)
		}
	}
	if got := resolvedCount(e); got != 1 {
		t.Errorf("%d destinations resolved, want the one reached", got)
	}
	// The reached peer stops answering: it shares the half again.
	good[15] = 3 // the fake now fails the old good peer
	if err := e.Send(ctx, to(hw.GID{0xfe, 0x80, 15: 2}), testMAD(30)); !errors.Is(err, unix.ETIMEDOUT) {
		t.Errorf("send to the peer gone: %v, want ETIMEDOUT", err)
	}
	if got := resolvedCount(e); got != 0 {
		t.Errorf("%d destinations resolved after the peer's send failed, want 0", got)
	}
	// A MAD from a new peer: umad resolved it to deliver it, so the
	// answer takes any lane.
	from := hw.GID{0xfe, 0x80, 15: 7}
	k.deliver(uapi.UserMADHdr{QPN: 1, GRHPresent: 1, GIDIndex: 0, GID: from}, testMAD(40)[:])
	recvWithin(t, e)
	if resolved, _ := e.lookup(destination{gid: from}); !resolved {
		t.Error("the sender of a MAD received is not taken as reached")
	}
}

func resolvedCount(e *Endpoint) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.resolved)
}

// A send to a peer whose last send failed less than failedFor ago fails
// at once, without a lane: retransmissions to a peer nobody answers for
// take no more lane time than the first send did.
func TestUnreachedPeerFailsAtOnce(t *testing.T) {
	e, _ := newTestEndpoint(t, hw.LinkEthernet, Options{SendFiles: 4})
	e.resolve = cannotTell
	clock := time.Unix(1000, 0)
	e.now = func() time.Time { return clock }
	release := make(chan struct{})
	var writes, inWrite atomic.Int32
	e.write = func(fd int, b []byte) error {
		writes.Add(1)
		inWrite.Add(1)
		defer inWrite.Add(-1)
		<-release
		return unix.ETIMEDOUT
	}
	to := hw.Address{QPN: 1, GRH: &hw.GRH{GID: hw.GID{0xfe, 0x80, 15: 0x99}, HopLimit: 64}}
	ctx := context.Background()

	// Four sends at once: two write (half the lanes), the two behind them
	// find the peer unreachable once they may go, and write nothing.
	errs := make(chan error, 4)
	for i := range 4 {
		go func() { errs <- e.Send(ctx, to, testMAD(byte(i))) }()
	}
	const waitFor = 10 * time.Second // a failure's bound, never a synchronisation
	for deadline := time.Now().Add(waitFor); inWrite.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sends in write, want 2", inWrite.Load())
		}
	}
	close(release)
	for range 4 {
		if err := <-errs; !errors.Is(err, unix.ETIMEDOUT) {
			t.Errorf("send to an unreachable peer: %v, want ETIMEDOUT", err)
		}
	}
	if n := writes.Load(); n != 2 {
		t.Errorf("%d writes for four sends to one unreachable peer, want 2", n)
	}
	// Within failedFor: no write. After it: the peer is tried again.
	clock = clock.Add(failedFor - time.Millisecond)
	if err := e.Send(ctx, to, testMAD(5)); !errors.Is(err, unix.ETIMEDOUT) || writes.Load() != 2 {
		t.Errorf("send %v after the failure: %v with %d writes, want ETIMEDOUT and no write", failedFor-time.Millisecond, err, writes.Load())
	}
	clock = clock.Add(time.Millisecond)
	if err := e.Send(ctx, to, testMAD(6)); !errors.Is(err, unix.ETIMEDOUT) || writes.Load() != 3 {
		t.Errorf("send %v after the failure: %v with %d writes, want a write that fails", failedFor, err, writes.Load())
	}
}

// Only a write that failed to resolve the peer (no route, no answer)
// makes it unreached for failedFor; one that failed for another reason
// (here EINVAL, as for a GID index that went away) leaves the next send
// to try again and meet the real error.
func TestOnlyResolutionFailuresMarkUnreached(t *testing.T) {
	e, _ := newTestEndpoint(t, hw.LinkEthernet, Options{SendFiles: 4})
	e.resolve = cannotTell
	var writes atomic.Int32
	fail := unix.EINVAL
	e.write = func(int, []byte) error { writes.Add(1); return fail }
	to := hw.Address{QPN: 1, GRH: &hw.GRH{GID: hw.GID{0xfe, 0x80, 15: 0x77}, HopLimit: 64}}
	for i := range 2 {
		if err := e.Send(context.Background(), to, testMAD(byte(i))); !errors.Is(err, unix.EINVAL) {
			t.Errorf("send %d: %v, want the write's EINVAL", i, err)
		}
	}
	if n := writes.Load(); n != 2 {
		t.Errorf("%d writes for two sends failing with EINVAL, want 2", n)
	}
	for _, errno := range []unix.Errno{unix.EHOSTUNREACH, unix.ENETUNREACH, unix.ETIMEDOUT} {
		to.GRH.GID[14]++
		fail = errno
		e.Send(context.Background(), to, testMAD(3))
		before := writes.Load()
		if err := e.Send(context.Background(), to, testMAD(4)); !errors.Is(err, unix.ETIMEDOUT) || writes.Load() != before {
			t.Errorf("send after a write failing with %v: %v with %d more writes, want ETIMEDOUT and none", errno, err, writes.Load()-before)
		}
	}
}

// A full map of unreached peers first forgets those whose failure is past
// failedFor: a peer that failed a moment ago stays unreached, where the
// whole map used to be cleared and its next send held a lane again.
func TestUnreachedKeepsRecentFailures(t *testing.T) {
	e, _ := newTestEndpoint(t, hw.LinkEthernet, Options{SendFiles: 4})
	clock := time.Unix(1000, 0)
	e.now = func() time.Time { return clock }
	peer := func(i int) destination {
		return destination{gid: hw.GID{0xfe, 0x80, 12: byte(i >> 16), 13: byte(i >> 8), 14: byte(i), 15: 1}}
	}
	for i := range maxResolved - 1 {
		e.learn(peer(i), false)
	}
	clock = clock.Add(failedFor)
	recent := peer(maxResolved)
	e.learn(recent, false)
	clock = clock.Add(time.Millisecond)
	e.learn(peer(maxResolved+1), false) // the map is full
	if _, ago := e.lookup(recent); ago != time.Millisecond {
		t.Errorf("a peer that failed 1ms ago, after the map filled: failed %v ago, want 1ms", ago)
	}
	e.mu.Lock()
	n := len(e.unreached)
	e.mu.Unlock()
	if n != 2 {
		t.Errorf("%d peers unreached, want the 2 that failed within failedFor", n)
	}
}

// A failure to open the rtnetlink socket is tried again after neighRetry,
// not kept for the endpoint's life.
func TestNeighOpenRetried(t *testing.T) {
	e, _ := newTestEndpoint(t, hw.LinkEthernet, Options{SendFiles: 4})
	clock := time.Unix(1000, 0)
	e.now = func() time.Time { return clock }
	saved := openNeigh
	t.Cleanup(func() { openNeigh = saved })
	opens := 0
	openNeigh = func() (*neigh.Resolver, error) {
		opens++
		if opens == 1 {
			return nil, unix.EMFILE
		}
		return neigh.Open()
	}
	for range 2 {
		if _, err := e.neighbours(); !errors.Is(err, unix.EMFILE) {
			t.Fatalf("neighbours: %v, want the open's EMFILE", err)
		}
	}
	if opens != 1 {
		t.Errorf("%d opens within neighRetry, want 1", opens)
	}
	clock = clock.Add(neighRetry)
	if r, err := e.neighbours(); err != nil || r == nil || opens != 2 {
		t.Errorf("after neighRetry: %v, %v with %d opens; want a resolver from a second open", r, err, opens)
	}
}

// A send that was opening its lane when Close ran writes nothing once the
// open returns: no MAD goes out after Close has returned but one whose
// write had begun.
func TestNoSendAfterClose(t *testing.T) {
	e, _ := newTestEndpoint(t, hw.LinkInfiniBand, Options{SendFiles: 4})
	var writes atomic.Int32
	e.write = func(int, []byte) error { writes.Add(1); return nil }
	opening, open := make(chan struct{}), make(chan struct{})
	next := e.openSend
	e.openSend = func() (*sendFile, error) {
		close(opening)
		<-open
		return next()
	}
	e.mu.Lock()
	e.idle = nil // the first lane is in use: the send opens another
	e.mu.Unlock()
	sent := make(chan error, 1)
	go func() { sent <- e.Send(context.Background(), hw.Address{LID: 2, QPN: 1}, testMAD(1)) }()
	<-opening
	e.Close()
	close(open)
	if err := <-sent; !errors.Is(err, hw.ErrClosed) {
		t.Errorf("a send whose lane opened after Close: %v, want ErrClosed", err)
	}
	if n := writes.Load(); n != 0 {
		t.Errorf("%d writes after Close returned, want none", n)
	}
}
