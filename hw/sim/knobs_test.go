package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
)

const streamLen = 10000

// pair is two IB ports on a fabric with a fake clock and a CM endpoint each.
type pair struct {
	f      *Fabric
	clk    *clock.Fake
	a, b   *Port
	ea, eb hw.Endpoint
	dst    hw.Address // a → b
}

func newPair(t testing.TB, seed uint64, k Knobs) *pair {
	t.Helper()
	clk := clock.NewFake(time.Unix(1000, 0))
	f := New(Config{Seed: seed, Clock: clk, Knobs: k, QueueLen: 4 * streamLen})
	p := &pair{f: f, clk: clk}
	p.a = mustDev(t)(f.AddIB("a", 1)).Port(1)
	p.b = mustDev(t)(f.AddIB("b", 1)).Port(1)
	p.ea, p.eb = open(t, p.a, cmReg), open(t, p.b, cmReg)
	ba, _ := p.b.Attr()
	p.dst = hw.Address{LID: ba.LID, QPN: 1}
	return p
}

// stream sends n MADs a → b with TIDs start..start+n-1, one per tick.
func (p *pair) stream(t testing.TB, start, n int, tick time.Duration) {
	t.Helper()
	for i := range n {
		if err := p.ea.Send(context.Background(), p.dst, cmMAD(uint64(start+i), 0x10)); err != nil {
			t.Fatal(err)
		}
		if tick > 0 {
			p.clk.Advance(tick)
		}
	}
}

// drain returns the low TID halves queued at b, in arrival order.
func (p *pair) drain() []uint32 {
	var got []uint32
	q := p.eb.(*endpoint).q
	for len(q) > 0 {
		r := <-q
		got = append(got, uint32(tidOf(&r.MAD)))
	}
	return got
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.4f, want %.4f ± %.4f", what, got, want, tol)
	} else {
		t.Logf("%s = %.4f (want %.4f ± %.4f)", what, got, want, tol)
	}
}

func TestLoss(t *testing.T) {
	for _, loss := range []float64{0.01, 0.3, 0.9} {
		p := newPair(t, 7, Knobs{Loss: loss})
		p.stream(t, 0, streamLen, 0)
		got := len(p.drain())
		c := p.a.Counters()
		if uint64(streamLen-got) != c.Lost || c.Sent != streamLen {
			t.Errorf("loss %v: %d delivered, counters %+v", loss, got, c)
		}
		// ±3% is more than 6 standard deviations at N=10000; tighter for rare loss.
		tol := 0.03
		if loss < 0.1 {
			tol = 0.005
		}
		within(t, "dropped fraction", float64(c.Lost)/streamLen, loss, tol)
	}
}

func TestDuplicate(t *testing.T) {
	p := newPair(t, 7, Knobs{Duplicate: 0.2})
	p.stream(t, 0, streamLen, 0)
	got := p.drain()
	seen := make(map[uint32]int)
	for _, tid := range got {
		seen[tid]++
	}
	dups := 0
	for tid, n := range seen {
		if n > 2 {
			t.Fatalf("TID %#x delivered %d times", tid, n)
		}
		dups += n - 1
	}
	if len(seen) != streamLen || uint64(dups) != p.a.Counters().Duplicated {
		t.Errorf("%d distinct of %d, %d duplicates, counters %+v", len(seen), streamLen, dups, p.a.Counters())
	}
	within(t, "duplicated fraction", float64(dups)/streamLen, 0.2, 0.03)
}

func TestDelayAndJitter(t *testing.T) {
	const delay, jitter = 2 * time.Millisecond, 4 * time.Millisecond
	p := newPair(t, 7, Knobs{Delay: delay, Jitter: jitter})
	var sentAt = make(map[uint32]time.Time)
	var lat []time.Duration
	inOrder := true
	last := uint32(0)
	p.f.SetTrace(func(e Event) {
		switch e.Kind {
		case EventSend:
			sentAt[uint32(e.TID)] = e.Time
		case EventDelivered:
			lat = append(lat, e.Time.Sub(sentAt[uint32(e.TID)]))
			if uint32(e.TID) < last {
				inOrder = false
			}
			last = uint32(e.TID)
		}
	})
	p.stream(t, 0, streamLen, 100*time.Microsecond)
	p.clk.Advance(delay + jitter)
	if len(lat) != streamLen {
		t.Fatalf("%d of %d delivered", len(lat), streamLen)
	}
	var sum time.Duration
	for _, l := range lat {
		if l < delay || l >= delay+jitter {
			t.Fatalf("latency %v outside [%v, %v)", l, delay, delay+jitter)
		}
		sum += l
	}
	within(t, "mean latency (ms)", float64(sum/time.Duration(len(lat)))/1e6, 4, 0.1)
	if inOrder {
		t.Error("jitter wider than the send interval reordered nothing")
	}
}

