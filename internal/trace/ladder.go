package trace

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// A ladder draws one connection's messages as two columns, A (the side
// that sent the first REQ or SIDR_REQ) on the left and B on the right,
// one arrow per message. When both ends are local, a MAD's send on one
// side and its receipt on the other are one arrow with both times.
// Retransmissions, drops, refused sends, MADs that never arrived and
// timeouts are marked on their arrows. Times are seconds since the
// connection's first MAD, on the side that saw the event.

const arrowWidth = 50

// conn is one connection's events, grouped by comm ids.
type conn struct {
	events []*Event
	msgs   []Message
}

// Connections groups events into connections (linked by their comm ids),
// ordered by their first event. Loss markers and MADs without comm ids
// are left out.
func Connections(evs []Event) [][]Event {
	parent := map[uint32]uint32{}
	var find func(uint32) uint32
	find = func(c uint32) uint32 {
		p, ok := parent[c]
		if !ok || p == c {
			parent[c] = c
			return c
		}
		r := find(p)
		parent[c] = r
		return r
	}
	msgs := make([]Message, len(evs))
	for i := range evs {
		if evs[i].Lost > 0 {
			continue
		}
		msgs[i] = evs[i].Decode()
		l, r := msgs[i].LocalCommID, msgs[i].RemoteCommID
		switch {
		case l != 0 && r != 0:
			parent[find(l)] = find(r)
		case l != 0:
			find(l)
		case r != 0:
			find(r)
		}
	}
	groups := map[uint32]int{}
	var out [][]Event
	for i := range evs {
		if evs[i].Lost > 0 {
			continue
		}
		c := msgs[i].LocalCommID
		if c == 0 {
			c = msgs[i].RemoteCommID
		}
		if c == 0 {
			continue
		}
		root := find(c)
		g, ok := groups[root]
		if !ok {
			g = len(out)
			groups[root] = g
			out = append(out, nil)
		}
		out[g] = append(out[g], evs[i])
	}
	return out
}

// row is one arrow (or a timeout mark) of a ladder.
type row struct {
	from   int // side that sent it: 0 = A, 1 = B
	label  string
	t      [2]time.Time // per side: when that side saw it
	seen   [2]bool
	sendOK bool   // the sender's endpoint took it
	recv   string // "", "received", "dropped"
	note   string // reason, or "timed out"
	mark   bool   // a timeout: no arrow
}

// wireKey identifies one MAD on the wire: the message, its sender's and
// receiver's comm ids as the message carries them, the low half of its
// TID (umad may rewrite the upper half).
type wireKey struct {
	name     string
	from, to uint32
	tid      uint32
}

// Ladder writes the ladder of each connection among evs (see Connections),
// separated by blank lines.
func Ladder(w io.Writer, evs []Event) error {
	for i, c := range Connections(evs) {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(w, ladder(c)); err != nil {
			return err
		}
	}
	return nil
}

func ladder(evs []Event) string {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) })
	c := conn{}
	for i := range evs {
		c.events = append(c.events, &evs[i])
		c.msgs = append(c.msgs, evs[i].Decode())
	}
	// The sides' comm ids: A sent the first REQ (or is the one the
	// first message came from); B is the other.
	var comm [2]uint32
	sidr := false
	for i, m := range c.msgs {
		from, to := wireIDs(c.events[i], &m)
		if comm[0] == 0 && comm[1] == 0 {
			switch m.Name {
			case "REP", "SIDR_REP", "MRA", "REJ", "DREP", "APR":
				comm[0], comm[1] = to, from
			default:
				comm[0], comm[1] = from, to
			}
			sidr = strings.HasPrefix(m.Name, "SIDR")
			continue
		}
		if comm[1] == 0 && to == comm[0] && from != 0 {
			comm[1] = from
		}
	}
	sideOf := func(ev *Event, m *Message) int {
		// The event's local end.
		if sidr {
			if (m.Name == "SIDR_REQ") == ev.Outbound() {
				return 0
			}
			return 1
		}
		l, r := m.LocalCommID, m.RemoteCommID
		switch {
		case l != 0 && l == comm[0]:
			return 0
		case l != 0 && l == comm[1]:
			return 1
		case r != 0 && r == comm[0]:
			return 1
		}
		return 0
	}
	var label [2]string
	var local [2]bool
	var t0 time.Time
	var rows []*row
	pendingSend := map[wireKey][]*row{}
	pendingRecv := map[wireKey][]*row{}
	retries := map[wireKey]int{}
	for i, ev := range c.events {
		m := &c.msgs[i]
		side := sideOf(ev, m)
		if t0.IsZero() {
			t0 = ev.Time
		}
		if !local[side] {
			local[side] = true
			label[side] = sideLabel(ev)
		}
		if !local[1-side] && label[1-side] == "" {
			label[1-side] = peerLabel(ev)
		}
		from, to := wireIDs(ev, m)
		k := wireKey{name: m.Name, from: from, to: to, tid: uint32(m.TID)}
		name := m.Name
		switch ev.Dir {
		case "timed-out":
			rows = append(rows, &row{from: side, label: name + " timed out", t: at(side, ev.Time), seen: seen(side), mark: true})
			continue
		case "retransmitted", "send-failed":
			if ev.Dir == "retransmitted" || retries[k] > 0 {
				retries[k]++
				name = fmt.Sprintf("%s (retry %d)", name, retries[k])
			} else {
				retries[k] = 0
			}
		case "sent":
			retries[k] = 0
		}
		if ev.Outbound() {
			r := &row{from: side, label: name, t: at(side, ev.Time), seen: seen(side), sendOK: ev.Dir != "send-failed"}
			if !r.sendOK {
				r.note = "send failed: " + ev.Reason
			}
			if q := pendingRecv[k]; len(q) > 0 && r.sendOK {
				// Its receipt was observed first.
				rr := q[0]
				pendingRecv[k] = q[1:]
				rr.t[side], rr.seen[side], rr.sendOK, rr.label = ev.Time, true, true, name
				continue
			}
			rows = append(rows, r)
			if r.sendOK {
				pendingSend[k] = append(pendingSend[k], r)
			}
			continue
		}
		// Inbound at side: sent by the other side. Retransmissions are
		// identical, so the receipt goes with the latest send before it
		// (retransmission intervals are far above a MAD's flight time)
		// and the earlier ones were lost.
		if q := pendingSend[k]; len(q) > 0 {
			r := q[len(q)-1]
			pendingSend[k] = nil
			r.t[side], r.seen[side], r.recv = ev.Time, true, ev.Dir
			if ev.Dir == "dropped" {
				r.note = ev.Reason
			}
			continue
		}
		r := &row{from: 1 - side, label: name, t: at(side, ev.Time), seen: seen(side), sendOK: true, recv: ev.Dir}
		if ev.Dir == "dropped" {
			r.note = ev.Reason
		}
		rows = append(rows, r)
		if local[1-side] {
			pendingRecv[k] = append(pendingRecv[k], r)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "A: %s\nB: %s\n", label[0], label[1])
	if sid := serviceOf(c.events, c.msgs); sid != 0 {
		fmt.Fprintf(&b, "service id 0x%016x, comm ids A 0x%08x B 0x%08x\n", sid, comm[0], comm[1])
	} else {
		fmt.Fprintf(&b, "comm ids A 0x%08x B 0x%08x\n", comm[0], comm[1])
	}
	line := func(format string, args ...any) {
		b.WriteString(strings.TrimRight(fmt.Sprintf(format, args...), " "))
		b.WriteByte('\n')
	}
	line("%10s  %s  %s", "A time", "A"+strings.Repeat(" ", arrowWidth-2)+"B", "B time")
	for _, r := range rows {
		line("%10s  %s  %s", rel(r, 0, t0), arrow(r, local), rel(r, 1, t0))
	}
	return b.String()
}

