//go:build e2e

package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad"
)

var cmRegistration = hw.Registration{MgmtClass: mgmtClassCM, ClassVersion: cmClassVer, Methods: []uint8{mgmtMethodSend}}

// rxePorts discovers rxe0 and rxe1 through hw/umad and returns their port 1.
func rxePorts(t *testing.T) (p0, p1 hw.Port) {
	t.Helper()
	devs, err := umad.Discover(umad.Options{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]hw.Device{}
	for _, d := range devs {
		byName[d.Name()] = d
	}
	for _, n := range []string{"rxe0", "rxe1"} {
		if byName[n] == nil || len(byName[n].Ports()) != 1 {
			t.Fatalf("discovered %v: want rxe0 and rxe1 with one port each", devs)
		}
	}
	return byName["rxe0"].Ports()[0], byName["rxe1"].Ports()[0]
}

// linkLocal returns the port's link-local GID entry (index 0 in the guest).
func linkLocal(t *testing.T, p hw.Port) hw.GIDEntry {
	t.Helper()
	a, err := p.Attr()
	if err != nil {
		t.Fatal(err)
	}
	if a.LinkLayer != hw.LinkEthernet || a.State != hw.PortActive {
		t.Fatalf("%s port %d: %v %v, want an ACTIVE Ethernet port", p.Device().Name(), p.Num(), a.LinkLayer, a.State)
	}
	for _, e := range a.GIDs {
		if e.GID.Addr().IsLinkLocalUnicast() {
			return e
		}
	}
	t.Fatalf("%s: no link-local GID in %v", p.Device().Name(), a.GIDs)
	return hw.GIDEntry{}
}

func openCM(t *testing.T, p hw.Port) hw.Endpoint {
	t.Helper()
	ep, err := p.OpenMAD(cmRegistration)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

func cmMAD(attr uint16, tid uint64, fill byte) *hw.MAD {
	var m hw.MAD
	m[0], m[1], m[2], m[3] = 1, mgmtClassCM, cmClassVer, mgmtMethodSend
	binary.BigEndian.PutUint64(m[8:], tid)
	binary.BigEndian.PutUint16(m[16:], attr)
	for i := 24; i < len(m); i++ {
		m[i] = fill + byte(i)
	}
	return &m
}

func recvCM(t *testing.T, ep hw.Endpoint) hw.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := ep.Recv(ctx)
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return r
}

// checkArrived compares a received MAD with the one sent: everything but
// the upper half of the TID, which umad replaces with the agent's hi_tid.
func checkArrived(t *testing.T, got *hw.Received, sent *hw.MAD, from hw.GIDEntry, toIndex int) {
	t.Helper()
	gotTID, sentTID := binary.BigEndian.Uint64(got.MAD[8:]), binary.BigEndian.Uint64(sent[8:])
	if uint32(gotTID) != uint32(sentTID) {
		t.Errorf("TID %#x, want low 32 bits of %#x", gotTID, sentTID)
	}
	t.Logf("TID sent %#016x, received %#016x", sentTID, gotTID)
	g, s := got.MAD, *sent
	copy(g[8:12], s[8:12])
	if g != s {
		t.Errorf("MAD changed in transit (beyond the TID's upper half)")
	}
	if got.Src.GRH == nil {
		t.Fatalf("received without GRH: %+v", got.Src)
	}
	t.Logf("source %+v, GRH %+v", got.Src, *got.Src.GRH)
	if got.Src.GRH.GID != from.GID || int(got.Src.GRH.SGIDIndex) != toIndex || got.Src.QPN != 1 {
		t.Errorf("source %+v GRH %+v, want GID %v, local GID index %d, QPN 1", got.Src, *got.Src.GRH, from.GID, toIndex)
	}
}

// TestUMADExchangeLinkLocal: rxe0 and rxe1 exchange CM-class MADs through
// hw/umad both ways over their link-local GIDs; the reply goes to the
// received source address unchanged, as cmcore answers.
func TestUMADExchangeLinkLocal(t *testing.T) {
	p0, p1 := rxePorts(t)
	g0, g1 := linkLocal(t, p0), linkLocal(t, p1)
	e0, e1 := openCM(t, p0), openCM(t, p1)
	ctx := context.Background()

	req := cmMAD(0x0010, 0xdeadbeef_12345678, 1)
	dst := hw.Address{QPN: 1, QKey: 0x80010000, GRH: &hw.GRH{GID: g1.GID, SGIDIndex: uint8(g0.Index), HopLimit: 64}}
	start := time.Now()
	if err := e0.Send(ctx, dst, req); err != nil {
		t.Fatalf("rxe0 → rxe1: %v", err)
	}
	t.Logf("first send (with MAC resolution) took %v", time.Since(start))
	r := recvCM(t, e1)
	checkArrived(t, &r, req, g0, g1.Index)

	rep := cmMAD(0x0013, uint64(binary.BigEndian.Uint32(r.MAD[12:16])), 2)
	if err := e1.Send(ctx, r.Src, rep); err != nil {
		t.Fatalf("rxe1 → rxe0 (echoing the source): %v", err)
	}
	back := recvCM(t, e0)
	checkArrived(t, &back, rep, g1, g0.Index)

	// A burst both ways at once: nothing lost on an idle link.
	const n = 50
	errc := make(chan error, 2)
	for _, s := range []struct {
		ep  hw.Endpoint
		dst hw.Address
	}{{e0, dst}, {e1, r.Src}} {
		go func() {
			for i := range n {
				if err := s.ep.Send(ctx, s.dst, cmMAD(0x0014, uint64(i), 3)); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for _, ep := range []hw.Endpoint{e0, e1} {
		for range n {
			recvCM(t, ep)
		}
	}
	for i, ep := range []hw.Endpoint{e0, e1} {
		if s := ep.(*umad.Endpoint).Stats(); s.Received != n+1 || s.Overflow+s.Malformed+s.SendFailures != 0 {
			t.Errorf("rxe%d endpoint stats %+v", i, s)
		}
	}
}

// reachedPeers opens CM endpoints on rxe0 and rxe1 and sends one MAD from
// rxe0 to rxe1 (to1), so that the kernel has resolved rxe1's MAC; the MAD
// waits on e1.
func reachedPeers(t *testing.T) (g0, g1 hw.GIDEntry, e0, e1 hw.Endpoint, to1 hw.Address) {
	t.Helper()
	p0, p1 := rxePorts(t)
	g0, g1 = linkLocal(t, p0), linkLocal(t, p1)
	e0, e1 = openCM(t, p0), openCM(t, p1)
	to1 = hw.Address{QPN: 1, GRH: &hw.GRH{GID: g1.GID, SGIDIndex: uint8(g0.Index), HopLimit: 64}}
	if err := e0.Send(context.Background(), to1, cmMAD(0x10, 1, 0)); err != nil {
		t.Fatal(err)
	}
	return g0, g1, e0, e1, to1
}

// TestUMADSlowSendBlocksNothing: a send to a link-local GID nobody owns
// waits while the kernel tries to resolve its MAC, then fails;
// meanwhile the same endpoint keeps receiving and sending to a known peer.
func TestUMADSlowSendBlocksNothing(t *testing.T) {
	g0, g1, e0, e1, to1 := reachedPeers(t)
	ctx := context.Background()
	to0 := recvCM(t, e1).Src
	if err := e1.Send(ctx, to0, cmMAD(0x13, 1, 0)); err != nil {
		t.Fatal(err)
	}
	recvCM(t, e0)

	nowhere := g1.GID
	nowhere[15] ^= 0x5a
	start := time.Now()
	type result struct {
		err error
		at  time.Duration // when the send returned
	}
	stuck := make(chan result, 1)
	go func() {
		err := e0.Send(ctx, hw.Address{QPN: 1, GRH: &hw.GRH{GID: nowhere, SGIDIndex: uint8(g0.Index), HopLimit: 64}}, cmMAD(0x10, 2, 0))
		stuck <- result{err, time.Since(start)}
	}()
	time.Sleep(200 * time.Millisecond) // let it enter write()

	if err := e1.Send(ctx, to0, cmMAD(0x14, 3, 0)); err != nil {
		t.Fatal(err)
	}
	recvCM(t, e0)
	received := time.Since(start)
	if err := e0.Send(ctx, to1, cmMAD(0x15, 4, 0)); err != nil {
		t.Fatal(err)
	}
	recvCM(t, e1)
	sent := time.Since(start)
	res := <-stuck
	err, blocked := res.err, res.at
	t.Logf("send to %v: %v after %v; meanwhile a receive done at %v, a send at %v", nowhere, err, blocked, received, sent)
	if err == nil {
		t.Fatalf("send to a GID nobody owns succeeded")
	}
	if received >= blocked || sent >= blocked {
		t.Errorf("the slow send held up the endpoint: receive at %v, send at %v, slow send returned at %v", received, sent, blocked)
	}
}

// nowhereSends is how many sends sendsToNowhere starts: more than an
// endpoint has lanes.
const nowhereSends = 2 * umad.DefaultSendFiles

// sendsToNowhere starts nowhereSends sends from e0 to GIDs nobody owns
// (g1's with its last two bytes mark and i), each failing with ETIMEDOUT
// after the kernel's second of resolution, and returns once they had time
// to start; firstReturned waits for them all and says when the first
// returned, since start.
func sendsToNowhere(t *testing.T, e0 hw.Endpoint, g0, g1 hw.GIDEntry, mark byte) (start time.Time, firstReturned func() time.Duration) {
	t.Helper()
	start = time.Now()
	returned := make(chan time.Duration, nowhereSends)
	for i := range nowhereSends {
		nowhere := g1.GID
		nowhere[14], nowhere[15] = mark, byte(i)
		go func() {
			err := e0.Send(context.Background(), hw.Address{QPN: 1, GRH: &hw.GRH{GID: nowhere, SGIDIndex: uint8(g0.Index), HopLimit: 64}}, cmMAD(0x10, uint64(10+i), 0))
			if !errors.Is(err, unix.ETIMEDOUT) {
				t.Errorf("send to %v, which nobody owns: %v, want ETIMEDOUT", nowhere, err)
			}
			returned <- time.Since(start)
		}()
	}
	time.Sleep(200 * time.Millisecond) // let them start resolving
	return start, func() time.Duration {
		first := <-returned
		for range nowhereSends - 1 {
			<-returned
		}
		return first
	}
}

// TestUMADUnresolvedPeersBlockNothing: eight sends to GIDs nobody owns,
// more than the endpoint has lanes (docs/umad.md), each waiting about a
// second for its MAC; meanwhile sends to the peer already reached go out
// and arrive, before the first of the eight has returned.
func TestUMADUnresolvedPeersBlockNothing(t *testing.T) {
	g0, g1, e0, e1, to1 := reachedPeers(t)
	ctx := context.Background()
	recvCM(t, e1)

	start, firstReturned := sendsToNowhere(t, e0, g0, g1, 0x5a)
	for i := range 3 {
		if err := e0.Send(ctx, to1, cmMAD(0x15, uint64(20+i), 0)); err != nil {
			t.Fatal(err)
		}
		recvCM(t, e1)
	}
	sent := time.Since(start)
	first := firstReturned()
	t.Logf("3 sends to the reached peer done at %v; the first of %d to unresolved peers returned at %v", sent, nowhereSends, first)
	if sent >= first {
		t.Errorf("sends to unresolved peers held up the reached one: done at %v, the first unresolved send returned at %v", sent, first)
	}
}

// TestUMADNewPeerResolvesFirst: a first send to a peer the kernel has no
// neighbour entry for has its MAC resolved through rtnetlink before it
// takes a lane (hw/umad/resolve.go), so it waits for none of eight sends
// to GIDs nobody owns started before it; those fail in the resolution,
// none of them in a write.
func TestUMADNewPeerResolvesFirst(t *testing.T) {
	p0, p1 := rxePorts(t)
	g0, g1 := linkLocal(t, p0), linkLocal(t, p1)
	e0, e1 := openCM(t, p0), openCM(t, p1)
	// rxe0's netdev forgets rxe1's MAC: this endpoint has never sent to it.
	if out, err := exec.Command("ip", "-6", "neigh", "flush", "dev", "veth0").CombinedOutput(); err != nil {
		t.Fatalf("ip -6 neigh flush dev veth0: %v: %s", err, out)
	}
	start, firstReturned := sendsToNowhere(t, e0, g0, g1, 0x5b)
	to1 := hw.Address{QPN: 1, GRH: &hw.GRH{GID: g1.GID, SGIDIndex: uint8(g0.Index), HopLimit: 64}}
	if err := e0.Send(context.Background(), to1, cmMAD(0x10, 1, 0)); err != nil {
		t.Fatal(err)
	}
	recvCM(t, e1)
	sent := time.Since(start)
	first := firstReturned()
	const n = nowhereSends
	st := e0.(*umad.Endpoint).Stats()
	t.Logf("first send to rxe1 done at %v; the first of %d to unowned GIDs returned at %v; %+v", sent, n, first, st)
	if sent >= first {
		t.Errorf("a first send to a new peer waited behind sends to unowned GIDs: done at %v, the first of those returned at %v", sent, first)
	}
	if st.Resolved != 1 || st.ResolveFailures != n || st.ResolveUnanswered != 0 {
		t.Errorf("resolutions: %d found, %d failed, %d not told; want 1, %d, 0", st.Resolved, st.ResolveFailures, st.ResolveUnanswered, n)
	}
}

// TestUMADRoCEWithoutGRH: RoCE needs a GRH; hw/umad refuses before the
// kernel would (EINVAL from write()).
func TestUMADRoCEWithoutGRH(t *testing.T) {
	p0, _ := rxePorts(t)
	e0 := openCM(t, p0)
	err := e0.Send(context.Background(), hw.Address{QPN: 1}, cmMAD(0x10, 1, 0))
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("send without GRH: %v, want EINVAL", err)
	}
}

// TestUMADRuntimePoller: a non-blocking umad file is taken by Go's runtime
// poller (umad implements poll), so receives cost no thread and Close wakes
// a blocked Recv.
func TestUMADRuntimePoller(t *testing.T) {
	fd, err := unix.Open("/dev/infiniband/umad0", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "umad0")
	defer f.Close()
	if err := f.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatalf("umad0 is not in the runtime poller: %v", err)
	}
	buf := make([]byte, 64+256)
	if _, err := f.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of an idle umad file: %v, want the deadline", err)
	}

	p0, _ := rxePorts(t)
	ep, err := p0.OpenMAD(cmRegistration)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() {
		_, err := ep.Recv(context.Background())
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	ep.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, hw.ErrClosed) {
			t.Errorf("Recv after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake Recv")
	}
}

// TestUMADKernelCMOwnsClass: with ib_cm loaded (here pulled in by
// rdma_ucm, as librdmacm users do), opening the CM endpoint fails with
// hw.ErrCMClassInUse and names the modules to unload; running exactly the
// command it suggests frees the class.
func TestUMADKernelCMOwnsClass(t *testing.T) {
	p0, _ := rxePorts(t)
	for _, c := range []struct{ load, advice string }{
		{"ib_cm", "modprobe -r ib_cm"},
		{"rdma_ucm", "modprobe -r rdma_ucm rdma_cm ib_cm"},
	} {
		modprobe(t, c.load)
		_, err := p0.OpenMAD(cmRegistration)
		if !errors.Is(err, hw.ErrCMClassInUse) || !errors.Is(err, unix.EINVAL) {
			t.Fatalf("OpenMAD with %s loaded: %v, want ErrCMClassInUse (EINVAL)", c.load, err)
		}
		t.Logf("with %s loaded: %v", c.load, err)
		_, cmd, ok := strings.Cut(err.Error(), c.advice)
		if !ok || !strings.HasPrefix(cmd, " (") {
			t.Fatalf("error does not advise exactly %q: %v", c.advice, err)
		}
		args := strings.Fields(c.advice)
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", c.advice, err, out)
		}
		ep, err := p0.OpenMAD(cmRegistration)
		if err != nil {
			t.Fatalf("after %q: %v", c.advice, err)
		}
		ep.Close()
	}
}

