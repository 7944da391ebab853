package ucm_test

import (
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"github.com/ucmd/ucmd/hw/clock"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/ucm"
	"go.uber.org/goleak"
)

// The end-to-end fuzz targets (fuzz_device_test.go, fuzz_wire_test.go)
// build the whole stack once per input, so that a crasher replays alone:
// the fake CUSE kernel, a real ucm.Device, cmcore on a simulated fabric of
// two IB devices (a: the device served, b: a plain cmcore peer), all on
// one fake clock so that no timer fires unless the input says so.

// fuzzWait bounds every wait of the fuzz targets: a request, an event, the
// CM processing a MAD. Exceeding it is a hang.
const fuzzWait = 5 * time.Second

var quiet = slog.New(slog.DiscardHandler)

// fuzzDebug (UCM_FUZZ_DEBUG=1) logs what the fuzz targets do.
var fuzzDebug = os.Getenv("UCM_FUZZ_DEBUG") != ""

type fuzzStack struct {
	t      *testing.T
	clk    *clock.Fake
	fab    *sim.Fabric
	a, b   *sim.Device
	cmA    *cmcore.CM
	cmB    *cmcore.CM
	ids    *ucm.IDTable
	dev    *ucm.Device
	k      *cusetest.Kernel
	mem    *callermem.Fake
	caller cuse.Caller
	cm     *fuzzMem

	peerMu  sync.Mutex
	peerIDs []*cmcore.ID // b's ids, destroyed by destroyPeers
}

// newFuzzStack builds the stack; its cleanup tears it down and then fails
// the test if a goroutine started since survives, if an id, file, CM id or
// timer is left, or if the server broke the FUSE protocol.
func newFuzzStack(t *testing.T) *fuzzStack {
	t.Helper()
	// Registered first, so it runs last: after cusetest's own cleanup.
	leak := goleak.IgnoreCurrent()
	s := &fuzzStack{t: t, clk: clock.NewFake(time.Unix(1e9, 0)), caller: cuse.Caller{Pid: fakedut.Pid, Uid: 1000, Gid: 1000}}
	t.Cleanup(func() {
		if t.Failed() {
			return // the stack may be wedged; the failure says enough
		}
		s.destroyPeers()
		if n := s.ids.Len(); n != 0 {
			t.Errorf("%d ids left in the id table after every file closed", n)
		}
		if fs := s.dev.Files(); len(fs) != 0 {
			t.Errorf("%d files left after every file closed", len(fs))
		}
		// Timewait, retransmissions: all on the fake clock.
		s.clk.Advance(time.Hour)
		for _, c := range []struct {
			name string
			cm   *cmcore.CM
		}{{"a", s.cmA}, {"b", s.cmB}} {
			if ids, evs := c.cm.Count(); ids != 0 || evs != 0 {
				t.Errorf("CM %s: %d ids and %d undelivered events left after teardown", c.name, ids, evs)
			}
		}
		if n := s.clk.Pending(); n != 0 {
			t.Errorf("%d timers left after teardown", n)
		}
		s.cmA.Close()
		s.cmB.Close()
		goleak.VerifyNone(t, leak)
	})
	s.fab = sim.New(sim.Config{Seed: 1, Clock: s.clk})
	var err error
	if s.a, err = s.fab.AddIB("a", 1); err != nil {
		t.Fatal(err)
	}
	if s.b, err = s.fab.AddIB("b", 1); err != nil {
		t.Fatal(err)
	}
	s.cmA = cmcore.New(s.a, cmcore.Options{Clock: s.clk, Logger: quiet})
	s.cmB = cmcore.New(s.b, cmcore.Options{Clock: s.clk, Logger: quiet})
	must(t, s.cmA.Start())
	must(t, s.cmB.Start())
	// b: a listener that accepts (REP, then RTU) and one that ignores
	// REQs and SIDR_REQs.
	for _, sid := range []uint64{wsidAccept, wsidIgnore} {
		id := s.peerID()
		must(t, id.Listen(sid, 0))
	}
	s.mem = callermem.NewFake()
	s.cm = &fuzzMem{f: s.mem, pid: fakedut.Pid}
	s.ids = ucm.NewIDTable()
	s.dev, err = ucm.New(ucm.Config{CM: s.cmA, Memory: s.mem, IDs: s.ids, Logger: quiet})
	must(t, err)
	s.k = cusetest.Start(t, s.dev, &cusetest.Options{
		Memory: s.mem, Timeout: fuzzWait, Config: cuse.Config{DevName: "fuzz", Logger: quiet},
	})
	return s
}

