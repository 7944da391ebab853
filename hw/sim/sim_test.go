package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
)

const gsiQKey = 0x80010000

var cmReg = hw.Registration{MgmtClass: 0x07, ClassVersion: 2, Methods: []uint8{0x03}}

// cmMAD builds a CM-class SEND MAD with the given TID and attribute.
func cmMAD(tid uint64, attr uint16) *hw.MAD {
	var m hw.MAD
	m[0], m[1], m[2], m[3] = 1, 0x07, 2, 0x03
	binary.BigEndian.PutUint64(m[8:], tid)
	binary.BigEndian.PutUint16(m[16:], attr)
	m[100] = 0xab // payload marker
	return &m
}

func tidOf(m *hw.MAD) uint64 { return binary.BigEndian.Uint64(m[8:]) }

func mustDev(t testing.TB) func(*Device, error) *Device {
	return func(d *Device, err error) *Device {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

func open(t testing.TB, p *Port, reg hw.Registration) hw.Endpoint {
	t.Helper()
	ep, err := p.OpenMAD(reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

// recvNow receives a MAD that must already be queued.
func recvNow(t testing.TB, ep hw.Endpoint) hw.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := ep.Recv(ctx)
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return r
}

// queued reports whether a MAD is waiting, without blocking.
func queued(ep hw.Endpoint) bool { return len(ep.(*endpoint).q) > 0 }

func gid0(t testing.TB, p *Port) hw.GID {
	t.Helper()
	a, _ := p.Attr()
	return a.GIDs[0].GID
}

func TestIBDeliveryAndEcho(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	b := mustDev(t)(f.AddDevice(DeviceConfig{Name: "b", Ports: []PortConfig{{LID: 0x20, LMC: 2, PKeys: []uint16{0x8001, 0xffff}}}})).Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)

	// Addressed to path bits 3 of b, from path bits 0 of a, P_Key 0xffff.
	dst := hw.Address{LID: 0x23, SL: 5, QPN: 1, QKey: gsiQKey}
	if err := ea.Send(context.Background(), dst, cmMAD(0xdeadbeef_12345678, 0x10)); err != nil {
		t.Fatal(err)
	}
	r := recvNow(t, eb)
	aa, _ := a.Attr()
	want := hw.Address{LID: aa.LID, SL: 5, PathBits: 3, QPN: 1, PKeyIndex: 1}
	if r.Src != want {
		t.Fatalf("source address %+v, want %+v", r.Src, want)
	}
	if got := tidOf(&r.MAD); uint32(got) != 0x12345678 || got>>32 == 0xdeadbeef {
		t.Errorf("TID %#x: want low half kept and upper half rewritten", got)
	}
	if r.MAD[100] != 0xab {
		t.Error("payload not delivered")
	}

	// Echo the source back: a sees b's LID with the path bits it was addressed to.
	if err := eb.Send(context.Background(), r.Src, cmMAD(1, 0x13)); err != nil {
		t.Fatal(err)
	}
	back := recvNow(t, ea)
	if back.Src.LID != 0x23 || back.Src.SL != 5 || back.Src.PKeyIndex != 0 {
		t.Errorf("reply source %+v, want LID 0x23 SL 5 P_Key index 0", back.Src)
	}
	if c := a.Counters(); c.Sent != 1 || c.Received != 1 || c.Dropped() != 0 {
		t.Errorf("a counters %+v", c)
	}
}

// The received GRH's hop limit is umad's, not the sender's: 0xFF on
// InfiniBand, the route's (64) on RoCE (TestRoCEDeliveryAndEcho).
func TestIBWithGRH(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	b := mustDev(t)(f.AddIB("b", 1)).Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)
	ba, _ := b.Attr()
	dst := hw.Address{LID: ba.LID, QPN: 1, GRH: &hw.GRH{GID: ba.GIDs[0].GID, SGIDIndex: 0, HopLimit: 3, TrafficClass: 7, FlowLabel: 0x12345}}
	if err := ea.Send(context.Background(), dst, cmMAD(1, 0x10)); err != nil {
		t.Fatal(err)
	}
	r := recvNow(t, eb)
	want := hw.GRH{GID: gid0(t, a), SGIDIndex: 0, HopLimit: 0xff, TrafficClass: 7, FlowLabel: 0x12345}
	if r.Src.GRH == nil || *r.Src.GRH != want {
		t.Fatalf("GRH %+v, want %+v", r.Src.GRH, want)
	}
	// A DGID the destination does not own never arrives.
	dst.GRH.GID[15] ^= 1
	if err := ea.Send(context.Background(), dst, cmMAD(2, 0x10)); err != nil {
		t.Fatal(err)
	}
	if queued(eb) || a.Counters().Unroutable != 1 {
		t.Errorf("MAD to a foreign DGID: queued=%v counters %+v", queued(eb), a.Counters())
	}
}

func TestRoCEDeliveryAndEcho(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddRoCE("rxe0", 1)).Port(1)
	b := mustDev(t)(f.AddDevice(DeviceConfig{Name: "rxe1", Ports: []PortConfig{{
		LinkLayer: hw.LinkEthernet,
		GIDs: []hw.GIDEntry{
			{Index: 0, GID: gidFrom(linkLocalPrefix, 0x5054_00ff_fe77_0002), Type: hw.GIDTypeRoCEv2},
			{Index: 1, GID: hw.GID{10: 0xff, 11: 0xff, 12: 10, 15: 2}, Type: hw.GIDTypeRoCEv2},
		},
	}}})).Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)

	if err := ea.Send(context.Background(), hw.Address{QPN: 1}, cmMAD(1, 0x10)); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("RoCE send without GRH: %v, want EINVAL", err)
	}
	bad := hw.Address{QPN: 1, GRH: &hw.GRH{GID: gid0(t, b), SGIDIndex: 9}}
	if err := ea.Send(context.Background(), bad, cmMAD(1, 0x10)); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("send from an empty SGID index: %v, want EINVAL", err)
	}

	ba, _ := b.Attr()
	dst := hw.Address{QPN: 1, QKey: gsiQKey, GRH: &hw.GRH{GID: ba.GIDs[1].GID, SGIDIndex: 0, HopLimit: 9}}
	if err := ea.Send(context.Background(), dst, cmMAD(0x77, 0x10)); err != nil {
		t.Fatal(err)
	}
	r := recvNow(t, eb)
	wantGRH := hw.GRH{GID: gid0(t, a), SGIDIndex: 1, HopLimit: 64}
	if r.Src.GRH == nil || *r.Src.GRH != wantGRH || r.Src.LID != 0 || r.Src.QPN != 1 || r.Src.PKeyIndex != 0 {
		t.Fatalf("source %+v GRH %+v, want LID 0 QPN 1 GRH %+v", r.Src, r.Src.GRH, wantGRH)
	}
	if err := eb.Send(context.Background(), r.Src, cmMAD(0x78, 0x13)); err != nil {
		t.Fatal(err)
	}
	back := recvNow(t, ea)
	if back.Src.GRH == nil || back.Src.GRH.GID != ba.GIDs[1].GID || back.Src.GRH.SGIDIndex != 0 {
		t.Fatalf("reply GRH %+v, want b's GID 1 to a's index 0", back.Src.GRH)
	}
}

