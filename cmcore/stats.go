package cmcore

import "sync/atomic"

// Stats counts a CM's MADs since New, for `ucmd status`.
type Stats struct {
	Sent          uint64 // MADs handed to the endpoints, retransmissions included
	SendErrors    uint64 // sends the endpoint refused (lost like a MAD on the wire; not in Dropped)
	Received      uint64 // MADs received
	Dropped       uint64 // received MADs that were not CM messages we can decode
	Retransmitted uint64 // retransmissions after a timeout
	TimedOut      uint64 // messages that ran out of retries (*_ERROR events)
}

type counters struct {
	sent, sendErrors, received, dropped, retransmitted, timedOut atomic.Uint64
}

// Stats returns the CM's counters.
func (cm *CM) Stats() Stats {
	c := &cm.stats
	return Stats{
		Sent:          c.sent.Load(),
		SendErrors:    c.sendErrors.Load(),
		Received:      c.received.Load(),
		Dropped:       c.dropped.Load(),
		Retransmitted: c.retransmitted.Load(),
		TimedOut:      c.timedOut.Load(),
	}
}

// Probe takes the CM's lock and lets it go: it returns unless the lock is
// held for good, by a deadlock (the daemon's health check for systemd's
// watchdog).
func (cm *CM) Probe() {
	cm.mu.Lock()
	//lint:ignore SA2001 waiting for the lock is the point
	cm.mu.Unlock()
}
