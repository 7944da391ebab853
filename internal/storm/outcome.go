package storm

import (
	"sync"
	"sync/atomic"
	"time"
)

// tally counts connections established on both sides and failed, over
// every connection of a storm.
type tally struct {
	established, failed atomic.Int64
	lastEst             atomic.Int64 // ns since the storm's start
}

// outcome is one connection's progress. A connection fails on the first
// error event of either end; it is counted again as in progress if a
// retransmitted REQ gives it a new passive end (after that end's REP ran out
// of retries), and as established once both ends are.
type outcome struct {
	mu       sync.Mutex
	act, pas bool // ESTABLISHED reached on each end
	failed   bool // counted in tally.failed
	done     bool // counted in tally.established
}

func (o *outcome) established(t *tally, active bool, since time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if active {
		o.act = true
	} else {
		o.pas = true
	}
	if o.done || !o.act || !o.pas {
		return
	}
	o.done = true
	if o.failed {
		o.failed = false
		t.failed.Add(-1)
	}
	t.established.Add(1)
	for {
		cur := t.lastEst.Load()
		if int64(since) <= cur || t.lastEst.CompareAndSwap(cur, int64(since)) {
			return
		}
	}
}

func (o *outcome) fail(t *tally) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failed && !o.done {
		o.failed = true
		t.failed.Add(1)
	}
}

// revive is a new passive end for the connection.
func (o *outcome) revive(t *tally) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pas = false
	if o.failed {
		o.failed = false
		t.failed.Add(-1)
	}
}
