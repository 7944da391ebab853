// Package pace spaces out the walks of ucm's ids that anyone allowed on an
// operator surface can ask for at will (a status snapshot, a trace's
// owner table): each takes milliseconds under the files' locks at tens of
// thousands of ids, so a loop of requests must not turn into a loop of
// walks.
package pace

import "time"

// Spacer runs one walk at a time, each no sooner than ten times the last
// one's duration after that one began: however often they are asked for,
// the walks take about a tenth of a CPU. The zero value is ready; callers
// serialise Run themselves (it is meant to be called under their lock).
type Spacer struct {
	next  time.Time           // no walk before this
	sleep func(time.Duration) // nil: time.Sleep (tests replace it)
}

// Run waits for the spacing, at most maxWait, then runs walk.
func (s *Spacer) Run(maxWait time.Duration, walk func()) {
	if wait := time.Until(s.next); wait > 0 {
		sleep := s.sleep
		if sleep == nil {
			sleep = time.Sleep
		}
		sleep(min(wait, maxWait))
	}
	start := time.Now()
	walk()
	s.next = start.Add(10 * time.Since(start))
}
