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
		case cmcore.EventReqReceived:
			id := ev.ID
			if err := id.SendMRA(23, nil); err != nil { // ms(23) ≈ 33 s
				return err
			}
			time.AfterFunc(delay, func() {
				if err := id.SendREP(&cmcore.RepParams{
					QPN: nextQPN(), StartingPSN: 0x2468, ResponderResources: 1, InitiatorDepth: 1,
					RNRRetryCount: 7, PrivateData: []byte("ours-rep"),
				}); err != nil {
					t.Errorf("late REP: %v", err)
				}
			})
		case cmcore.EventDReqReceived:
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
	e := s.wait(t, cmcore.EventReqReceived, wait)
	if e.state != cmcore.StateMRAReqSent {
		t.Errorf("after our MRA: %v, want MRA_REQ_SENT", e.state)
	}
	t0 := time.Now()
	s.wait(t, cmcore.EventRTUReceived, wait)
	if d := time.Since(t0); d < delay-time.Second {
		t.Errorf("RTU %v after the REQ, before our late REP", d)
	}
	cli.waitFor(t, wait, "RDMA_CM_EVENT_ESTABLISHED")
	s.wait(t, cmcore.EventDReqReceived, wait)
	cli.waitFor(t, wait, "disconnected")
	if rc, out := cli.waitExit(t, wait); rc != 0 {
		t.Errorf("A's client exit status %d:\n%s", rc, out)
	}
	s.wait(t, cmcore.EventTimewaitExit, wait)
	wantCounts(t, s.f, s.f.sent, map[uint16]int{wire.AttrMRA: 1, wire.AttrREP: 1, wire.AttrDREP: 1})
	// without the MRA the kernel would have sent its REQ again after ~6.1 s
	wantCounts(t, s.f, s.f.recv, map[uint16]int{wire.AttrREQ: 1, wire.AttrRTU: 1, wire.AttrDREQ: 1})
}