// Services of the fuzz targets.
const (
	wsidListen = 0x1000 // a's listener
	wsidAccept = 0x2000 // b's listener that accepts (REP, then RTU)
	wsidIgnore = 0x3000 // b's listener that ignores REQs and SIDR_REQs
)

// peerID creates an id on b's CM, with the peer's handler.
func (s *fuzzStack) peerID() *cmcore.ID {
	id := s.cmB.CreateID(s.peer)
	s.peerMu.Lock()
	s.peerIDs = append(s.peerIDs, id)
	s.peerMu.Unlock()
	return id
}

// peer is the handler of b's ids: it accepts REQs for wsidAccept and
// answers a REP with an RTU; the rest it only records.
func (s *fuzzStack) peer(ev *cmcore.Event) cmcore.Outcome {
	if ev.Type == cmcore.EventREQReceived || ev.Type == cmcore.EventSIDRREQReceived {
		s.peerMu.Lock()
		s.peerIDs = append(s.peerIDs, ev.ID)
		s.peerMu.Unlock()
	}
	switch ev.Type {
	case cmcore.EventREQReceived:
		if ev.Listener.Attr().ServiceID == wsidAccept {
			return destroyIf(ev.ID.SendREP(&cmcore.REPParams{QPN: 0xb01, StartingPSN: 1, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}))
		}
	case cmcore.EventREPReceived:
		return destroyIf(ev.ID.SendRTU(nil))
	}
	return cmcore.Keep
}

// destroyIf: a peer handler whose answer failed destroys its id.
func destroyIf(err error) cmcore.Outcome {
	if err != nil {
		return cmcore.Destroy
	}
	return cmcore.Keep
}

// peers returns b's ids so far.
func (s *fuzzStack) peers() []*cmcore.ID {
	s.peerMu.Lock()
	defer s.peerMu.Unlock()
	return append([]*cmcore.ID(nil), s.peerIDs...)
}

// destroyPeers destroys every id of b.
func (s *fuzzStack) destroyPeers() {
	for _, id := range s.peers() {
		id.Destroy()
	}
}