func TestRegistration(t *testing.T) {
	f := New(Config{Seed: 1})
	d := mustDev(t)(f.AddDevice(DeviceConfig{Ports: []PortConfig{{}, {KernelCM: true}}}))
	p1, p2 := d.Port(1), d.Port(2)
	ep := open(t, p1, cmReg)
	if _, err := p1.OpenMAD(cmReg); !errors.Is(err, hw.ErrCMClassInUse) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("second CM registration: %v, want ErrCMClassInUse and EINVAL", err)
	}
	if _, err := p2.OpenMAD(cmReg); !errors.Is(err, hw.ErrCMClassInUse) {
		t.Errorf("registration with kernel CM: %v, want ErrCMClassInUse", err)
	}
	// A different method of the same class, or another class version, is free.
	open(t, p1, hw.Registration{MgmtClass: 0x07, ClassVersion: 2, Methods: []uint8{0x01}})
	open(t, p1, hw.Registration{MgmtClass: 0x07, ClassVersion: 1, Methods: []uint8{0x03}})
	if _, err := p1.OpenMAD(hw.Registration{MgmtClass: 0x07, ClassVersion: 2, Methods: []uint8{0x81}}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("registering a response method: %v, want EINVAL", err)
	}
	if _, err := p1.OpenMAD(hw.Registration{MgmtClass: 0x07, ClassVersion: 8, Methods: []uint8{0x03}}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("class version 8: %v, want EINVAL", err)
	}
	// Once closed, the class is free again.
	if err := ep.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ep.Close(); !errors.Is(err, hw.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	open(t, p1, cmReg)
}

