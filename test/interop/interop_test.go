//go:build interop

package interop

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

const wait = 30 * time.Second

// Ports of A's rdma_cm listeners, one per scenario (a server keeps running
// until guest A is told to stop).
const (
	portAccept    = 7471
	portReject    = 7472
	portLoss      = 7473
	portNobody    = 9999 // nobody listens in A
	portOurs      = 7481 // our listeners in B
	portOursREJ   = 7482
	portOursNone  = 7483 // nobody listens in B
	portOursLoss  = 7484
	srcPortActive = 0x3039
)

// activeConnect runs one connection from our CM to an accepting rdma_cm
// server in A (job srv): REQ with the rdma_cm header → REP → RTU, then
// DREQ → DREP, checking both sides' view at each step.
func activeConnect(t *testing.T, s *side, srv *job, port uint16, to hw.GID) {
	t.Helper()
	s.react = func(ev *cmcore.Event) error {
		if ev.Type == cmcore.EventREPReceived {
			return ev.ID.SendRTU(nil)
		}
		return nil
	}
	id := s.cm.CreateID(s.handle)
	defer id.Destroy()
	pd := cmaHdr(ipB, ipA, srcPortActive, "ours-req")
	p := reqParams(s.path(t, to), tcpSID(port), pd)
	t0 := time.Now()
	if err := id.SendREQ(p); err != nil {
		t.Fatal(err)
	}
	e := s.wait(t, cmcore.EventREPReceived, wait)
	t.Logf("REQ → REP in %v", time.Since(t0))
	if e.state != cmcore.StateEstablished {
		t.Errorf("after REP and our RTU: %v, want ESTABLISHED", e.state)
	}
	if e.rep.RemoteCAGUID != guidA {
		t.Errorf("REP CA GUID %#x, want A's %#x", e.rep.RemoteCAGUID, guidA)
	}
	if !bytes.HasPrefix(e.pd, []byte("kernel-rep")) {
		t.Errorf("REP private data %q, want the server's %q", e.pd, "kernel-rep")
	}

	// A's application: the request (our header parsed by rdma_cm), then
	// ESTABLISHED once our RTU arrived.
	req := srv.waitFor(t, wait, "request peer=")
	if got, want := field(req, "peer"), ipB.String()+":"+strconv.Itoa(srcPortActive); got != want {
		t.Errorf("A saw peer %s, want %s (from our cma header)", got, want)
	}
	if got, want := field(req, "local"), ipA.String()+":"+strconv.Itoa(int(port)); got != want {
		t.Errorf("A saw local %s, want %s", got, want)
	}
	if rr, id := field(req, "rr"), field(req, "id"); rr != "1" || id != "1" {
		t.Errorf("A saw responder resources %s, initiator depth %s, want 1 and 1", rr, id)
	}
	srv.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
	aa := id.Attr()
	if aa.RemoteCommID == 0 || aa.ServiceID != tcpSID(port) {
		t.Errorf("attr %+v", aa)
	}

	t1 := time.Now()
	if err := id.SendDREQ(nil); err != nil {
		t.Fatal(err)
	}
	e = s.wait(t, cmcore.EventDREPReceived, wait)
	t.Logf("DREQ → DREP in %v", time.Since(t1))
	if e.state != cmcore.StateTimewait {
		t.Errorf("after DREP: %v, want TIMEWAIT", e.state)
	}
	srv.waitFor(t, wait, "RDMA_CM_EVENT_DISCONNECTED")
	srv.waitFor(t, wait, "closed")
	s.wait(t, cmcore.EventTimewaitExit, wait)
	checkState(t, "after timewait", id, cmcore.StateIdle)
}