func TestDelayHoldsUntilDue(t *testing.T) {
	p := newPair(t, 7, Knobs{Delay: 5 * time.Millisecond})
	p.stream(t, 0, 1, 0)
	p.clk.Advance(5*time.Millisecond - time.Nanosecond)
	if queued(p.eb) {
		t.Fatal("delivered before the delay elapsed")
	}
	p.clk.Advance(time.Nanosecond)
	if !queued(p.eb) {
		t.Fatal("not delivered when the delay elapsed")
	}
}

func TestReorder(t *testing.T) {
	const reorder = 0.25
	p := newPair(t, 7, Knobs{Reorder: reorder})
	p.stream(t, 0, streamLen, 0)
	p.f.Flush()
	got := p.drain()
	if len(got) != streamLen {
		t.Fatalf("%d of %d delivered", len(got), streamLen)
	}
	// A MAD is overtaken when one sent after it arrives before it.
	overtaken := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			overtaken++
		}
	}
	if uint64(overtaken) != p.a.Counters().Reordered {
		t.Errorf("%d overtaken, counters %+v", overtaken, p.a.Counters())
	}
	within(t, "overtaken fraction", float64(overtaken)/streamLen, reorder/(1+reorder), 0.03)
}

func TestReorderHoldMax(t *testing.T) {
	p := newPair(t, 7, Knobs{Reorder: 1, HoldMax: time.Millisecond})
	p.stream(t, 0, 1, 0)
	if queued(p.eb) {
		t.Fatal("held MAD delivered at once")
	}
	p.clk.Advance(time.Millisecond)
	if got := p.drain(); len(got) != 1 {
		t.Fatalf("held MAD without successor: %d delivered after HoldMax", len(got))
	}
}

func TestPartition(t *testing.T) {
	p := newPair(t, 7, Knobs{})
	c := mustDev(t)(p.f.AddIB("c", 1)).Port(1)
	ec := open(t, c, cmReg)
	p.f.Partition(p.a, p.b)
	p.stream(t, 0, 100, 0)
	ca, _ := c.Attr()
	// b → a is cut as well; c still reaches both.
	p.eb.Send(context.Background(), hw.Address{LID: mustAttr(t, p.a).LID, QPN: 1}, cmMAD(1, 0x10))
	ec.Send(context.Background(), p.dst, cmMAD(2, 0x10))
	if got := p.drain(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("b received %v during partition, want only c's MAD", got)
	}
	if queued(p.ea) || p.a.Counters().Partitioned != 100 || p.b.Counters().Partitioned != 1 {
		t.Fatalf("counters a %+v b %+v", p.a.Counters(), p.b.Counters())
	}
	p.f.Heal(p.a, p.b)
	p.stream(t, 100, 100, 0)
	if got := p.drain(); len(got) != 100 {
		t.Fatalf("%d of 100 delivered after Heal", len(got))
	}
	p.f.Partition(p.a, c)
	p.f.HealAll()
	p.ea.Send(context.Background(), hw.Address{LID: ca.LID, QPN: 1}, cmMAD(3, 0x10))
	recvNow(t, ec)
}

func mustAttr(t testing.TB, p *Port) hw.PortAttr {
	a, err := p.Attr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestFilterDropsNextREP(t *testing.T) {
	p := newPair(t, 7, Knobs{Loss: 1}) // Deliver bypasses loss
	dropped := false
	p.f.SetFilter(func(src, dst hw.Port, m *hw.MAD) Verdict {
		if src != hw.Port(p.a) || dst != hw.Port(p.b) {
			t.Errorf("filter saw %v → %v", src, dst)
		}
		if binary.BigEndian.Uint16(m[16:]) == 0x13 && !dropped {
			dropped = true
			return Drop
		}
		return Deliver
	})
	for i, attr := range []uint16{0x10, 0x13, 0x13, 0x14} {
		p.ea.Send(context.Background(), p.dst, cmMAD(uint64(i), attr))
	}
	if got := p.drain(); len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("delivered %v, want [0 2 3]", got)
	}
	if c := p.a.Counters(); c.Filtered != 1 || c.Lost != 0 {
		t.Errorf("counters %+v", c)
	}
	p.f.SetFilter(nil)
	p.stream(t, 0, 10, 0)
	if p.a.Counters().Lost != 10 {
		t.Error("removing the filter did not restore the knobs")
	}
}

func TestKnobsChangeAtRunTime(t *testing.T) {
	p := newPair(t, 7, Knobs{})
	p.stream(t, 0, 100, 0)
	p.f.SetKnobs(Knobs{Loss: 1})
	p.stream(t, 100, 100, 0)
	p.f.SetKnobs(Knobs{})
	p.stream(t, 200, 100, 0)
	if got := p.drain(); len(got) != 200 || got[99] != 99 || got[100] != 200 {
		t.Fatalf("%d delivered, want the first and last 100", len(got))
	}
	if k := p.f.Knobs(); k != (Knobs{}) {
		t.Errorf("Knobs() = %+v", k)
	}
}