func TestOnlyMatchingMADsDelivered(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	b := mustDev(t)(f.AddIB("b", 1)).Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)
	ba, _ := b.Attr()
	dst := hw.Address{LID: ba.LID, QPN: 1}
	for _, mut := range []func(*hw.MAD){
		func(m *hw.MAD) { m[1] = 0x04 }, // other class
		func(m *hw.MAD) { m[2] = 1 },    // other version
		func(m *hw.MAD) { m[3] = 0x01 }, // unregistered method
	} {
		m := cmMAD(1, 0x10)
		mut(m)
		if err := ea.Send(context.Background(), dst, m); err != nil {
			t.Fatal(err)
		}
	}
	if queued(eb) || b.Counters().NoAgent != 3 {
		t.Errorf("unregistered MADs: queued=%v, counters %+v", queued(eb), b.Counters())
	}
	// Other QPs and unknown LIDs vanish (umad would send them into the void).
	ea.Send(context.Background(), hw.Address{LID: ba.LID, QPN: 2}, cmMAD(1, 0x10))
	ea.Send(context.Background(), hw.Address{LID: 0x999, QPN: 1}, cmMAD(1, 0x10))
	if c := a.Counters(); c.Unroutable != 2 || c.Sent != 5 {
		t.Errorf("a counters %+v, want 2 unroutable of 5 sent", c)
	}
}

func TestPKeyMismatchDropped(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddDevice(DeviceConfig{Ports: []PortConfig{{PKeys: []uint16{0xffff, 0x8005, 0x0006}}}})).Port(1)
	b := mustDev(t)(f.AddDevice(DeviceConfig{Ports: []PortConfig{{PKeys: []uint16{0xffff, 0x0006}}}})).Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)
	ba, _ := b.Attr()
	send := func(pkeyIndex uint16) {
		t.Helper()
		if err := ea.Send(context.Background(), hw.Address{LID: ba.LID, QPN: 1, PKeyIndex: pkeyIndex}, cmMAD(1, 0x10)); err != nil {
			t.Fatal(err)
		}
	}
	send(1) // 0x8005: b has no such partition
	send(2) // 0x0006 to 0x0006: two limited members cannot talk
	if queued(eb) || a.Counters().Unroutable != 2 {
		t.Fatalf("queued=%v counters %+v", queued(eb), a.Counters())
	}
	if err := ea.Send(context.Background(), hw.Address{LID: ba.LID, QPN: 1, PKeyIndex: 3}, cmMAD(1, 0x10)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("P_Key index out of range: %v, want EINVAL", err)
	}
}

func TestRecvCancelAndClose(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	ep := open(t, a, cmReg)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ep.Recv(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Recv with cancelled ctx: %v", err)
	}
	errc := make(chan error)
	go func() {
		_, err := ep.Recv(context.Background())
		errc <- err
	}()
	ep.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, hw.ErrClosed) {
			t.Errorf("blocked Recv after Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock Recv")
	}
	if err := ep.Send(context.Background(), hw.Address{LID: 1, QPN: 1}, cmMAD(1, 0x10)); !errors.Is(err, hw.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
}

func TestQueueBounded(t *testing.T) {
	f := New(Config{Seed: 1, QueueLen: 4})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	b := mustDev(t)(f.AddIB("b", 1)).Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)
	ba, _ := b.Attr()
	for i := range 10 {
		if err := ea.Send(context.Background(), hw.Address{LID: ba.LID, QPN: 1}, cmMAD(uint64(i), 0x10)); err != nil {
			t.Fatal(err)
		}
	}
	if c := b.Counters(); c.Received != 4 || c.Overflow != 6 {
		t.Fatalf("counters %+v, want 4 received and 6 overflowed", c)
	}
	for i := range 4 {
		if r := recvNow(t, eb); uint32(tidOf(&r.MAD)) != uint32(i) {
			t.Errorf("MAD %d has TID %#x", i, tidOf(&r.MAD))
		}
	}
}