func at(side int, t time.Time) (a [2]time.Time) { a[side] = t; return }
func seen(side int) (s [2]bool)                 { s[side] = true; return }

func rel(r *row, side int, t0 time.Time) string {
	if !r.seen[side] {
		return ""
	}
	return fmt.Sprintf("%.6f", r.t[side].Sub(t0).Seconds())
}

// arrow draws one row, arrowWidth wide, from "|" (A) to "|" (B).
func arrow(r *row, local [2]bool) string {
	label := r.label
	if r.note != "" && !r.mark {
		label += " (" + r.note + ")"
	}
	inner := arrowWidth - 2
	if r.mark {
		s := "x " + label
		if r.from == 1 {
			s = label + " x"
			return "|" + fmt.Sprintf("%*s", inner, s) + "|"
		}
		return "|" + fmt.Sprintf("%-*s", inner, s) + "|"
	}
	// How the arrow ends at the receiver: '>' arrived, 'x' dropped by
	// the receiver, refused by the sender's endpoint or never arrived
	// while the receiver was traced; an untraced peer gets '>'.
	end := ">"
	switch {
	case r.recv == "dropped", !r.sendOK:
		end = "x"
	case r.recv == "" && local[1-r.from]:
		end = "x"
		label += " (lost)"
	}
	d := strings.Repeat("-", max(arrowWidth-len(label)-7, 1))
	if r.from == 0 {
		return "|-- " + label + " " + d + end + "|"
	}
	if end == ">" {
		end = "<"
	}
	return "|" + end + d + " " + label + " --|"
}

// wireIDs are the comm ids as the message carries them: its sender's and
// its receiver's.
func wireIDs(ev *Event, m *Message) (from, to uint32) {
	if ev.Outbound() {
		return m.LocalCommID, m.RemoteCommID
	}
	return m.RemoteCommID, m.LocalCommID
}

func sideLabel(ev *Event) string {
	s := fmt.Sprintf("%s:%d", ev.Dev, ev.Port)
	if ev.Local.GID != "" {
		s += " " + ev.Local.GID
	} else if ev.Local.LID != 0 {
		s += fmt.Sprintf(" lid %d", ev.Local.LID)
	}
	if ev.PID != 0 {
		s += fmt.Sprintf(" pid %d", ev.PID)
		if ev.Comm != "" {
			s += " (" + ev.Comm + ")"
		}
	}
	return s
}

func peerLabel(ev *Event) string {
	if ev.Remote.GID != "" {
		return "remote " + ev.Remote.GID + " (not traced)"
	}
	return fmt.Sprintf("remote lid %d (not traced)", ev.Remote.LID)
}

func serviceOf(evs []*Event, msgs []Message) uint64 {
	for i := range msgs {
		if msgs[i].ServiceID != 0 {
			return msgs[i].ServiceID
		}
	}
	for _, ev := range evs {
		if ev.ServiceID != 0 {
			return uint64(ev.ServiceID)
		}
	}
	return 0
}
