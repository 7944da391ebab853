//go:build interop

package interop

import (
	"strconv"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
)

const portOursSlow = 7485

// TestKernelActiveOursMRA: a slow accept. We answer the kernel's REQ with
// an MRA at once and the REP only after longer than the kernel's REQ
// timeout (rdma_cm: 2·ms(18) + ms(20) ≈ 6.1 s). The kernel honours the
// MRA (no REQ retransmission, no timeout) and takes the late REP.
func TestKernelActiveOursMRA(t *testing.T) {
	const delay = 7 * time.Second
	s := startSide(t, nil)
	s.react = func(ev *cmcore.Event) error {
		switch ev.Type {
		case cmcore.EventREQReceived:
			id := ev.ID
			if err := id.SendMRA(23, nil); err != nil { // ms(23) ≈ 33 s
				return err
			}
			time.AfterFunc(delay, func() {
				if err := id.SendREP(&cmcore.REPParams{
					QPN: nextQPN(), StartingPSN: 0x2468, ResponderResources: 1, InitiatorDepth: 1,
					RNRRetryCount: 7, PrivateData: []byte("ours-rep"),
				}); err != nil {
					t.Errorf("late REP: %v", err)
				}
			})
		case cmcore.EventDREQReceived:
			return ev.ID.SendDREP(nil)
		}
		return nil
	}
	l := s.cm.CreateID(s.handle)
	if err := l.Listen(tcpSID(portOursSlow), 0); err != nil {
		t.Fatal(err)
	}
	defer l.Destroy()
	cli := runA(t, "client", ipB.String(), strconv.Itoa(portOursSlow), "kernel-req", "300")
	e := s.wait(t, cmcore.EventREQReceived, wait)
	if e.state != cmcore.StateMRAREQSent {
		t.Errorf("after our MRA: %v, want MRA_REQ_SENT", e.state)
	}
	t0 := time.Now()
	s.wait(t, cmcore.EventRTUReceived, wait)
	if d := time.Since(t0); d < delay-time.Second {
		t.Errorf("RTU %v after the REQ, before our late REP", d)
	}
	cli.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
	s.wait(t, cmcore.EventDREQReceived, wait)
	cli.waitFor(t, wait, "disconnected")
	if rc, out := cli.waitExit(t, wait); rc != 0 {
		t.Errorf("A's client exit status %d:\n%s", rc, out)
	}
	s.wait(t, cmcore.EventTimewaitExit, wait)
	wantCounts(t, s.f, s.f.sent, map[uint16]int{wire.AttrMRA: 1, wire.AttrREP: 1, wire.AttrDREP: 1})
	// without the MRA the kernel would have sent its REQ again after ~6.1 s
	wantCounts(t, s.f, s.f.recv, map[uint16]int{wire.AttrREQ: 1, wire.AttrRTU: 1, wire.AttrDREQ: 1})
}

const portSlow = 7475

// TestOursActiveKernelMRA: the kernel's MRA. rdma_cm answers every REQ with
// a lazy MRA (IB_CM_MRA_FLAG_DELAY | 24): ib_cm sends it only when a
// duplicate REQ arrives while the application has not accepted yet. Our
// REQ retransmits quickly (384 ms: packet life 14, response timeout 16),
// the server accepts after 3 s: the MRA must stretch our wait (ms(24) +
// ms(av.timeout)) so that the late REP still finds us in MRA_REQ_RCVD.
func TestOursActiveKernelMRA(t *testing.T) {
	srv := runA(t, "server", strconv.Itoa(portSlow), "accept", "kernel-rep", "3000")
	srv.waitFor(t, wait, "listening")
	s := startSide(t, nil)
	var mraTimeout uint8
	s.react = func(ev *cmcore.Event) error {
		switch ev.Type {
		case cmcore.EventMRAReceived:
			mraTimeout = ev.MRA.ServiceTimeout
		case cmcore.EventREPReceived:
			return ev.ID.SendRTU(nil)
		}
		return nil
	}
	id := s.cm.CreateID(s.handle)
	defer id.Destroy()
	path := s.path(t, gidAv4)
	path.PacketLifeTime = 14
	p := reqParams(path, tcpSID(portSlow), cmaHdr(ipB, ipA, srcPortActive, "ours-req"))
	p.RemoteCMResponseTimeout = 16
	t0 := time.Now()
	if err := id.SendREQ(p); err != nil {
		t.Fatal(err)
	}
	e := s.wait(t, cmcore.EventMRAReceived, wait)
	t.Logf("MRA after %v, service timeout %d", time.Since(t0), mraTimeout)
	if e.state != cmcore.StateMRAREQRcvd || mraTimeout != 24 {
		t.Errorf("after the MRA: %v, service timeout %d; want MRA_REQ_RCVD, 24", e.state, mraTimeout)
	}
	e = s.wait(t, cmcore.EventREPReceived, wait)
	if d := time.Since(t0); d < 2*time.Second || e.state != cmcore.StateEstablished {
		t.Errorf("REP after %v, state %v: want the late REP (3 s) and ESTABLISHED", d, e.state)
	}
	srv.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
	if err := id.SendDREQ(nil); err != nil {
		t.Fatal(err)
	}
	s.wait(t, cmcore.EventDREPReceived, wait)
	srv.waitFor(t, wait, "RDMA_CM_EVENT_DISCONNECTED")
	s.wait(t, cmcore.EventTimewaitExit, wait)
	if st := s.cm.Stats(); st.Retransmitted < 1 || st.TimedOut != 0 {
		t.Errorf("stats %+v: want our REQ retransmitted (which draws the MRA), no timeout", st)
	}
	if n := s.f.count(s.f.recv, wire.AttrMRA); n < 1 {
		t.Errorf("received %d MRAs", n)
	}
	if n := len(lines(srv.output(), "RDMA_CM_EVENT_CONNECT_REQUEST")); n != 1 {
		t.Errorf("A saw %d connect requests, want 1 (the retransmissions are duplicates)", n)
	}
}
