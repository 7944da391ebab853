package cmcore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
)

// The single-CM harness: a fake device whose endpoint records what the CM
// sends, and a test that plays the peer by handing crafted MADs straight to
// the CM's receive path. Everything runs on the test goroutine.

const (
	localGUID = 0x0002c90300000001
	peerGUID  = 0x0002c90300000002
	localLID  = 1
	peerLID   = 2
	peerComm  = 0x5eed0001
	peerQPN   = 0x000222
	localQPN  = 0x000111
)

var (
	localGID = hw.GID{0xfe, 0x80, 15: 1}
	peerGID  = hw.GID{0xfe, 0x80, 15: 2}
	peerAddr = hw.Address{LID: peerLID, QPN: 1, QKey: cmQKey}
)

type fakeDev struct {
	guid  uint64
	ports []*fakePort
}

func (d *fakeDev) Name() string           { return "fake0" }
func (d *fakeDev) NodeGUID() uint64       { return d.guid }
func (d *fakeDev) LocalCAAckDelay() uint8 { return 15 }
func (d *fakeDev) Ports() []hw.Port {
	ps := make([]hw.Port, len(d.ports))
	for i, p := range d.ports {
		ps[i] = p
	}
	return ps
}

type fakePort struct {
	dev  *fakeDev
	num  int
	attr hw.PortAttr
	ep   *fakeEP
	// deliverer: OpenMAD returns a hw.Deliverer (dep), whose function the
	// test calls as the endpoint's reading goroutine would.
	deliverer bool
	dep       *deliverEP
	// fresh, if set, is what AttrFresh returns (the port's tables read
	// again, newer than attr); freshReads counts the calls.
	fresh       *hw.PortAttr
	freshReads  int
	entryChecks int    // EntriesHold calls
	checking    func() // if set, runs inside EntriesHold
	checkErr    error  // if set, what EntriesHold returns
}

type deliverEP struct {
	*fakeEP
	f atomic.Pointer[func(*hw.Received)]
}

func (e *deliverEP) Deliver(f func(*hw.Received)) { e.f.Store(&f) }

func (p *fakePort) Device() hw.Device          { return p.dev }
func (p *fakePort) Num() int                   { return p.num }
func (p *fakePort) Attr() (hw.PortAttr, error) { return p.attr, nil }
func (p *fakePort) AttrFresh(time.Duration) (hw.PortAttr, error) {
	p.freshReads++
	if p.fresh != nil {
		return *p.fresh, nil
	}
	return p.attr, nil
}

// EntriesHold checks the entries against the tables as they are now:
// fresh if set, else attr.
func (p *fakePort) EntriesHold(g hw.GIDEntry, pkeyIndex int, pkey uint16) (bool, error) {
	p.entryChecks++
	if p.checking != nil {
		p.checking()
	}
	now := &p.attr
	if p.fresh != nil {
		now = p.fresh
	}
	if p.checkErr != nil {
		return false, p.checkErr
	}
	return slices.Contains(now.GIDs, g) && pkeyIndex < len(now.PKeys) && now.PKeys[pkeyIndex] == pkey, nil
}
func (p *fakePort) OpenMAD(hw.Registration) (hw.Endpoint, error) {
	p.ep = &fakeEP{closed: make(chan struct{}), fail: make(chan error, 1)}
	if p.deliverer {
		p.dep = &deliverEP{fakeEP: p.ep}
		return p.dep, nil
	}
	return p.ep, nil
}

type sentMAD struct {
	dst hw.Address
	mad hw.MAD
}

type fakeEP struct {
	// sending, if set, runs inside Send before the MAD leaves: a test's
	// stand-in for a write that blocks (umad resolving the peer's MAC).
	sending func()

	mu        sync.Mutex
	sent      []sentMAD
	closeOnce sync.Once
	closed    chan struct{}
	fail      chan error // Recv returns what a test sends here
}

func (e *fakeEP) Send(_ context.Context, dst hw.Address, mad *hw.MAD) error {
	if e.sending != nil {
		e.sending()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sent = append(e.sent, sentMAD{dst, *mad})
	return nil
}

func (e *fakeEP) Recv(ctx context.Context) (hw.Received, error) {
	select {
	case <-ctx.Done():
		return hw.Received{}, ctx.Err()
	case <-e.closed:
		return hw.Received{}, hw.ErrClosed
	case err := <-e.fail:
		return hw.Received{}, err
	}
}

func (e *fakeEP) Close() error {
	e.closeOnce.Do(func() { close(e.closed) })
	return nil
}

type harness struct {
	t      *testing.T
	cm     *CM
	clk    *clock.Fake
	port   *fakePort
	events []*Event
	// onEvent, if set, runs inside the handler (e.g. to answer a REQ).
	onEvent func(*Event) Outcome
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, false)
}