// TestOursActiveKernelPassive: cmcore in B connects to rdma_cm servers in
// A, over both GID kinds; a REQ for a service nobody listens on gets the
// kernel's REJ 8; an rdma_reject comes back as REJ 28 with its data.
func TestOursActiveKernelPassive(t *testing.T) {
	srv := runA(t, "server", strconv.Itoa(portAccept), "accept", "kernel-rep")
	srv.waitFor(t, wait, "listening")

	t.Run("IPv4MappedGID", func(t *testing.T) {
		s := startSide(t, nil)
		activeConnect(t, s, srv, portAccept, gidAv4)
		wantEvents(t, s, cmcore.EventREPReceived, cmcore.EventDREPReceived, cmcore.EventTimewaitExit)
		wantCounts(t, s.f, s.f.sent, map[uint16]int{wire.AttrREQ: 1, wire.AttrRTU: 1, wire.AttrDREQ: 1})
		wantCounts(t, s.f, s.f.recv, map[uint16]int{wire.AttrREP: 1, wire.AttrDREP: 1})
	})
	t.Run("LinkLocalGID", func(t *testing.T) {
		s := startSide(t, nil)
		activeConnect(t, s, srv, portAccept, gidAll)
		wantEvents(t, s, cmcore.EventREPReceived, cmcore.EventDREPReceived, cmcore.EventTimewaitExit)
	})
	t.Run("InvalidServiceID", func(t *testing.T) {
		s := startSide(t, nil)
		for _, to := range []hw.GID{gidAv4, gidAll} {
			id := s.cm.CreateID(s.handle)
			p := reqParams(s.path(t, to), tcpSID(portNobody), cmaHdr(ipB, ipA, srcPortActive, "ours-req"))
			if err := id.SendREQ(p); err != nil {
				t.Fatal(err)
			}
			e := s.wait(t, cmcore.EventREJReceived, wait)
			if e.reason != wire.REJInvalidServiceID {
				t.Errorf("to %v: REJ reason %d, want %d (invalid service ID)", to, e.reason, wire.REJInvalidServiceID)
			}
			checkState(t, "after REJ", id, cmcore.StateIdle)
			id.Destroy()
		}
		// a non-rdma_cm service ID: ib_cm itself rejects it
		id := s.cm.CreateID(s.handle)
		defer id.Destroy()
		if err := id.SendREQ(reqParams(s.path(t, gidAv4), 0x1234567890abcdef, nil)); err != nil {
			t.Fatal(err)
		}
		if e := s.wait(t, cmcore.EventREJReceived, wait); e.reason != wire.REJInvalidServiceID {
			t.Errorf("REJ reason %d, want 8", e.reason)
		}
	})
	t.Run("ConsumerReject", func(t *testing.T) {
		rej := runA(t, "server", strconv.Itoa(portReject), "reject", "kernel-rej")
		rej.waitFor(t, wait, "listening")
		s := startSide(t, nil)
		id := s.cm.CreateID(s.handle)
		defer id.Destroy()
		p := reqParams(s.path(t, gidAv4), tcpSID(portReject), cmaHdr(ipB, ipA, srcPortActive, "ours-req"))
		if err := id.SendREQ(p); err != nil {
			t.Fatal(err)
		}
		e := s.wait(t, cmcore.EventREJReceived, wait)
		if e.reason != wire.REJConsumerDefined || !bytes.HasPrefix(e.pd, []byte("kernel-rej")) {
			t.Errorf("REJ reason %d private data %q, want 28 and %q", e.reason, e.pd, "kernel-rej")
		}
		checkState(t, "after REJ", id, cmcore.StateIdle)
		rej.waitFor(t, wait, "rejected")
	})
}

// passiveSide starts our CM with a listener on an rdma_cm TCP service id;
// accept tells whether it answers REQs with REP (else REJ 28 "ours-rej").
// Every connection answers a DREQ with DREP.
func passiveSide(t *testing.T, port uint16, accept bool, drop map[uint16]int) (*side, *cmcore.ID) {
	t.Helper()
	s := startSide(t, drop)
	s.react = func(ev *cmcore.Event) error {
		switch ev.Type {
		case cmcore.EventREQReceived:
			if !accept {
				return ev.ID.SendREJ(wire.REJConsumerDefined, nil, []byte("ours-rej"))
			}
			return ev.ID.SendREP(&cmcore.REPParams{
				QPN: nextQPN(), StartingPSN: 0x13579b, ResponderResources: 1, InitiatorDepth: 1,
				RNRRetryCount: 7, PrivateData: []byte("ours-rep"),
			})
		case cmcore.EventDREQReceived:
			return ev.ID.SendDREP(nil)
		}
		return nil
	}
	l := s.cm.CreateID(s.handle)
	if err := l.Listen(tcpSID(port), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Destroy() })
	return s, l
}