func TestResponsesGoToRequester(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	b := mustDev(t)(f.AddIB("b", 1)).Port(1)
	getter := open(t, a, hw.Registration{MgmtClass: 0x07, ClassVersion: 2}) // no methods: responses only
	other := open(t, a, cmReg)
	eb := open(t, b, hw.Registration{MgmtClass: 0x07, ClassVersion: 2, Methods: []uint8{0x01}})
	ba, _ := b.Attr()
	get := cmMAD(0x42, 0x01)
	get[3] = 0x01
	getter.Send(context.Background(), hw.Address{LID: ba.LID, QPN: 1}, get)
	req := recvNow(t, eb)
	resp := req.MAD
	resp[3] = 0x81
	eb.Send(context.Background(), req.Src, &resp)
	r := recvNow(t, getter)
	if tidOf(&r.MAD) != tidOf(&req.MAD) || queued(other) {
		t.Errorf("response TID %#x (request %#x), other endpoint queued=%v", tidOf(&r.MAD), tidOf(&req.MAD), queued(other))
	}
}

func TestPreserveTID(t *testing.T) {
	f := New(Config{Seed: 1, PreserveTID: true})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	ea := open(t, a, cmReg)
	aa, _ := a.Attr()
	ea.Send(context.Background(), hw.Address{LID: aa.LID, QPN: 1}, cmMAD(0xdeadbeef_12345678, 0x10))
	if r := recvNow(t, ea); tidOf(&r.MAD) != 0xdeadbeef_12345678 {
		t.Errorf("TID %#x, want it untouched", tidOf(&r.MAD))
	}
}

func TestPortDownDrops(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	b := mustDev(t)(f.AddIB("b", 1)).Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)
	ba, _ := b.Attr()
	b.SetState(hw.PortDown)
	ea.Send(context.Background(), hw.Address{LID: ba.LID, QPN: 1}, cmMAD(1, 0x10))
	b.SetState(hw.PortActive)
	if queued(eb) {
		t.Error("MAD delivered to a down port")
	}
	if at, _ := b.Attr(); at.State != hw.PortActive {
		t.Errorf("state %v", at.State)
	}
}

func TestDeviceConfigErrors(t *testing.T) {
	f := New(Config{})
	if _, err := f.AddIB("a", 1); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]DeviceConfig{
		"duplicate name": {Name: "a", Ports: []PortConfig{{}}},
		"no ports":       {Name: "x"},
		"LID in use":     {Name: "y", Ports: []PortConfig{{LID: 1}}},
		"unaligned LMC":  {Name: "z", Ports: []PortConfig{{LID: 0x41, LMC: 1}}},
		"RoCE with LID":  {Name: "w", Ports: []PortConfig{{LinkLayer: hw.LinkEthernet, LID: 3}}},
	} {
		if _, err := f.AddDevice(c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// A failed device leaves no addresses behind.
	if _, err := f.AddDevice(DeviceConfig{Name: "v", Ports: []PortConfig{{LID: 0x50}, {LID: 1}}}); err == nil {
		t.Fatal("LID clash accepted")
	}
	if _, err := f.AddDevice(DeviceConfig{Name: "v", Ports: []PortConfig{{LID: 0x50}}}); err != nil {
		t.Errorf("LID of a failed device still taken: %v", err)
	}
}

func TestSendBlock(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	f := New(Config{Seed: 1, Clock: clk, Knobs: Knobs{SendBlock: time.Second}})
	a := mustDev(t)(f.AddRoCE("a", 1)).Port(1)
	ea := open(t, a, cmReg)
	errc := make(chan error, 1)
	go func() {
		errc <- ea.Send(context.Background(), hw.Address{QPN: 1, GRH: &hw.GRH{GID: gid0(t, a)}}, cmMAD(1, 0x10))
	}()
	for clk.Pending() == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-errc:
		t.Fatalf("Send returned before the clock moved: %v", err)
	default:
	}
	clk.Advance(time.Second)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	recvNow(t, ea)
}

