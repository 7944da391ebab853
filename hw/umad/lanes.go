package umad

import (
	"context"
	"encoding/binary"

	"github.com/ucmd/ucmd/hw"
)

// Same-TID sends (docs/umad.md).
//
// umad's write() refuses with EINVAL a request MAD whose class and TID
// equal those of a MAD still on the same file's send list, and it reports
// no completion for a send that expects no response, so a sender cannot
// know when a TID is free again. The CM gives one TID to several messages
// of a connection (REQ, RTU and DREQ carry the local comm ID; REP, MRA,
// REJ and DREP echo the peer's), often back to back.
//
// umad puts the agent's hi_tid into the TID's upper half before it
// compares, and the one kernel call that waits for an agent's sends to
// complete is its unregistration. So each send file (a lane) remembers the
// TIDs it carried since its agent was registered, and a send never goes
// out on a lane that carried its TID in the current registration:
//
//   - it takes an idle lane that has not carried the TID,
//   - or opens another lane while under Options.SendFiles,
//   - or renews an idle lane first: unregister its agent (which returns
//     once every MAD sent through it has completed, so the file's send
//     list is empty) and register a new one.
//
// No timing assumption is involved. A renewal costs two ioctls and the
// wait for that lane's last sends (microseconds on an idle port); lanes
// are also renewed after maxCarried distinct TIDs to bound the memory.

// maxCarried is how many distinct TIDs a lane remembers before it is
// renewed.
const maxCarried = 1024

// tidKey is what umad compares, less the agent's half: the management
// class and the low 32 bits of the TID.
func tidKey(mad *hw.MAD) uint64 {
	return uint64(mad[1])<<32 | uint64(binary.BigEndian.Uint32(mad[12:16]))
}

// carries reports whether sf sent a MAD with key k since its agent was
// registered.
func (sf *sendFile) carries(k uint64) bool {
	_, ok := sf.carried[k]
	return ok
}

// sent records k on sf after a successful write.
func (sf *sendFile) sent(k uint64) {
	if sf.carried == nil {
		sf.carried = make(map[uint64]struct{})
	}
	sf.carried[k] = struct{}{}
}

// acquire returns a lane on which a MAD with key k may be written: one
// that has not carried k, or one renewed for it.
func (e *Endpoint) acquire(ctx context.Context, k uint64) (*sendFile, error) {
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, hw.ErrClosed
		}
		if sf := e.takeIdle(func(sf *sendFile) bool { return !sf.carries(k) }); sf != nil {
			e.mu.Unlock()
			if len(sf.carried) < maxCarried || e.renewLane(sf) {
				return sf, nil
			}
			continue
		}
		if e.opened < e.maxFiles {
			e.opened++
			e.mu.Unlock()
			sf, err := e.openSend()
			if err != nil {
				e.mu.Lock()
				e.opened--
				e.wakeSenders() // a waiting send may open one in its place
				e.mu.Unlock()
				return nil, err
			}
			return sf, nil
		}
		if sf := e.takeIdle(func(*sendFile) bool { return true }); sf != nil {
			e.mu.Unlock()
			if e.renewLane(sf) {
				return sf, nil
			}
			continue // closed: a new lane (a new file, its send list empty) takes its place
		}
		wake := e.returned
		e.waiting++
		e.mu.Unlock()
		var err error
		select {
		case <-wake:
		case <-ctx.Done():
			err = ctx.Err()
		case <-e.done:
			err = hw.ErrClosed
		}
		e.mu.Lock()
		e.waiting--
		e.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// takeIdle removes and returns the most recently returned idle lane that
// ok accepts, or nil. Called with e.mu held.
func (e *Endpoint) takeIdle(ok func(*sendFile) bool) *sendFile {
	for i := len(e.idle) - 1; i >= 0; i-- {
		if sf := e.idle[i]; ok(sf) {
			e.idle = append(e.idle[:i], e.idle[i+1:]...)
			return sf
		}
	}
	return nil
}

// renewLane gives sf a fresh agent, waiting for the MADs sent through
// the old one to complete. A lane that cannot be renewed is closed (and
// false returned); closing waits for its sends the same way.
func (e *Endpoint) renewLane(sf *sendFile) bool {
	agent, err := e.renew(sf)
	if err != nil {
		e.renewFailures.Add(1)
		e.closeLane(sf)
		return false
	}
	e.renewals.Add(1)
	sf.agent = agent
	clear(sf.carried)
	return true
}

// closeLane closes a lane that is not coming back to the pool.
func (e *Endpoint) closeLane(sf *sendFile) {
	sf.close()
	e.mu.Lock()
	e.opened--
	e.wakeSenders()
	e.mu.Unlock()
}

// wakeSenders wakes sends waiting for a lane. Called with e.mu held.
func (e *Endpoint) wakeSenders() {
	if e.waiting > 0 {
		close(e.returned)
		e.returned = make(chan struct{})
	}
}