// passiveConnect: rdma_cm's client in A connects to our listener; it
// disconnects after holdMs; checks both sides. Returns the new id.
func passiveConnect(t *testing.T, s *side, port uint16) *cmcore.ID {
	t.Helper()
	cli := runA(t, "client", ipB.String(), strconv.Itoa(int(port)), "kernel-req", "300")
	e := s.wait(t, cmcore.EventREQReceived, wait)
	if e.state != cmcore.StateREPSent {
		t.Errorf("after our REP: %v, want REP_SENT", e.state)
	}
	id := e.id
	// what the kernel's REQ carried
	if e.req.RemoteCAGUID != guidA || e.req.QPType != cmcore.QPTypeRC {
		t.Errorf("REQ event: CA GUID %#x QP type %v, want %#x RC", e.req.RemoteCAGUID, e.req.QPType, guidA)
	}
	if e.req.Primary.DGID != gidAv4 || e.req.Primary.SGID != s.localGID(t, gidAv4).GID {
		t.Errorf("REQ path %v → %v, want A's ::ffff GID → ours", e.req.Primary.DGID, e.req.Primary.SGID)
	}
	ipver, src, dst, sport, ok := parseCMAHdr(e.pd)
	if !ok || ipver != 4 || src != ipA || dst != ipB || sport == 0 {
		t.Errorf("REQ cma header: ok %v ip version %d %v:%d → %v, want 4 %v → %v", ok, ipver, src, sport, dst, ipA, ipB)
	}
	if !bytes.HasPrefix(e.pd[cmaHdrSize:], []byte("kernel-req")) {
		t.Errorf("REQ private data after the header %q, want %q", e.pd[cmaHdrSize:], "kernel-req")
	}
	t.Logf("kernel REQ: path %+v", e.req.Primary)

	s.wait(t, cmcore.EventRTUReceived, wait)
	checkState(t, "after RTU", id, cmcore.StateEstablished)
	est := cli.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
	if got := field(est, "pd"); !strings.HasPrefix(got, hexPD("ours-rep")) {
		t.Errorf("A's ESTABLISHED private data %s, want our REP's %s", got, hexPD("ours-rep"))
	}
	// the kernel disconnects: DREQ, our DREP
	e = s.wait(t, cmcore.EventDREQReceived, wait)
	if e.state != cmcore.StateTimewait {
		t.Errorf("after DREQ and our DREP: %v, want TIMEWAIT", e.state)
	}
	disc := cli.waitFor(t, wait, "disconnected")
	// a DREQ timeout would take seconds; our DREP ends it at once
	if ms, err := strconv.Atoi(field(disc, "after_ms")); err != nil || ms > 2000 {
		t.Errorf("A disconnected after %s ms: want our DREP within 2 s", field(disc, "after_ms"))
	}
	if rc, out := cli.waitExit(t, wait); rc != 0 {
		t.Errorf("A's client exit status %d:\n%s", rc, out)
	}
	s.wait(t, cmcore.EventTimewaitExit, wait)
	checkState(t, "after timewait", id, cmcore.StateIdle)
	return id
}

// TestKernelActiveOursPassive: rdma_cm's client in A connects to our
// listener (REP from us, RTU from the kernel), disconnects (DREP from
// us); our REJ 28 and REJ 8 reach the kernel application with the reason.
func TestKernelActiveOursPassive(t *testing.T) {
	t.Run("Accept", func(t *testing.T) {
		s, _ := passiveSide(t, portOurs, true, nil)
		passiveConnect(t, s, portOurs)
		wantEvents(t, s, cmcore.EventREQReceived, cmcore.EventRTUReceived, cmcore.EventDREQReceived, cmcore.EventTimewaitExit)
		wantCounts(t, s.f, s.f.sent, map[uint16]int{wire.AttrREP: 1, wire.AttrDREP: 1})
		wantCounts(t, s.f, s.f.recv, map[uint16]int{wire.AttrREQ: 1, wire.AttrRTU: 1, wire.AttrDREQ: 1})
	})
	t.Run("ConsumerReject", func(t *testing.T) {
		s, _ := passiveSide(t, portOursREJ, false, nil)
		cli := runA(t, "client", ipB.String(), strconv.Itoa(portOursREJ), "kernel-req")
		s.wait(t, cmcore.EventREQReceived, wait)
		line := cli.waitFor(t, wait, "rejected reason=")
		if field(line, "reason") != "28" || !strings.HasPrefix(field(line, "pd"), hexPD("ours-rej")) {
			t.Errorf("A: %q, want reason 28 and our private data %s", line, hexPD("ours-rej"))
		}
		if rc, out := cli.waitExit(t, wait); rc != 0 {
			t.Errorf("A's client exit status %d:\n%s", rc, out)
		}
	})
	t.Run("InvalidServiceID", func(t *testing.T) {
		s, _ := passiveSide(t, portOurs, true, nil) // listens, but not on portOursNone
		cli := runA(t, "client", ipB.String(), strconv.Itoa(portOursNone), "kernel-req")
		line := cli.waitFor(t, wait, "rejected reason=")
		if field(line, "reason") != "8" {
			t.Errorf("A: %q, want reason 8 (invalid service ID)", line)
		}
		if rc, out := cli.waitExit(t, wait); rc != 0 {
			t.Errorf("A's client exit status %d:\n%s", rc, out)
		}
		wantEvents(t, s)
		wantCounts(t, s.f, s.f.sent, map[uint16]int{wire.AttrREJ: 1})
	})
}