// A removed device: its endpoints fail receives and sends with the error
// given, MADs to it are unroutable, its ports refuse endpoints, and its
// name can be added again as a new device with its own GUID.
func TestRemoveDevice(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddIB("a", 1)).Port(1)
	bd := mustDev(t)(f.AddIB("b", 1))
	b := bd.Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)
	ba, _ := b.Attr()
	recvd := make(chan error, 1)
	go func() {
		_, err := eb.Recv(context.Background())
		recvd <- err
	}()
	gen := f.Generation()
	if err := f.RemoveDevice(bd, syscall.EIO); err != nil {
		t.Fatal(err)
	}
	if f.Generation() == gen {
		t.Error("a removal left the fabric's generation as it was")
	}
	select {
	case err := <-recvd:
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("blocked Recv on the removed device: %v, want EIO", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Recv blocked on the removed device was not woken")
	}
	if _, err := eb.Recv(context.Background()); !errors.Is(err, syscall.EIO) {
		t.Errorf("later Recv: %v, want EIO", err)
	}
	if err := eb.Send(context.Background(), hw.Address{LID: 1, QPN: 1}, cmMAD(1, 0x10)); !errors.Is(err, syscall.EIO) {
		t.Errorf("Send from the removed device: %v, want EIO", err)
	}
	if _, err := b.OpenMAD(cmReg); !errors.Is(err, syscall.EIO) {
		t.Errorf("OpenMAD on the removed device: %v, want EIO", err)
	}
	if err := ea.Send(context.Background(), hw.Address{LID: ba.LID, QPN: 1}, cmMAD(2, 0x10)); err != nil {
		t.Fatal(err)
	}
	if c := a.Counters(); c.Unroutable != 1 {
		t.Errorf("a MAD to the removed device: counters %+v, want it unroutable", c)
	}
	gen = f.Generation()
	if err := f.RemoveDevice(bd, syscall.EIO); err == nil {
		t.Error("removing a device twice succeeded")
	}
	if _, err := f.AddIB("a", 1); err == nil {
		t.Error("a second device named a was added")
	}
	if f.Generation() != gen {
		t.Error("refused changes moved the fabric's generation")
	}
	if got := f.Devices(); len(got) != 1 || got[0].Name() != "a" {
		t.Errorf("devices after the removal: %v", got)
	}
	again := mustDev(t)(f.AddIB("b", 1))
	if f.Generation() == gen {
		t.Error("an addition left the fabric's generation as it was")
	}
	if again.NodeGUID() == bd.NodeGUID() || again.NodeGUID() == a.Device().NodeGUID() {
		t.Errorf("re-added device's GUID %#x repeats one in use or removed", again.NodeGUID())
	}
	eb2 := open(t, again.Port(1), cmReg)
	ab, _ := again.Port(1).Attr()
	if err := ea.Send(context.Background(), hw.Address{LID: ab.LID, QPN: 1}, cmMAD(3, 0x10)); err != nil {
		t.Fatal(err)
	}
	recvNow(t, eb2)
}

// A RoCE port's GID table follows its IP addresses: after SetGIDs the
// fabric delivers to the new GIDs only, and both snapshots show the new
// table.
func TestSetGIDsMovesAddresses(t *testing.T) {
	f := New(Config{Seed: 1})
	a := mustDev(t)(f.AddRoCE("rxe0", 1)).Port(1)
	b := mustDev(t)(f.AddRoCE("rxe1", 1)).Port(1)
	ea, eb := open(t, a, cmReg), open(t, b, cmReg)
	old := gid0(t, b)
	moved := hw.GID{10: 0xff, 11: 0xff, 12: 192, 13: 168, 15: 7}
	b.SetGIDs([]hw.GIDEntry{{Index: 1, GID: moved, Type: hw.GIDTypeRoCEv2}})

	send := func(g hw.GID, tid uint64) {
		t.Helper()
		dst := hw.Address{QPN: 1, QKey: gsiQKey, GRH: &hw.GRH{GID: g, HopLimit: 64}}
		if err := ea.Send(context.Background(), dst, cmMAD(tid, 0x10)); err != nil {
			t.Fatalf("send to %v: %v", g, err)
		}
	}
	send(old, 1)
	if queued(eb) {
		t.Error("MAD to a GID the port no longer has was delivered")
	}
	send(moved, 2)
	if r := recvNow(t, eb); uint32(tidOf(&r.MAD)) != 2 || r.Src.GRH == nil || r.Src.GRH.SGIDIndex != 1 {
		t.Errorf("TID %#x, GRH %+v: want TID 2 received on GID index 1", tidOf(&r.MAD), r.Src.GRH)
	}
	for name, get := range map[string]func() (hw.PortAttr, error){"Attr": b.Attr, "AttrShared": b.AttrShared} {
		if at, _ := get(); len(at.GIDs) != 1 || at.GIDs[0].GID != moved || at.GIDs[0].Index != 1 {
			t.Errorf("%s: GIDs %+v, want only %v at index 1", name, at.GIDs, moved)
		}
	}
}
