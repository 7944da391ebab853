package conformance

import (
	"fmt"

	"github.com/ucmd/ucmd/abi"
)

// pair is a listener on one file and an active id on another, both on
// the DUT's loopback path.
type pair struct {
	Passive, Active *Client
	Listener, ID    uint32 // the listening id (passive file), the active id
	SID             uint64
	Path            abi.PathRec
}

// Request values of the connections the cases make.
const (
	activeQPN  = 0x100
	activePSN  = activeQPN + 1 // Client.REQ's PSN
	passiveQPN = 0x200
	passivePSN = 0x201
	listenUID  = 0xB0
	activeUID  = 0xA0
	childUID   = 0xC0
)

// newPair creates the listener and the active id; nothing is sent yet.
func newPair(e *env) (*pair, error) {
	path, err := e.Path()
	if err != nil {
		return nil, err
	}
	p := &pair{SID: SID(), Path: path}
	if p.Passive, err = e.Client(); err != nil {
		return nil, err
	}
	if p.Active, err = e.Client(); err != nil {
		return nil, err
	}
	if p.Listener, err = p.Passive.CreateID(listenUID); err != nil {
		return nil, check("create listener", err)
	}
	if err := p.Passive.Listen(p.Listener, p.SID, 0); err != nil {
		return nil, check("listen", err)
	}
	if p.ID, err = p.Active.CreateID(activeUID); err != nil {
		return nil, check("create active id", err)
	}
	return p, nil
}

// SendREQ sends the active side's REQ with private data pd.
func (p *pair) SendREQ(pd []byte) error {
	r := p.Active.REQ(p.ID, p.SID, p.Path, activeQPN)
	r.Data, r.Len = p.Active.Data(pd)
	return check("SEND_REQ", p.Active.SendREQ(r))
}

// pairWithREQ sends the REQ and waits until the passive file is readable.
func pairWithREQ(e *env) (*pair, error) {
	p, err := newPair(e)
	if err != nil {
		return nil, err
	}
	if err := p.SendREQ([]byte("hello")); err != nil {
		return nil, err
	}
	ok, err := p.Passive.F.WaitReadable(Wait)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("no REQ within %v", Wait)
	}
	return p, nil
}

// Accept takes the REQ event and answers it with a REP; it returns the
// new connection's id.
func (p *pair) Accept() (uint32, error) {
	ev, err := p.Passive.Expect(abi.CMREQReceived, Wait)
	if err != nil {
		return 0, err
	}
	return ev.ID, check("SEND_REP", p.Passive.SendREP(rep(ev.ID)))
}

func rep(id uint32) *abi.REP {
	return &abi.REP{
		UID: childUID, ID: id, QPN: passiveQPN, PSN: passivePSN,
		ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 6, TargetAckDelay: 20,
	}
}

// Establish runs REQ, REP, RTU; it returns the passive connection id
// after its RTU event.
func (p *pair) Establish() (uint32, error) {
	if err := p.SendREQ(nil); err != nil {
		return 0, err
	}
	child, err := p.Accept()
	if err != nil {
		return 0, err
	}
	if _, err := p.Active.Expect(abi.CMREPReceived, Wait); err != nil {
		return 0, err
	}
	if err := p.Active.SendPrivateData(abi.CmdSendRTU, p.ID, nil); err != nil {
		return 0, check("SEND_RTU", err)
	}
	if _, err := p.Passive.Expect(abi.CMRTUReceived, Wait); err != nil {
		return 0, err
	}
	return child, nil
}