// TestLoss: a lost MAD on our side is repaired by retransmission and
// duplicate handling, ending in one connection on both sides.
func TestLoss(t *testing.T) {
	// Ours active, our first RTU lost: A's ib_cm (REP_SENT) retransmits the
	// REP, we (ESTABLISHED) answer the duplicate with the RTU again.
	t.Run("OursActiveRTULost", func(t *testing.T) {
		srv := runA(t, "server", strconv.Itoa(portLoss), "accept", "kernel-rep")
		srv.waitFor(t, wait, "listening")
		s := startSide(t, map[uint16]int{wire.AttrRTU: 1})
		activeConnect(t, s, srv, portLoss, gidAv4)
		wantEvents(t, s, cmcore.EventREPReceived, cmcore.EventDREPReceived, cmcore.EventTimewaitExit)
		wantCounts(t, s.f, s.f.lost, map[uint16]int{wire.AttrRTU: 1})
		if n := s.f.count(s.f.recv, wire.AttrREP); n < 2 {
			t.Errorf("received %d REPs, want the kernel's retransmission too", n)
		}
		if n := s.f.count(s.f.sent, wire.AttrRTU); n < 1 {
			t.Errorf("sent %d RTUs after the lost one, want the answer to the duplicate REP", n)
		}
		if n := len(lines(srv.output(), "RDMA_CM_EVENT_ESTABLISHED")); n != 1 {
			t.Errorf("A saw %d ESTABLISHED, want 1", n)
		}
	})
	// Kernel active, our first REP lost: our REP retransmission (or the
	// kernel's REQ retransmission, a duplicate we ignore in REP_SENT) ends
	// in one connection.
	t.Run("KernelActiveREPLost", func(t *testing.T) {
		s, _ := passiveSide(t, portOursLoss, true, map[uint16]int{wire.AttrREP: 1})
		passiveConnect(t, s, portOursLoss)
		wantEvents(t, s, cmcore.EventREQReceived, cmcore.EventRTUReceived, cmcore.EventDREQReceived, cmcore.EventTimewaitExit)
		wantCounts(t, s.f, s.f.lost, map[uint16]int{wire.AttrREP: 1})
		if st := s.cm.Stats(); st.Retransmitted < 1 {
			t.Errorf("stats %+v: want our REP retransmitted", st)
		}
		if n := s.f.count(s.f.recv, wire.AttrRTU); n != 1 {
			t.Errorf("received %d RTUs, want 1", n)
		}
	})
}

func wantEvents(t *testing.T, s *side, want ...cmcore.EventType) {
	t.Helper()
	got := s.events()
	if len(got) != len(want) {
		t.Errorf("events %v, want %v", got, want)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("events %v, want %v", got, want)
			return
		}
	}
}

// wantCounts checks the counts of the listed attributes exactly.
func wantCounts(t *testing.T, f *filter, which map[uint16]int, want map[uint16]int) {
	t.Helper()
	f.mu.Lock()
	got := make(map[uint16]int)
	for a, n := range which {
		got[a] = n
	}
	f.mu.Unlock()
	for a, n := range want {
		if got[a] != n {
			t.Errorf("%s: %d, want %d (all: %v)", attrName(a), got[a], n, names(got))
		}
	}
}
