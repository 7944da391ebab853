package cmcore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw/sim"
	"go.uber.org/goleak"
)

var lossyKnobs = sim.Knobs{Loss: 0.3, Duplicate: 0.2, Reorder: 0.2}

// lossyOutcome is what one connection attempt came to on each side.
type lossyOutcome struct {
	active, passive []EventType
}

// lossyRetries is low on purpose, so that a fair share of attempts end in
// REQ_ERROR / REP_ERROR / DREQ_ERROR and those paths are checked too.
const lossyRetries = 3

// runLossy makes n connection attempts (in batches) over a fabric with 30% loss, duplication and
// reordering, disconnects what connected, destroys everything and checks
// that nothing is left. It returns the per-attempt event logs.
func runLossy(t *testing.T, seed uint64, n int) ([]lossyOutcome, sim.Counters) {
	p := newPair(t, seed, lossyKnobs)
	p.acceptAll()
	ids := make([]*ID, n)
	const batch = 50
	for start := 0; start < n; start += batch {
		for i := start; i < min(start+batch, n); i++ {
			ids[i] = p.a.CreateID(p.ra.handle)
			r := p.req(uint32(i + 1))
			r.MaxCMRetries = lossyRetries
			must(t, ids[i].SendREQ(r))
		}
		p.n.run(time.Minute)
		for i := start; i < min(start+batch, n); i++ {
			if s, _ := ids[i].State(); s == StateEstablished {
				must(t, ids[i].SendDREQ(nil))
			}
		}
		p.n.run(time.Minute)
	}
	// Match each attempt to the passive connection(s) it created.
	byRemote := make(map[uint32][]*ID)
	for _, c := range p.bChildren {
		byRemote[c.Attr().RemoteCommID] = append(byRemote[c.Attr().RemoteCommID], c)
	}
	out := make([]lossyOutcome, n)
	for i, id := range ids {
		out[i].active = p.ra.log[id]
		kids := byRemote[id.Attr().LocalCommID]
		for _, c := range kids {
			out[i].passive = append(out[i].passive, p.rb.log[c]...)
		}
		checkLossyOutcome(t, i, out[i], len(kids))
	}
	// Tear down: nothing may be left.
	for _, id := range ids {
		id.Destroy()
	}
	for _, c := range p.bChildren {
		c.Destroy()
	}
	p.listener.Destroy()
	p.n.run(time.Minute)
	for _, cm := range []*CM{p.a, p.b} {
		if ids, evs := cm.Count(); ids != 0 || evs != 0 {
			t.Errorf("%d ids and %d queued events left", ids, evs)
		}
	}
	if pend := p.n.clk.Pending(); pend != 0 {
		t.Errorf("%d timers left", pend)
	}
	c := p.da.Port(1).Counters()
	p.n.close()
	return out, c
}

// checkLossyOutcome: each side ends ESTABLISHED-then-disconnected or with
// the error event that matches what the other side saw.
func checkLossyOutcome(t *testing.T, i int, o lossyOutcome, kids int) {
	t.Helper()
	a, b := o.active, o.passive
	has := func(l []EventType, e EventType) bool { return slices.Contains(l, e) }
	switch {
	case has(a, EventREPReceived):
		// Connected from a's view: then disconnected, one way or another,
		// and out of timewait.
		if !(has(a, EventDREPReceived) || has(a, EventDREQError)) || a[len(a)-1] != EventTimewaitExit {
			t.Errorf("attempt %d: active %v: connected but did not disconnect cleanly", i, a)
		}
		// b either got the RTU (then the DREQ, unless all were lost) or
		// never did and its REP timed out.
		switch {
		case has(b, EventRTUReceived):
			if has(b, EventDREQReceived) && b[len(b)-1] != EventTimewaitExit {
				t.Errorf("attempt %d: passive %v: DREQ without timewait exit", i, b)
			}
			if !has(b, EventDREQReceived) && !has(a, EventDREQError) {
				t.Errorf("attempt %d: active %v got a DREP the passive %v never sent", i, a, b)
			}
		case has(b, EventREPError):
		default:
			t.Errorf("attempt %d: active connected %v, passive %v", i, a, b)
		}
	case has(a, EventREQError):
		if len(a) != 1 || has(b, EventRTUReceived) {
			t.Errorf("attempt %d: active %v, passive %v", i, a, b)
		}
		if kids > 0 && !has(b, EventREPError) {
			t.Errorf("attempt %d: REQ timed out but passive %v did not", i, b)
		}
	default:
		t.Errorf("attempt %d: active ended with %v (passive %v)", i, a, b)
	}
}

// TestSimLossy1000 is the acceptance run: 1000 attempts under 30% loss
// plus duplication plus reordering, correct outcomes on both sides, no
// ids, timers or goroutines left, and the same seed gives the same result.
func TestSimLossy1000(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out1, c1 := runLossy(t, 42, 1000)
	out2, c2 := runLossy(t, 42, 1000)
	if c1 != c2 || fmt.Sprint(out1) != fmt.Sprint(out2) {
		t.Errorf("same seed, different outcome: counters %+v vs %+v", c1, c2)
	}
	est, reqErr, repErr := 0, 0, 0
	for _, o := range out1 {
		switch {
		case slices.Contains(o.active, EventREPReceived):
			est++
			if slices.Contains(o.passive, EventREPError) {
				repErr++
			}
		case slices.Contains(o.active, EventREQError):
			reqErr++
		}
	}
	t.Logf("1000 attempts: %d connected (%d with the passive REP timing out), %d REQ_ERROR; port a: sent %d lost %d duplicated %d reordered %d",
		est, repErr, reqErr, c1.Sent, c1.Lost, c1.Duplicated, c1.Reordered)
	if est < 700 || reqErr == 0 {
		t.Errorf("%d connected, %d REQ_ERROR: the knobs no longer exercise both outcomes", est, reqErr)
	}
}
