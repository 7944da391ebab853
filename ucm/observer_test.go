package ucm_test

import (
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
)

// recorder is a ucm.Observer that keeps what it is told.
type recorder struct {
	mu     sync.Mutex
	cmds   []observedCmd
	setups []observedSetup
}

type observedCmd struct {
	cmd  abi.Cmd
	took time.Duration
	err  error
}

type observedSetup struct {
	active bool
	took   time.Duration
}

func (r *recorder) ObserveCommand(cmd abi.Cmd, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds = append(r.cmds, observedCmd{cmd, took, err})
}

func (r *recorder) ObserveSetup(active bool, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setups = append(r.setups, observedSetup{active, took})
}

// take returns what was recorded since the last take and forgets it.
func (r *recorder) take() ([]observedCmd, []observedSetup) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, s := r.cmds, r.setups
	r.cmds, r.setups = nil, nil
	return c, s
}

// Every write() is observed with its command and error, a write that
// names no known command as abi.NumCmds.
func TestObserverCommands(t *testing.T) {
	rec := &recorder{}
	d := fakedut.New(t, &fakedut.Options{Observer: rec})
	c, err := conformance.NewClient(d, false)
	must(t, err)
	defer c.Close()
	id, err := c.CreateID(1)
	must(t, err)
	must(t, c.Listen(id, 0x77, 0))
	wantErrno(t, "second LISTEN", c.Listen(id, 0x77, 0), unix.EINVAL)
	_, err = c.Raw([]byte{1, 2, 3}) // shorter than a header
	wantErrno(t, "short write", err, unix.EINVAL)
	_, err = c.Raw(conformance.Encode(abi.Cmd(99), 0, &abi.DestroyID{}))
	wantErrno(t, "command 99", err, unix.EINVAL)

	cmds, setups := rec.take()
	want := []struct {
		cmd    abi.Cmd
		failed bool
	}{
		{abi.CmdCreateID, false}, {abi.CmdListen, false}, {abi.CmdListen, true},
		{abi.NumCmds, true}, {abi.NumCmds, true},
	}
	if len(cmds) != len(want) {
		t.Fatalf("observed %d commands, want %d: %+v", len(cmds), len(want), cmds)
	}
	for i, w := range want {
		if g := cmds[i]; g.cmd != w.cmd || (g.err != nil) != w.failed || g.took <= 0 {
			t.Errorf("command %d: %v after %v, err %v; want %v, failed %v, a positive duration", i, g.cmd, g.took, g.err, w.cmd, w.failed)
		}
	}
	if len(setups) != 0 {
		t.Errorf("setups without a connection: %+v", setups)
	}
}

// A connection's setup is observed once per side when it reaches
// ESTABLISHED: the active side at its SEND_RTU, the passive side at the
// RTU, or at COMM_EST if that came first (then not again at the RTU).
func TestObserverSetup(t *testing.T) {
	rec := &recorder{}
	e := newEnv(t, &fakedut.Options{Observer: rec})

	// REQ, REP, RTU.
	a := e.req(t, 0xa0)
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	must(t, e.b.SendREP(&abi.REP{UID: 0xb1, ID: req.ID, QPN: 0x200, PSN: 1}))
	_, err = e.a.Expect(abi.CMREPReceived, wait)
	must(t, err)
	if _, s := rec.take(); len(s) != 0 {
		t.Fatalf("setup observed before ESTABLISHED: %+v", s)
	}
	// The active side's setup is observed before SEND_RTU returns, the
	// passive side's before RTU_RECEIVED is delivered, in either order:
	// the RTU may arrive before SEND_RTU has returned.
	must(t, e.a.SendPrivateData(abi.CmdSendRTU, a, nil))
	_, err = e.b.Expect(abi.CMRTUReceived, wait)
	must(t, err)
	_, s := rec.take()
	if len(s) != 2 || s[0].active == s[1].active || s[0].took <= 0 || s[1].took <= 0 {
		t.Fatalf("after SEND_RTU and the RTU's arrival: setups %+v, want one active and one passive", s)
	}
	// DREQ and DREP are no setup.
	must(t, e.a.SendPrivateData(abi.CmdSendDREQ, a, nil))
	_, err = e.b.Expect(abi.CMDREQReceived, wait)
	must(t, err)
	must(t, e.b.SendPrivateData(abi.CmdSendDREP, req.ID, nil))
	_, err = e.a.Expect(abi.CMDREPReceived, wait)
	must(t, err)
	if _, s := rec.take(); len(s) != 0 {
		t.Fatalf("setups observed at the disconnect: %+v", s)
	}

	// The passive side establishes by COMM_EST before the RTU comes.
	a2 := e.req(t, 0xa2)
	req, err = e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	must(t, e.b.SendREP(&abi.REP{UID: 0xb2, ID: req.ID, QPN: 0x201, PSN: 1}))
	_, err = e.a.Expect(abi.CMREPReceived, wait)
	must(t, err)
	must(t, e.b.Notify(req.ID, abi.IBEventCommEst))
	_, err = e.b.Expect(abi.CMUserEstablished, wait)
	must(t, err)
	if _, s := rec.take(); len(s) != 1 || s[0].active {
		t.Fatalf("after COMM_EST: setups %+v, want one passive", s)
	}
	must(t, e.a.SendPrivateData(abi.CmdSendRTU, a2, nil))
	if _, s := rec.take(); len(s) != 1 || !s[0].active {
		t.Fatalf("after the second SEND_RTU: setups %+v, want one active", s)
	}
	// The RTU reaches an ESTABLISHED id: no event, no second passive
	// setup. A command on b after it has been received orders the check:
	// a DREQ from a follows the RTU on the same path.
	must(t, e.a.SendPrivateData(abi.CmdSendDREQ, a2, nil))
	_, err = e.b.Expect(abi.CMDREQReceived, wait)
	must(t, err)
	if _, s := rec.take(); len(s) != 0 {
		t.Fatalf("the RTU after COMM_EST was observed again: %+v", s)
	}
}
