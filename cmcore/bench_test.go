package cmcore

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
	"github.com/ucmd/ucmd/hw/sim"
)

// BenchmarkHandshake measures full connection lifecycles between two CMs
// in one process on hw/sim: REQ, REP, RTU, DREQ, DREP, with both CMs'
// receive goroutines and handlers doing the work, as in production. One
// op is one lifecycle; handshakes/s is reported. Run with -cpu 1 for the
// per-core figure. BenchmarkHandshakeObserved is the same with an
// Observer on both CMs, to compare tracing off (nil) with on.
func BenchmarkHandshake(b *testing.B) { benchHandshake(b, nil) }

// BenchmarkHandshakeObserved: BenchmarkHandshake with an Observer that
// copies each event's MAD, as a trace subscriber would.
func BenchmarkHandshakeObserved(b *testing.B) { benchHandshake(b, &copyObserver{}) }

// BenchmarkHandshakeIdleObserver: with an Observer that returns after one
// atomic load and wants no event times, as the daemon's trace hub does
// with no `ucmd trace` running.
func BenchmarkHandshakeIdleObserver(b *testing.B) { benchHandshake(b, &idleObserver{}) }

type idleObserver struct{ subscribers atomic.Int32 }

func (o *idleObserver) WantsTime() bool { return o.subscribers.Load() > 0 }

func (o *idleObserver) ObserveMAD(*MADEvent) {
	if o.subscribers.Load() == 0 {
		return
	}
}

type copyObserver struct {
	mu  sync.Mutex
	n   int
	buf hw.MAD
}

func (o *copyObserver) ObserveMAD(ev *MADEvent) {
	o.mu.Lock()
	o.n++
	o.buf = *ev.MAD
	o.mu.Unlock()
}

func benchHandshake(b *testing.B, obs Observer) {
	clk := clock.NewFake(time.Unix(0, 0))
	f := sim.New(sim.Config{Seed: 1, Clock: clk})
	da, _ := f.AddIB("a", 1)
	db, _ := f.AddIB("b", 1)
	ca, cb := New(da, Options{Clock: clk, Observer: obs}), New(db, Options{Clock: clk, Observer: obs})
	if err := ca.Start(); err != nil {
		b.Fatal(err)
	}
	if err := cb.Start(); err != nil {
		b.Fatal(err)
	}
	defer ca.Close()
	defer cb.Close()

	const window = 32
	done := make(chan *ID, window)
	children := make(chan *ID, 4*window)
	passive := func(ev *Event) Outcome {
		switch ev.Type {
		case EventREQReceived:
			return destroyIf(ev.ID.SendREP(&REPParams{QPN: ev.REQ.RemoteQPN, StartingPSN: 1}))
		case EventDREQReceived:
			// Destroyed by the benchmark loop, as ucm would (from a
			// command, not from the handler).
			children <- ev.ID
			return destroyIf(ev.ID.SendDREP(nil))
		}
		return Keep
	}
	active := func(ev *Event) Outcome {
		switch ev.Type {
		case EventREPReceived:
			if err := ev.ID.SendRTU(nil); err != nil {
				return Destroy
			}
			return destroyIf(ev.ID.SendDREQ(nil))
		case EventDREPReceived:
			done <- ev.ID
		}
		return Keep
	}
	l := cb.CreateID(passive)
	if err := l.Listen(0x1234, 0); err != nil {
		b.Fatal(err)
	}
	req := &REQParams{
		Primary: simPath(da, db), ServiceID: 0x1234, QPType: QPTypeRC,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, MaxCMRetries: 15,
	}
	start := func(i int) {
		id := ca.CreateID(active)
		r := *req
		r.QPN = uint32(i%(1<<20)) + 1
		if err := id.SendREQ(&r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := 0; i < b.N; i++ {
		if inflight == window {
			id := <-done
			id.Destroy()
			(<-children).Destroy()
			inflight--
		}
		start(i)
		inflight++
		if i%1024 == 1023 {
			clk.Advance(time.Second) // timewait ends: comm IDs are released
		}
	}
	for ; inflight > 0; inflight-- {
		(<-done).Destroy()
		(<-children).Destroy()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handshakes/s")
}
