package trace

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/internal/status"
)

type fakeDev struct {
	name  string
	ports []hw.Port
}

func (d *fakeDev) Name() string           { return d.name }
func (d *fakeDev) NodeGUID() uint64       { return 1 }
func (d *fakeDev) LocalCAAckDelay() uint8 { return 15 }
func (d *fakeDev) Ports() []hw.Port       { return d.ports }

type fakePort struct {
	dev   hw.Device
	attr  hw.PortAttr
	reads atomic.Int64 // subscribers read it from their goroutines
}

func (p *fakePort) Device() hw.Device { return p.dev }
func (p *fakePort) Num() int          { return 1 }
func (p *fakePort) Attr() (hw.PortAttr, error) {
	p.reads.Add(1)
	return p.attr, nil
}
func (p *fakePort) OpenMAD(hw.Registration) (hw.Endpoint, error) { return nil, nil }

func roceDev() (*fakeDev, *fakePort) {
	d := &fakeDev{name: "rxe0"}
	p := &fakePort{dev: d, attr: hw.PortAttr{
		LinkLayer: hw.LinkEthernet, State: hw.PortActive,
		GIDs:  []hw.GIDEntry{{Index: 1, GID: hw.GID{0xfe, 0x80, 8: 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56}, Type: hw.GIDTypeRoCEv2}},
		PKeys: []uint16{0xffff},
	}}
	d.ports = []hw.Port{p}
	return d, p
}

var peerGRH = hw.GRH{GID: hw.GID{0xfe, 0x80, 8: 0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef}, SGIDIndex: 1, HopLimit: 64}

func observeREQ(h *Hub, dev hw.Device, dir cmcore.MADDirection, comm uint32) {
	observeREQAt(h, dev, dir, comm, t0)
}

func observeREQAt(h *Hub, dev hw.Device, dir cmcore.MADDirection, comm uint32, at time.Time) {
	req := testREQ()
	req.LocalCommID = comm
	var m hw.MAD
	copy(m[:], testMAD(uint64(comm), req))
	g := peerGRH
	h.ObserveMAD(&cmcore.MADEvent{Time: at, Device: dev, Port: 1, Dir: dir, MAD: &m, Peer: hw.Address{QPN: 1, GRH: &g}})
}

func decodeAll(t *testing.T, b []byte) []Event {
	t.Helper()
	var out []Event
	s := NewReader(bytes.NewReader(b))
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// With no subscriber, the hub copies nothing and reads nothing.
func TestHubIdle(t *testing.T) {
	dev, port := roceDev()
	h := NewHub(func(string) []Owner { t.Error("owners read without a subscriber"); return nil }, nil)
	observeREQ(h, dev, cmcore.MADSent, commA)
	if h.Subscribers() != 0 || h.seq.Load() != 0 || port.reads.Load() != 0 {
		t.Fatalf("idle hub did work: %d subscribers, seq %d, %d port reads", h.Subscribers(), h.seq.Load(), port.reads.Load())
	}
	if h.WantsTime() {
		t.Error("an idle hub wants event times: the CM reads its clock per MAD for nothing")
	}
}

// With a subscriber the hub wants event times; an event that came without
// one (the subscriber arrived after the CM asked) gets the hub's time.
func TestHubWantsTime(t *testing.T) {
	dev, _ := roceDev()
	h := NewHub(nil, nil)
	var buf bytes.Buffer
	done, stop := h.Subscribe(Request{}, &buf)
	if !h.WantsTime() {
		t.Error("a subscribed hub wants no event times")
	}
	before := time.Now()
	observeREQAt(h, dev, cmcore.MADSent, commA, time.Time{})
	stop()
	<-done
	evs := decodeAll(t, buf.Bytes())
	if len(evs) != 1 || evs[0].Time.Before(before) {
		t.Fatalf("events %+v, want one timed after %v", evs, before)
	}
}

// A subscriber gets each MAD as an Event: the local GID from the port's
// table at the GRH's SGID index, the P_Key, the owner's pid and name and
// the connection's service id from the ucm ids.
func TestHubEvent(t *testing.T) {
	dev, _ := roceDev()
	owners := func(d string) []Owner {
		if d != "rxe0" {
			t.Errorf("owners of %q", d)
		}
		return []Owner{{PID: 812, Comm: "client", LocalCommID: commA, ServiceID: 0x1234}}
	}
	h := NewHub(owners, nil)
	var buf bytes.Buffer
	done, stop := h.Subscribe(Request{}, &buf)
	observeREQ(h, dev, cmcore.MADSent, commA)
	stop()
	<-done
	evs := decodeAll(t, buf.Bytes())
	if len(evs) != 1 {
		t.Fatalf("%d events: %s", len(evs), buf.Bytes())
	}
	ev := evs[0]
	want := Event{
		Time: t0, Dev: "rxe0", Port: 1, Link: LinkRoCE, Dir: "sent",
		Local:  Endpoint{GID: "fe80::5054:ff:fe12:3456", QPN: 1},
		Remote: Endpoint{GID: "fe80::5054:ff:feab:cdef", QPN: 1},
		PKey:   0xffff, GRH: &GRH{HopLimit: 64}, PID: 812, Comm: "client", ServiceID: 0x1234,
	}
	got := ev
	got.MAD = nil
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Errorf("event\n%s\nwant\n%s", gj, wj)
	}
	if m := ev.Decode(); m.Name != "REQ" || m.LocalCommID != commA || m.ServiceID != 0x1234 {
		t.Errorf("decoded %+v", m)
	}
	if h.Subscribers() != 0 {
		t.Errorf("%d subscribers after stop", h.Subscribers())
	}
}

