package trace

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
)

const (
	commA = 0x0a000001
	commB = 0x0b000002
)

var (
	sideA = Endpoint{GID: "fe80::5054:ff:fe12:3456", QPN: 1}
	sideB = Endpoint{GID: "fe80::5054:ff:feab:cdef", QPN: 1}
)

// mad is an event at dev (rxe0 is A, rxe1 is B) ms milliseconds in.
func mad(dev, dir string, ms float64, tid uint64, m wire.Message) Event {
	local, remote, pid, comm := sideA, sideB, 812, "client"
	if dev == "rxe1" {
		local, remote, pid, comm = sideB, sideA, 815, "server"
	}
	return Event{
		Time: t0.Add(time.Duration(ms * float64(time.Millisecond))), Dev: dev, Port: 1, Link: LinkRoCE, Dir: dir,
		MAD: testMAD(tid, m), Local: local, Remote: remote, PKey: 0xffff, GRH: &GRH{HopLimit: 64},
		PID: pid, Comm: comm,
	}
}

// A connection with both ends local: the first REQ is lost, its
// retransmission arrives; REP, RTU; then B disconnects.
func bothSides() []Event {
	req := testREQ()
	req.LocalCommID = commA
	rep := &wire.REP{LocalCommID: commB, RemoteCommID: commA, LocalQPN: 0x222, StartingPSN: 0x3000, LocalCAGUID: 2}
	rtu := &wire.RTU{LocalCommID: commA, RemoteCommID: commB}
	dreq := &wire.DREQ{LocalCommID: commB, RemoteCommID: commA, RemoteQPN: 0x111}
	drep := &wire.DREP{LocalCommID: commA, RemoteCommID: commB}
	return []Event{
		mad("rxe0", "sent", 0, commA, req),
		mad("rxe0", "retransmitted", 384, commA, req),
		mad("rxe1", "received", 384.2, commA, req),
		mad("rxe1", "sent", 385, commA, rep),
		mad("rxe0", "received", 385.3, commA, rep),
		mad("rxe0", "sent", 386, commA, rtu),
		mad("rxe1", "received", 386.1, commA, rtu),
		mad("rxe1", "sent", 1500, commB, dreq),
		mad("rxe0", "received", 1500.2, commB, dreq),
		mad("rxe0", "sent", 1501, commB, drep),
		mad("rxe1", "received", 1501.4, commB, drep),
	}
}

const bothSidesLadder = `A: rxe0:1 fe80::5054:ff:fe12:3456 pid 812 (client)
B: rxe1:1 fe80::5054:ff:feab:cdef pid 815 (server)
service id 0x0000000000001234, comm ids A 0x0a000001 B 0x0b000002
    A time  A                                                B  B time
  0.000000  |-- REQ (lost) ---------------------------------x|
  0.384000  |-- REQ (retry 1) ------------------------------>|  0.384200
  0.385300  |<---------------------------------------- REP --|  0.385000
  0.386000  |-- RTU ---------------------------------------->|  0.386100
  1.500200  |<--------------------------------------- DREQ --|  1.500000
  1.501000  |-- DREP --------------------------------------->|  1.501400
`

// Only the active side is local, the passive side never answers: the
// REQ's retries and its timeout.
func timeout() []Event {
	req := testREQ()
	req.LocalCommID = commA
	evs := []Event{
		mad("rxe0", "sent", 0, commA, req),
		mad("rxe0", "retransmitted", 384, commA, req),
		mad("rxe0", "send-failed", 768, commA, req),
		mad("rxe0", "timed-out", 1152, commA, req),
	}
	evs[2].Reason = "no route"
	return evs
}

const timeoutLadder = `A: rxe0:1 fe80::5054:ff:fe12:3456 pid 812 (client)
B: remote fe80::5054:ff:feab:cdef (not traced)
service id 0x0000000000001234, comm ids A 0x0a000001 B 0x00000000
    A time  A                                                B  B time
  0.000000  |-- REQ ---------------------------------------->|
  0.384000  |-- REQ (retry 1) ------------------------------>|
  0.768000  |-- REQ (retry 2) (send failed: no route) ------x|
  1.152000  |x REQ timed out                                 |
`

// Only the passive side is local: it rejects the REQ (the REJ carries no
// local comm id); a second REQ the CM ignored is dropped.
func rejected() []Event {
	req := testREQ()
	req.LocalCommID = commA
	rej := &wire.REJ{RemoteCommID: commA, MessageRejected: 0, Reason: 28}
	evs := []Event{
		mad("rxe1", "received", 0, commA, req),
		mad("rxe1", "sent", 2, commA, rej),
		mad("rxe1", "dropped", 400, commA, req),
	}
	evs[2].Reason = "ignored"
	return evs
}

const rejectedLadder = `A: remote fe80::5054:ff:fe12:3456 (not traced)
B: rxe1:1 fe80::5054:ff:feab:cdef pid 815 (server)
service id 0x0000000000001234, comm ids A 0x0a000001 B 0x00000000
    A time  A                                                B  B time
            |-- REQ ---------------------------------------->|  0.000000
            |<---------------------------------------- REJ --|  0.002000
            |-- REQ (ignored) ------------------------------x|  0.400000
`

func TestLadder(t *testing.T) {
	for _, tc := range []struct {
		name string
		evs  []Event
		want string
	}{
		{"both sides", bothSides(), bothSidesLadder},
		{"timeout", timeout(), timeoutLadder},
		{"rejected", rejected(), rejectedLadder},
		{"two connections", append(bothSides(), rejected()...), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Ladder(&b, tc.evs); err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && b.String() != tc.want {
				t.Errorf("ladder:\n%s\nwant:\n%s", b.String(), tc.want)
			}
		})
	}
}

func TestLadderWidth(t *testing.T) {
	var b bytes.Buffer
	Ladder(&b, bothSides())
	for _, l := range strings.Split(b.String(), "\n") {
		if i := strings.Index(l, "|"); i >= 0 && strings.LastIndex(l, "|")-i+1 != arrowWidth {
			t.Errorf("arrow of width %d: %q", strings.LastIndex(l, "|")-i+1, l)
		}
	}
}