// newHarnessOn is newHarness, with a port whose endpoint is a
// hw.Deliverer if deliverer is set, and ports 2 and on with the
// attributes more.
func newHarnessOn(t *testing.T, deliverer bool, more ...hw.PortAttr) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewFake(time.Unix(1_000_000, 0))}
	dev := &fakeDev{guid: localGUID}
	h.port = &fakePort{dev: dev, num: 1, deliverer: deliverer, attr: hw.PortAttr{
		LinkLayer: hw.LinkInfiniBand, State: hw.PortActive, LID: localLID,
		GIDs:  []hw.GIDEntry{{Index: 0, GID: localGID, Type: hw.GIDTypeIB}},
		PKeys: []uint16{0xffff, 0x8001},
	}}
	dev.ports = []*fakePort{h.port}
	for i, a := range more {
		dev.ports = append(dev.ports, &fakePort{dev: dev, num: i + 2, attr: a})
	}
	h.cm = New(dev, Options{Clock: h.clk, CommIDOperand: 0x1000})
	if err := h.cm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.cm.Close() })
	return h
}

// handler records events; tests read h.events.
func (h *harness) handler(ev *Event) Outcome {
	cp := *ev
	h.events = append(h.events, &cp)
	if h.onEvent != nil {
		return h.onEvent(ev)
	}
	return Keep
}

func (h *harness) newID() *ID { return h.cm.CreateID(h.handler) }

// inject hands m, from the peer, to the CM's receive path. Tests may
// call it from another goroutine, so an encoding failure is Errorf.
func (h *harness) inject(tid uint64, m wire.Message) {
	h.t.Helper()
	h.injectFrom(peerAddr, tid, m)
}

// injectFrom is inject with the received packet's source address src.
func (h *harness) injectFrom(src hw.Address, tid uint64, m wire.Message) {
	h.t.Helper()
	var r hw.Received
	if err := wire.Encode(&r.MAD, tid, m); err != nil {
		h.t.Errorf("encode %T: %v", m, err)
		return
	}
	r.Src = src
	h.injectMAD(&r)
}

// injectMAD hands a received MAD as it is, for MADs no encoder makes.
func (h *harness) injectMAD(r *hw.Received) { h.cm.handleMAD(h.cm.ports[0], r) }

// sent returns and forgets the messages the CM sent.
func (h *harness) sent() []wire.Message {
	h.t.Helper()
	ep := h.port.ep
	ep.mu.Lock()
	s := ep.sent
	ep.sent = nil
	ep.mu.Unlock()
	var out []wire.Message
	for i := range s {
		_, m, err := wire.Decode(&s[i].mad)
		if err != nil {
			h.t.Fatalf("CM sent an undecodable MAD: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// lastDst is where the CM sent its last MAD.
func (h *harness) lastDst() hw.Address {
	h.t.Helper()
	ep := h.port.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if len(ep.sent) == 0 {
		h.t.Fatal("nothing sent")
	}
	return ep.sent[len(ep.sent)-1].dst
}

// takeEvents returns and forgets the recorded event types.
func (h *harness) takeEvents() []*Event {
	e := h.events
	h.events = nil
	return e
}

func testPath() *PathRecord {
	return &PathRecord{
		SGID: localGID, DGID: peerGID, SLID: localLID, DLID: peerLID,
		PKey: 0xffff, MTU: 4, Rate: 3, SL: 2, PacketLifeTime: 14, Reversible: true,
	}
}

func testREQParams() *REQParams {
	return &REQParams{
		Primary: testPath(), ServiceID: 0x1234, QPN: localQPN, QPType: QPTypeRC,
		StartingPSN: 0x1000, ResponderResources: 4, InitiatorDepth: 2,
		RemoteCMResponseTimeout: 16, LocalCMResponseTimeout: 16,
		RetryCount: 7, RNRRetryCount: 6, MaxCMRetries: 3,
	}
}

// peerREQ is a REQ from the peer for service sid.
func peerREQ(sid uint64) *wire.REQ {
	return &wire.REQ{
		LocalCommID: peerComm, ServiceID: sid, LocalCAGUID: peerGUID, LocalQPN: peerQPN,
		ResponderResources: 3, InitiatorDepth: 5, RemoteCMResponseTimeout: 16,
		StartingPSN: 0x2000, LocalCMResponseTimeout: 16, RetryCount: 5, PartitionKey: 0xffff,
		PathMTU: 4, RNRRetryCount: 4, MaxCMRetries: 2,
		Primary: wire.Path{
			LocalLID: peerLID, RemoteLID: localLID, LocalGID: peerGID, RemoteGID: localGID,
			PacketRate: 3, SL: 2, SubnetLocal: true, LocalACKTimeout: 17,
		},
	}
}

func (h *harness) peerREP(id *ID) *wire.REP {
	return &wire.REP{
		LocalCommID: peerComm, RemoteCommID: id.localID, LocalQPN: peerQPN, StartingPSN: 0x3000,
		ResponderResources: 1, InitiatorDepth: 2, TargetACKDelay: 15, RNRRetryCount: 5, LocalCAGUID: peerGUID,
	}
}

// destroyIf is the outcome of a test handler whose last step returned
// err: Destroy if that call failed (a kernel handler returning its error).
func destroyIf(err error) Outcome {
	if err != nil {
		return Destroy
	}
	return Keep
}