// gate is a writer whose first Write blocks until released.
type gate struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gate) Write(p []byte) (int, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

// A reader that does not keep up loses MADs, not the CM's time: while the
// subscriber's writer is stuck, ObserveMAD returns at once, the buffer
// (2 MADs) holds the first ones, the rest are counted, and the stream
// says how many were lost where they were lost.
func TestHubSlowReader(t *testing.T) {
	dev, _ := roceDev()
	h := NewHub(nil, nil)
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	done, stop := h.Subscribe(Request{Buffer: 2}, g)
	observeREQ(h, dev, cmcore.MADSent, 1)
	<-g.entered // the subscriber is blocked writing MAD 1
	for c := uint32(2); c <= 10; c++ {
		observeREQ(h, dev, cmcore.MADSent, c) // 2, 3 buffered; 4..10 lost
	}
	close(g.release)
	stop()
	<-done
	var got []string
	for _, ev := range decodeAll(t, g.buf.Bytes()) {
		if ev.Lost > 0 {
			got = append(got, "lost "+itoa(int(ev.Lost)))
			continue
		}
		m := ev.Decode()
		got = append(got, "REQ "+itoa(int(m.LocalCommID)))
	}
	want := []string{"REQ 1", "REQ 2", "REQ 3", "lost 7"}
	if len(got) != len(want) {
		t.Fatalf("stream %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("stream %q, want %q", got, want)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A filter on the service id follows the connection: the REP and RTU
// (which carry no service id) of the matching REQ pass, another
// connection's MADs do not; a device filter drops the other devices.
func TestHubFilter(t *testing.T) {
	dev, _ := roceDev()
	other := &fakeDev{name: "rxe1"}
	other.ports = []hw.Port{&fakePort{dev: other, attr: dev.ports[0].(*fakePort).attr}}
	sid := status.Hex64(0x1234)
	h := NewHub(nil, nil)
	var buf bytes.Buffer
	done, stop := h.Subscribe(Request{Filter: Filter{ServiceID: &sid, Dev: "rxe0"}}, &buf)
	send := func(d hw.Device, dir cmcore.MADDirection, m wire.Message) {
		var mad hw.MAD
		copy(mad[:], testMAD(1, m))
		g := peerGRH
		h.ObserveMAD(&cmcore.MADEvent{Time: t0, Device: d, Port: 1, Dir: dir, MAD: &mad, Peer: hw.Address{QPN: 1, GRH: &g}})
	}
	req := testREQ()
	req.LocalCommID = commA
	otherREQ := testREQ()
	otherREQ.LocalCommID, otherREQ.ServiceID = 0x0c000003, 0x9999
	send(dev, cmcore.MADSent, req)
	send(dev, cmcore.MADSent, otherREQ)
	send(other, cmcore.MADReceived, req)
	send(dev, cmcore.MADReceived, &wire.REP{LocalCommID: commB, RemoteCommID: commA})
	send(dev, cmcore.MADReceived, &wire.REP{LocalCommID: 0x0d000004, RemoteCommID: 0x0c000003})
	send(dev, cmcore.MADSent, &wire.RTU{LocalCommID: commA, RemoteCommID: commB})
	stop()
	<-done
	var got []string
	for _, ev := range decodeAll(t, buf.Bytes()) {
		m := ev.Decode()
		got = append(got, ev.Dev+" "+m.Name)
	}
	if want := "rxe0 REQ,rxe0 REP,rxe0 RTU"; join(got) != want {
		t.Errorf("filtered stream %s, want %s", join(got), want)
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x)
	}
	return b.String()
}

// Over the socket: made with the status socket's access rule (0600), a
// client's request and its stream, a bad request answered with an error,
// and Close ending every subscription.
func TestHubSocket(t *testing.T) {
	dir := t.TempDir()
	ln, err := status.ListenSocket(dir, SocketName)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, SocketName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("trace socket: %v, %v", fi.Mode(), err)
	}
	dev, _ := roceDev()
	h := NewHub(nil, nil)
	h.Serve(ln)
	defer h.Close()

	s, err := Dial(t.Context(), dir, Request{Filter: Filter{CommID: commA}})
	if err != nil {
		t.Fatal(err)
	}
	// Dial returns once the subscription exists.
	if h.Subscribers() != 1 {
		t.Fatalf("%d subscribers after Dial", h.Subscribers())
	}
	observeREQ(h, dev, cmcore.MADSent, 0x77) // filtered out
	observeREQ(h, dev, cmcore.MADSent, commA)
	ev, err := s.Next()
	if err != nil {
		t.Fatal(err)
	}
	if m := ev.Decode(); m.Name != "REQ" || m.LocalCommID != commA {
		t.Errorf("streamed %+v", m)
	}

	c, err := Dial(context.Background(), dir, Request{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("after Close: %v, want EOF", err)
	}
	if h.Subscribers() != 0 {
		t.Errorf("%d subscribers after Close", h.Subscribers())
	}
}

// A request that is not JSON gets one error line and the connection ends.
func TestHubBadRequest(t *testing.T) {
	dir, _ := servedHub(t)
	c, err := netDial(filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "hello\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	s := NewReader(bytes.NewReader([]byte(line)))
	if _, err := s.Next(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("bad trace request")) {
		t.Errorf("bad request answered %q (%v)", line, err)
	}
}

// A request line longer than MaxRequest is refused at once, with a
// reason, before the daemon has buffered more of it.
func TestHubLongRequest(t *testing.T) {
	dir, _ := servedHub(t)
	c, err := net.Dial("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The writer stops at the first failed write: once the hub has
	// answered and closed, the rest of the megabyte is refused.
	go c.Write(bytes.Repeat([]byte{' '}, 1<<20))
	c.SetReadDeadline(time.Now().Add(5 * time.Second)) // the hub's own wait is 10 s
	line, _ := bufio.NewReader(c).ReadString('\n')
	if _, err := NewReader(strings.NewReader(line)).Next(); err == nil || !strings.Contains(err.Error(), "longer than 4096 bytes") {
		t.Errorf("a request of 1 MiB without a newline answered %q (%v)", line, err)
	}
}

// servedHub is a hub serving its socket in a new directory, closed at
// the end of the test.
func servedHub(t *testing.T) (dir string, h *Hub) {
	t.Helper()
	dir = t.TempDir()
	ln, err := status.ListenSocket(dir, SocketName)
	if err != nil {
		t.Fatal(err)
	}
	h = NewHub(nil, nil)
	h.Serve(ln)
	t.Cleanup(func() { h.Close() })
	return dir, h
}

func netDial(path string) (io.ReadWriteCloser, error) { return net.Dial("unix", path) }

// More than MaxSubscribers traces at once: the next one is refused with
// a reason, and one that ends makes room.
func TestHubMaxSubscribers(t *testing.T) {
	dir, _ := servedHub(t)
	var streams []*Stream
	for range MaxSubscribers {
		s, err := Dial(t.Context(), dir, Request{Buffer: 1})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	if _, err := Dial(t.Context(), dir, Request{}); err == nil || !strings.Contains(err.Error(), "too many traces") {
		t.Fatalf("trace %d: %v", MaxSubscribers+1, err)
	}
	for _, s := range streams {
		s.Close()
	}
}

// A trace's buffer costs memory for what waits in it, not for what it may
// hold: sixteen traces that asked for MaxBuffer (a 400-byte record each:
// 26 MB a trace, held by any member of --status-group) and ten refused
// after them allocate next to nothing while no MAD waits.
func TestHubBufferGrowsWithUse(t *testing.T) {
	h := NewHub(nil, nil)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var stops []func()
	for range MaxSubscribers {
		_, stop := h.Subscribe(Request{Buffer: MaxBuffer}, io.Discard)
		stops = append(stops, stop)
	}
	for range 10 {
		done, _ := h.Subscribe(Request{Buffer: MaxBuffer}, io.Discard)
		<-done // refused: closed at once
	}
	runtime.ReadMemStats(&after)
	// Each trace's writer has a 64 KiB buffer: 1 MiB for sixteen.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Errorf("%d traces of MaxBuffer and 10 refused allocated %d bytes, want under 4 MiB", MaxSubscribers, grew)
	}
	if n := h.Subscribers(); n != MaxSubscribers {
		t.Errorf("%d subscribers, want %d", n, MaxSubscribers)
	}
	for _, stop := range stops {
		stop()
	}
}

// Close does not wait for a client that connected and has sent nothing:
// the daemon's shutdown would otherwise wait out its 10 s, with every
// client still blocked in GET_EVENT.
func TestHubCloseEndsSilentClients(t *testing.T) {
	dir := t.TempDir()
	ln, err := status.ListenSocket(dir, SocketName)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHub(nil, nil)
	h.Serve(ln)
	c, err := net.Dial("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Wait until the hub is reading the request.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		h.mu.RLock()
		n := len(h.asking)
		h.mu.RUnlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hub never read the silent client's request")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // the hub's own wait is 10 s
		t.Fatal("Close waited for a client that sent nothing")
	}
}

// walk is what an owner read costs in the tests of their spacing: a large
// device's walk of its ids.
const walk = 2 * time.Millisecond

// walkingHub is a hub whose owner reads each take walk, counted.
func walkingHub(walk time.Duration) (*Hub, *atomic.Int64) {
	walks := new(atomic.Int64)
	return NewHub(func(string) []Owner {
		walks.Add(1)
		time.Sleep(walk)
		return nil
	}, nil), walks
}

// A MAD whose comm id no id has makes the subscriber read the device's
// owners again, a walk of every id under the files' locks. A stream of
// them (a peer naming random comm ids, or connections newer than the last
// read) may not make that walk continuous: the subscribers share one
// table, and a read waits until ten times the last read's time has passed
// since it began.
func TestHubOwnerReadsBounded(t *testing.T) {
	dev, _ := roceDev()
	h, walks := walkingHub(walk)
	var stops []func()
	var dones []<-chan struct{}
	for range 3 {
		done, stop := h.Subscribe(Request{}, io.Discard)
		stops, dones = append(stops, stop), append(dones, done)
	}
	start := time.Now()
	for c := range uint32(150) {
		observeREQ(h, dev, cmcore.MADReceived, 0x1000+c)
		time.Sleep(500 * time.Microsecond)
	}
	for i, stop := range stops {
		stop()
		<-dones[i]
	}
	elapsed := time.Since(start)
	// Each read costs at least walk and is followed by nine more of
	// waiting; the first comes at once.
	if n, most := walks.Load(), int64(elapsed/(10*walk))+2; n > most {
		t.Errorf("%d owner reads in %v for 150 MADs and 3 subscribers, want at most %d", n, elapsed, most)
	}
}

// The owner tables, one per device traced, go with the last subscriber:
// they held a snapshot of each device's ids for the daemon's life.
func TestHubOwnerTablesGoWithTheLastSubscriber(t *testing.T) {
	dev, _ := roceDev()
	h := NewHub(func(string) []Owner { return []Owner{{Listening: true, ServiceID: 1}} }, nil)
	done, stop := h.Subscribe(Request{}, io.Discard)
	h.ownerTable(dev.Name(), 1)
	h.omu.Lock()
	n := len(h.otables)
	h.omu.Unlock()
	if n != 1 {
		t.Fatalf("%d owner tables while tracing, want 1", n)
	}
	stop()
	<-done
	h.omu.Lock()
	n = len(h.otables)
	h.omu.Unlock()
	if n != 0 {
		t.Errorf("%d owner tables after the last subscriber left, want none", n)
	}
}

// The port's attributes the trace shows are read again once older than
// portAttrAge (as of the MADs' times): a GID changed at the same index, or
// a LID the subnet manager changed, showed the old value for the whole
// trace.
func TestPortAttrsReadAgain(t *testing.T) {
	dev, port := roceDev()
	h := NewHub(nil, nil)
	newGID := hw.GID{0xfe, 0x80, 8: 0x50, 0x54, 0x00, 0xff, 0xfe, 0x99, 0x99, 0x99}
	rec := func(seq uint64, at time.Time) *record {
		req := testREQ()
		var m hw.MAD
		copy(m[:], testMAD(seq, req))
		h.seq.Store(seq)
		return &record{seq: seq, time: at, dev: dev, port: 1, dir: cmcore.MADReceived, mad: m,
			peer: hw.Address{QPN: 1}, grh: peerGRH, hasGRH: true}
	}
	var rs resolver
	first, _ := rs.event(h, rec(1, t0))
	port.attr.GIDs = []hw.GIDEntry{{Index: 1, GID: newGID, Type: hw.GIDTypeRoCEv2}} // same index, another address
	soon, _ := rs.event(h, rec(2, t0.Add(time.Second)))
	later, _ := rs.event(h, rec(3, t0.Add(portAttrAge)))
	if first.Local.GID == gidString(newGID) || soon.Local.GID != first.Local.GID {
		t.Errorf("within portAttrAge: local GID %s then %s, want the first read's both times", first.Local.GID, soon.Local.GID)
	}
	if later.Local.GID != gidString(newGID) {
		t.Errorf("after portAttrAge: local GID %s, want the port's new %s", later.Local.GID, gidString(newGID))
	}
}

// One subscriber at a time, each seeing one MAD that misses: the owner
// reads stay spaced across the subscriptions, though the tables go with
// each last subscriber.
func TestHubOwnerReadsBoundedAcrossSubscriptions(t *testing.T) {
	dev, _ := roceDev()
	h, walks := walkingHub(walk)
	start := time.Now()
	for c := range uint32(50) {
		done, stop := h.Subscribe(Request{}, io.Discard)
		n := walks.Load()
		observeREQ(h, dev, cmcore.MADReceived, 0x1000+c)
		for end := time.Now().Add(time.Second); walks.Load() == n && time.Now().Before(end); {
			time.Sleep(100 * time.Microsecond)
		}
		stop()
		<-done
	}
	elapsed := time.Since(start)
	// Each read costs at least walk and is followed by nine more of
	// waiting; the first comes at once.
	if n, most := walks.Load(), int64(elapsed/(10*walk))+2; n > most {
		t.Errorf("%d owner reads in %v for 50 one-MAD subscriptions, want at most %d", n, elapsed, most)
	}
}

// A retired device's owner table and port attributes are dropped (Forget),
// from the hub at once and from each subscriber's caches at its next MAD:
// a trace left running while devices come and go kept them all.
func TestHubForget(t *testing.T) {
	gone, _ := roceDev()
	gone.name = "rxe7"
	cur, _ := roceDev()
	h := NewHub(func(string) []Owner { return nil }, nil)
	done, stop := h.Subscribe(Request{}, io.Discard)
	defer func() { stop(); <-done }()
	var rs resolver
	rs.port(h, &record{seq: 1, time: t0, dev: gone, port: 1}, func(*hw.PortAttr) bool { return true })
	h.ownerTable(gone.Name(), 1)
	h.Forget(gone.Name())
	h.omu.Lock()
	n := len(h.otables)
	h.omu.Unlock()
	if n != 0 {
		t.Errorf("%d owner tables after Forget, want none", n)
	}
	rs.event(h, &record{seq: 2, time: t0, dev: cur, port: 1})
	for k := range rs.ports {
		if k.dev == gone.Name() {
			t.Errorf("a subscriber still keeps %s's port after Forget", k.dev)
		}
	}
}