// trace runs a fixed mixed workload and returns its delivery trace.
func trace(t *testing.T, seed uint64) []Event {
	k := Knobs{Loss: 0.1, Duplicate: 0.1, Delay: time.Millisecond, Jitter: 3 * time.Millisecond, Reorder: 0.1}
	p := newPair(t, seed, k)
	var tr []Event
	p.f.SetTrace(func(e Event) { tr = append(tr, e) })
	p.stream(t, 0, 2000, 200*time.Microsecond)
	for range 2000 {
		// b answers what it got so far, through the same knobs.
		for _, tid := range p.drain() {
			p.eb.Send(context.Background(), hw.Address{LID: mustAttr(t, p.a).LID, QPN: 1}, cmMAD(uint64(tid), 0x13))
		}
		p.clk.Advance(100 * time.Microsecond)
	}
	return tr
}

func TestSameSeedSameTrace(t *testing.T) {
	t1, t2, t3 := trace(t, 42), trace(t, 42), trace(t, 43)
	if len(t1) < 4000 {
		t.Fatalf("trace has only %d events", len(t1))
	}
	if len(t1) != len(t2) {
		t.Fatalf("same seed: %d vs %d events", len(t1), len(t2))
	}
	for i := range t1 {
		if t1[i] != t2[i] {
			t.Fatalf("same seed diverges at event %d: %+v vs %+v", i, t1[i], t2[i])
		}
	}
	same := len(t1) == len(t3)
	for i := 0; same && i < len(t1); i++ {
		same = t1[i] == t3[i]
	}
	if same {
		t.Error("a different seed gave the same trace")
	}
}

// Recv returns what is queued before a failure, as umad's reads return
// their queue before the error of a removed device, every time: a select
// over both picked at random (about half the runs), and a seed did not
// replay. A FailReceive error comes once, after the queue; a removal's
// stays.
func TestRecvQueuedBeforeFailure(t *testing.T) {
	ctx := context.Background()
	for run := range 100 {
		p := newPair(t, uint64(run), Knobs{})
		p.stream(t, 0, 4, 0)
		p.b.FailReceive(syscall.EIO)
		for i := range 4 {
			if r, err := p.eb.Recv(ctx); err != nil || uint32(tidOf(&r.MAD)) != uint32(i) {
				t.Fatalf("run %d: Recv %d after FailReceive: TID %#x, %v; want the queued MAD %d", run, i, tidOf(&r.MAD), err, i)
			}
		}
		if _, err := p.eb.Recv(ctx); !errors.Is(err, syscall.EIO) {
			t.Fatalf("run %d: Recv after the queue: %v, want EIO", run, err)
		}

		p.stream(t, 10, 2, 0)
		if err := p.f.RemoveDevice(p.b.Device().(*Device), syscall.ENODEV); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if r, err := p.eb.Recv(ctx); err != nil || uint32(tidOf(&r.MAD)) != uint32(10+i) {
				t.Fatalf("run %d: Recv %d after the removal: TID %#x, %v; want the queued MAD", run, i, tidOf(&r.MAD), err)
			}
		}
		for range 2 {
			if _, err := p.eb.Recv(ctx); !errors.Is(err, syscall.ENODEV) {
				t.Fatalf("run %d: Recv on the removed device: %v, want ENODEV", run, err)
			}
		}
	}
}

// A MAD still in flight (delayed) when its device is removed is not
// delivered to the removed device's endpoints.
func TestRemovedDeviceGetsNothingInFlight(t *testing.T) {
	p := newPair(t, 7, Knobs{Delay: time.Millisecond})
	p.stream(t, 0, 3, 0)
	if err := p.f.RemoveDevice(p.b.Device().(*Device), syscall.EIO); err != nil {
		t.Fatal(err)
	}
	p.clk.Advance(time.Millisecond)
	if c := p.b.Counters(); c.Received != 0 || queued(p.eb) {
		t.Errorf("after the removal: %+v, queued %v; want nothing delivered", c, queued(p.eb))
	}
}

// Flush releases the held MADs in link order, so that a seed replays the
// same trace.
func TestFlushReplays(t *testing.T) {
	run := func() []Event {
		clk := clock.NewFake(time.Unix(1000, 0))
		f := New(Config{Seed: 3, Clock: clk, Knobs: Knobs{Reorder: 1, Jitter: time.Millisecond}, QueueLen: 64})
		var trace []Event
		f.SetTrace(func(e Event) { trace = append(trace, e) })
		var ports []*Port
		for i := range 8 {
			ports = append(ports, mustDev(t)(f.AddIB(fmt.Sprintf("d%d", i), 1)).Port(1))
		}
		eps := make([]hw.Endpoint, len(ports))
		for i, p := range ports {
			eps[i] = open(t, p, cmReg)
		}
		for i := 1; i < len(ports); i++ {
			a, _ := ports[i].Attr()
			if err := eps[0].Send(context.Background(), hw.Address{LID: a.LID, QPN: 1}, cmMAD(uint64(i), 0x10)); err != nil {
				t.Fatal(err)
			}
		}
		f.Flush()
		clk.Advance(time.Second)
		return trace
	}
	first := fmt.Sprint(run())
	for i := range 20 {
		if got := fmt.Sprint(run()); got != first {
			t.Fatalf("run %d's trace differs from the first:\n%s\n%s", i+1, got, first)
		}
	}
}