// settle waits until both CMs have started handling every MAD the fabric
// queued to their ports and delivered every event to the device: the
// next GET_EVENT sees what the last command caused. (Between counting a
// MAD and taking the CM's lock there is a window; FuzzWireEvents closes
// it with a barrier MAD.)
func (s *fuzzStack) settle() {
	s.t.Helper()
	for _, x := range []struct {
		name string
		cm   *cmcore.CM
		port *sim.Port
	}{{"a", s.cmA, s.a.Port(1)}, {"b", s.cmB, s.b.Port(1)}} {
		end := time.Now().Add(fuzzWait)
		for {
			if x.cm.Stats().Received >= x.port.Counters().Received {
				if _, evs := x.cm.Count(); evs == 0 {
					break
				}
			}
			if time.Now().After(end) {
				s.t.Fatalf("CM %s handled %d of the %d MADs queued to it after %v: hung",
					x.name, x.cm.Stats().Received, x.port.Counters().Received, fuzzWait)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// open opens a file as the stack's caller; it implements conformance.DUT
// together with Mem and LoopbackPath.
func (s *fuzzStack) Open(nonblock bool) (conformance.File, error) {
	flags := uint32(0x2) // O_RDWR
	if nonblock {
		flags |= 0x800 // O_NONBLOCK
	}
	f, errno := s.k.Open(s.caller, flags)
	if errno != 0 {
		return nil, errno
	}
	return &fakedut.File{F: f, Caller: s.caller}, nil
}

func (s *fuzzStack) Mem() conformance.Memory { return s.cm }
func (s *fuzzStack) Close() error            { return nil }

// LoopbackPath is a's port to itself.
func (s *fuzzStack) LoopbackPath() (abi.PathRec, bool) { return s.path(s.a, s.a), true }

// path is the path record from device x's port to y's.
func (s *fuzzStack) path(x, y *sim.Device) abi.PathRec {
	s.t.Helper()
	ax, err := x.Port(1).Attr()
	must(s.t, err)
	ay, err := y.Port(1).Attr()
	must(s.t, err)
	p := conformance.LoopbackPath(ax.GIDs[0].GID, ax.LID)
	p.DGID, p.DLID = ay.GIDs[0].GID, ay.LID
	return p
}

// cmPath is the cmcore path record from x's port to y's.
func (s *fuzzStack) cmPath(x, y *sim.Device) *cmcore.PathRecord {
	s.t.Helper()
	ax, err := x.Port(1).Attr()
	must(s.t, err)
	ay, err := y.Port(1).Attr()
	must(s.t, err)
	return &cmcore.PathRecord{
		SGID: ax.GIDs[0].GID, DGID: ay.GIDs[0].GID, SLID: ax.LID, DLID: ay.LID,
		PKey: 0xffff, MTU: 4, Rate: 3, PacketLifeTime: 8,
	}
}

// fuzzMem is conformance.Memory over the stack's fake caller memory.
type fuzzMem struct {
	f    *callermem.Fake
	pid  int
	once sync.Once
	bad  uint64
}

func (m *fuzzMem) Alloc(n int) uint64 { return m.f.Alloc(m.pid, n) }

func (m *fuzzMem) Bad() uint64 {
	m.once.Do(func() {
		m.bad = m.f.Alloc(m.pid, 1)
		m.f.Unmap(m.pid, m.bad, 1)
	})
	return m.bad
}

func (m *fuzzMem) Read(addr uint64, n int) []byte {
	b, err := m.f.Bytes(m.pid, addr, n)
	if err != nil {
		panic(err)
	}
	return b
}

func (m *fuzzMem) Write(addr uint64, b []byte) {
	if err := m.f.Write(m.pid, addr, b); err != nil {
		panic(err)
	}
}

// checkEvent checks one event GET_EVENT delivered: a known type, an id the
// file owns (or, for a REQ or SIDR_REQ, a new one on a listener of the
// file), the listener's or id's cookie, and private data and info that
// fit the buffers. owned maps the file's ids to their cookies.
func checkEvent(t *testing.T, ev conformance.Event, owned map[uint32]uint64) {
	t.Helper()
	if ev.Event > abi.CMSIDRREPReceived {
		t.Fatalf("event type %d out of range: %+v", ev.Event, ev.EventResp)
	}
	newConn := ev.Event == abi.CMREQReceived || ev.Event == abi.CMSIDRREQReceived
	if uid, ok := owned[ev.ID]; ok && !newConn {
		if uid != ev.UID {
			t.Fatalf("%v on id %d: cookie %#x, the id's is %#x", ev.Event, ev.ID, ev.UID, uid)
		}
	} else if !newConn {
		t.Fatalf("%v on id %d, which the file does not own (%v)", ev.Event, ev.ID, owned)
	} else if ok {
		t.Fatalf("%v announces id %d, which the file already owned", ev.Event, ev.ID)
	}
	if ev.Present&^(abi.PresData|abi.PresInfo|abi.PresPrimary|abi.PresAlternate) != 0 {
		t.Fatalf("%v: present %#x has unknown bits", ev.Event, ev.Present)
	}
	if len(ev.Data) > 255 || len(ev.Info) > 255 {
		t.Fatalf("%v: %d bytes of data, %d of info", ev.Event, len(ev.Data), len(ev.Info))
	}
}
