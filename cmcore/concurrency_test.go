package cmcore

import (
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw/sim"
	"go.uber.org/goleak"
)

// TestConcurrentUse runs two CMs on the real clock with many goroutines
// connecting, disconnecting and destroying at arbitrary moments (also from
// handlers), for the race detector and deadlocks; everything must wind
// down with no goroutine left.
func TestConcurrentUse(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := sim.New(sim.Config{Seed: 3, Knobs: sim.Knobs{Loss: 0.1, Duplicate: 0.1}})
	da, _ := f.AddIB("a", 1)
	db, _ := f.AddIB("b", 1)
	ca, cb := New(da, Options{}), New(db, Options{})
	must(t, ca.Start())
	must(t, cb.Start())

	var mu sync.Mutex
	var children []*ID
	passive := func(ev *Event) Outcome {
		switch ev.Type {
		case EventREQReceived:
			mu.Lock()
			children = append(children, ev.ID)
			n := len(children)
			mu.Unlock()
			if n%7 == 0 {
				ev.ID.Destroy() // reject from inside the handler
				return Keep
			}
			return destroyIf(ev.ID.SendREP(&REPParams{QPN: ev.REQ.RemoteQPN}))
		case EventDREQReceived:
			return destroyIf(ev.ID.SendDREP(nil))
		}
		return Keep
	}
	l := cb.CreateID(passive)
	must(t, l.Listen(0x1234, 0))

	const workers, rounds = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				done := make(chan struct{}, 4)
				id := ca.CreateID(func(ev *Event) Outcome {
					switch ev.Type {
					case EventREPReceived:
						if err := ev.ID.SendRTU(nil); err != nil {
							return Destroy
						}
						return destroyIf(ev.ID.SendDREQ(nil))
					case EventDREPReceived, EventDREQError, EventREJReceived, EventREQError:
						done <- struct{}{}
					}
					return Keep
				})
				r := &REQParams{
					Primary: simPath(da, db), ServiceID: 0x1234, QPType: QPTypeRC,
					QPN:                     uint32(w*rounds + i + 1),
					RemoteCMResponseTimeout: 8, LocalCMResponseTimeout: 8, MaxCMRetries: 3,
				}
				if err := id.SendREQ(r); err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 {
					id.Destroy() // racing the handshake
					continue
				}
				select {
				case <-done:
				case <-time.After(5 * time.Second):
				}
				id.Destroy()
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	for _, c := range children {
		c.Destroy()
	}
	mu.Unlock()
	l.Destroy()
	ca.Close()
	cb.Close()
}
