package ucm_test

import (
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/ucm"
	"golang.org/x/sys/unix"
)

// connectAndClose makes one connection from a to b's listener with the
// given packet lifetime, disconnects it (both ends then in TIMEWAIT) and
// destroys both ids.
func (e *env) connectAndClose(t *testing.T, plt uint8, qpn uint32) {
	t.Helper()
	path := e.path
	path.PacketLifeTime = plt
	a, err := e.a.CreateID(1)
	must(t, err)
	must(t, e.a.SendREQ(e.a.REQ(a, e.sid, path, qpn)))
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	must(t, e.b.SendREP(&abi.REP{UID: 2, ID: req.ID, QPN: qpn + 0x10000, PSN: 1}))
	_, err = e.a.Expect(abi.CMREPReceived, wait)
	must(t, err)
	must(t, e.a.SendPrivateData(abi.CmdSendRTU, a, nil))
	_, err = e.b.Expect(abi.CMRTUReceived, wait)
	must(t, err)
	must(t, e.a.SendPrivateData(abi.CmdSendDREQ, a, nil))
	_, err = e.b.Expect(abi.CMDREQReceived, wait)
	must(t, err)
	must(t, e.b.SendPrivateData(abi.CmdSendDREP, req.ID, nil))
	_, err = e.a.Expect(abi.CMDREPReceived, wait)
	must(t, err)
	_, err = e.a.DestroyID(a)
	must(t, err)
	_, err = e.b.DestroyID(req.ID)
	must(t, err)
}

// A connection destroyed in TIMEWAIT keeps its CM state until the
// timewait ends (ms of the path's ACK timeout: over two hours at the
// largest packet lifetime), and until then its ids count against their
// user's --user-ids and the memory budget: a user that connects and
// disconnects in a loop with such paths could otherwise pile up CM state
// past every limit.
func TestTimewaitIDsStayCharged(t *testing.T) {
	e := newEnv(t, &fakedut.Options{Limits: ucm.Limits{UserIDs: 4}})
	budget := e.d.Device.Budget()
	uid := budget.Users()[0].UID
	e.connectAndClose(t, 30, 0x100)
	if n := e.d.IDs.Len(); n != 1 {
		t.Fatalf("%d ucm ids after the destroys, want the listener's 1", n)
	}
	if got := budget.User(uid); got.IDs != 3 || got.Timewait != 2 {
		t.Errorf("uid %d charged %d ids, %d in timewait; want 3 and 2: the listener and the connection's two in timewait", uid, got.IDs, got.Timewait)
	}
	_, err := e.a.CreateID(3)
	must(t, err)
	_, err = e.a.CreateID(4)
	wantErrno(t, "CREATE_ID past --user-ids with two ids in timewait", err, unix.ENOMEM)

	// The CM's close lets go of them: the charge comes back.
	before := budget.Usage().Bytes
	e.d.CM.Close()
	if got := budget.User(uid); got.IDs != 2 || got.Timewait != 0 {
		t.Errorf("after the CM's close: %d ids charged, %d in timewait; want 2 (the listener and the new id) and 0", got.IDs, got.Timewait)
	}
	if after := budget.Usage().Bytes; after >= before {
		t.Errorf("memory charged %d after the CM's close, %d before: the timewait ids' bytes were not refunded", after, before)
	}
}

// With a short timewait the charge comes back when it ends.
func TestTimewaitIDsRefundedAtItsEnd(t *testing.T) {
	e := newEnv(t, &fakedut.Options{Limits: ucm.Limits{UserIDs: 3}})
	budget := e.d.Device.Budget()
	uid := budget.Users()[0].UID
	for i := range 3 { // each: 2^15 x 4.096 µs, about 134 ms of timewait
		e.connectAndClose(t, 14, 0x100+uint32(i))
		deadline := time.Now().Add(10 * time.Second)
		for budget.User(uid).IDs != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("connection %d: %d ids charged 10 s after its destroy, want the listener's 1", i, budget.User(uid).IDs)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