// BenchmarkUMADAttr: one port snapshot read from sysfs (AttrMaxAge < 0),
// which is why hw/umad caches it.
func BenchmarkUMADAttr(b *testing.B) {
	devs, err := umad.Discover(umad.Options{AttrMaxAge: -1})
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range devs {
		if d.Name() != "rxe0" {
			continue
		}
		p := d.Ports()[0]
		for b.Loop() {
			if _, err := p.Attr(); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.Fatal("no rxe0")
}

// BenchmarkUMADRoundTrip: a CM MAD rxe0 → rxe1 and the echo back, through
// the kernel (Soft-RoCE over a veth pair, under TCG).
func BenchmarkUMADRoundTrip(b *testing.B) {
	devs, err := umad.Discover(umad.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var p0, p1 hw.Port
	for _, d := range devs {
		switch d.Name() {
		case "rxe0":
			p0 = d.Ports()[0]
		case "rxe1":
			p1 = d.Ports()[0]
		}
	}
	a1, _ := p1.Attr()
	e0, err := p0.OpenMAD(cmRegistration)
	if err != nil {
		b.Fatal(err)
	}
	defer e0.Close()
	e1, err := p1.OpenMAD(cmRegistration)
	if err != nil {
		b.Fatal(err)
	}
	defer e1.Close()
	dst := hw.Address{QPN: 1, GRH: &hw.GRH{GID: a1.GIDs[0].GID, HopLimit: 64}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var tid uint64
	for b.Loop() {
		tid++
		if err := e0.Send(ctx, dst, cmMAD(0x10, tid, 0)); err != nil {
			b.Fatal(err)
		}
		r, err := e1.Recv(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := e1.Send(ctx, r.Src, &r.MAD); err != nil {
			b.Fatal(err)
		}
		if _, err := e0.Recv(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// umad.Listing on the kernel's sysfs: the same while nothing changes, and
// another once rxe1 is deleted and added again under its old name, with
// its old umad file, because sysfs numbers the new class links afresh
// (what the daemon's rescans rely on to skip reading the devices:
// docs/hotplug.md).
func TestUMADListingSeesReregistration(t *testing.T) {
	list := func() string {
		t.Helper()
		s, err := umad.Listing(umad.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	names := func(s string) string { return regexp.MustCompile(`=\d+`).ReplaceAllString(s, "") }
	before := list()
	for _, want := range []string{" rxe0=", " rxe1=", " umad0=", " umad1="} {
		if !strings.Contains(before, want) {
			t.Fatalf("listing %q lacks %s", before, want)
		}
	}
	if again := list(); again != before {
		t.Fatalf("nothing changed, but the listing went from %q to %q", before, again)
	}
	deleteRXE1(t)
	if gone := list(); strings.Contains(gone, " rxe1=") {
		t.Fatalf("listing after rxe1 was deleted: %q", gone)
	}
	addRXE1(t)
	after := list()
	if names(after) != names(before) {
		t.Fatalf("names listed before %q and after %q differ", names(before), names(after))
	}
	if after == before {
		t.Fatalf("rxe1 registered again, but the listing is the same: %q", after)
	}
	t.Logf("before: %q\nafter:  %q", before, after)
}

// BenchmarkPortRefresh reads rxe0's port attributes from sysfs whole, as
// at start and in the refresh once a minute: 1024 GID slots on a
// Soft-RoCE port (docs/perf.md, "Host F, 2026-12-07 (twentieth session):
// many devices at start").
func BenchmarkPortRefresh(b *testing.B) {
	devs, err := umad.Discover(umad.Options{})
	if err != nil {
		b.Fatal(err)
	}
	i := slices.IndexFunc(devs, func(d *umad.Device) bool { return d.Name() == "rxe0" })
	if i < 0 {
		b.Fatal("no rxe0")
	}
	p := devs[i].Ports()[0].(*umad.Port)
	for b.Loop() {
		if _, err := p.Refresh(); err != nil {
			b.Fatal(err)
		}
	}
}
