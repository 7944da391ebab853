package trace

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ucmd/ucmd/internal/status"
)

// Filter selects the MADs a subscriber gets; zero fields select all, set
// ones must all match. A MAD matches a service id, comm id or pid filter
// directly (the REQ's service id, either comm id, the owning process) or
// because it belongs to a connection an earlier MAD matched: every comm
// id of a matching MAD is remembered, so a connection's REP, RTU, DREQ,
// DREP follow its REQ, and both sides' MADs when both ends are local.
type Filter struct {
	Dev       string        `json:"dev,omitempty"` // RDMA device name (rxe0)
	ServiceID *status.Hex64 `json:"service_id,omitempty"`
	CommID    uint32        `json:"comm_id,omitempty"`
	PID       int           `json:"pid,omitempty"`
}

// ParseFilter reads `ucmd trace` arguments in the rdma style of `ucmd
// status`: dev NAME, service-id ID (sid ID), comm-id ID, pid N. Numbers
// are decimal or 0x hex.
func ParseFilter(args []string) (Filter, error) {
	var f Filter
	if len(args)%2 != 0 {
		return f, fmt.Errorf("trace filter %q needs a value (dev NAME, service-id ID, comm-id ID, pid N)", args[len(args)-1])
	}
	for i := 0; i < len(args); i += 2 {
		k, v := args[i], args[i+1]
		switch strings.ToLower(k) {
		case "dev":
			f.Dev = v
		case "service-id", "sid":
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				return f, fmt.Errorf("trace filter service-id %q: %w", v, err)
			}
			h := status.Hex64(n)
			f.ServiceID = &h
		case "comm-id":
			n, err := strconv.ParseUint(v, 0, 32)
			if err != nil || n == 0 {
				return f, fmt.Errorf("trace filter comm-id %q: want a non-zero 32-bit number", v)
			}
			f.CommID = uint32(n)
		case "pid":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return f, fmt.Errorf("trace filter pid %q: want a process id", v)
			}
			f.PID = n
		default:
			return f, fmt.Errorf("unknown trace filter %q (want dev, service-id, comm-id or pid)", k)
		}
	}
	return f, nil
}

// matcher applies a Filter to a stream, remembering connections.
type matcher struct {
	f     Filter
	conns []*linked // one per connection-following criterion
}

// linked is one criterion with the comm ids of what it matched.
type linked struct {
	direct func(ev *Event, m *Message) bool
	comms  map[uint32]struct{}
}

const maxLinked = 1 << 16

func newMatcher(f Filter) *matcher {
	m := &matcher{f: f}
	add := func(fn func(ev *Event, m *Message) bool) {
		m.conns = append(m.conns, &linked{direct: fn, comms: make(map[uint32]struct{})})
	}
	if f.ServiceID != nil {
		sid := uint64(*f.ServiceID)
		add(func(ev *Event, m *Message) bool { return m.ServiceID == sid || uint64(ev.ServiceID) == sid })
	}
	if f.CommID != 0 {
		c := f.CommID
		add(func(_ *Event, m *Message) bool { return m.LocalCommID == c || m.RemoteCommID == c })
	}
	if f.PID != 0 {
		pid := f.PID
		add(func(ev *Event, _ *Message) bool { return ev.PID == pid })
	}
	return m
}

func (mt *matcher) match(ev *Event, m *Message) bool {
	if mt.f.Dev != "" && ev.Dev != mt.f.Dev {
		return false
	}
	for _, l := range mt.conns {
		if !l.match(ev, m) {
			return false
		}
	}
	return true
}

func (l *linked) match(ev *Event, m *Message) bool {
	ok := l.direct(ev, m)
	for _, c := range []uint32{m.LocalCommID, m.RemoteCommID} {
		if c != 0 {
			if _, in := l.comms[c]; in {
				ok = true
			}
		}
	}
	if !ok {
		return false
	}
	if len(l.comms) >= maxLinked {
		clear(l.comms)
	}
	for _, c := range []uint32{m.LocalCommID, m.RemoteCommID} {
		if c != 0 {
			l.comms[c] = struct{}{}
		}
	}
	return true
}

// Matcher is a Filter applied to a stream of Events in order, as the
// daemon applies it (for `ucmd trace -r`, which filters a saved trace).
type Matcher struct{ m *matcher }

// NewMatcher returns a fresh Matcher for f.
func NewMatcher(f Filter) *Matcher { return &Matcher{newMatcher(f)} }

// Match reports whether ev passes; markers (Lost) always do.
func (m *Matcher) Match(ev *Event) bool {
	if ev.Lost > 0 {
		return true
	}
	msg := ev.Decode()
	return m.m.match(ev, &msg)
}
