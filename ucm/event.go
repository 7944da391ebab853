package ucm

import (
	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
)

// event is one queued event (struct ib_ucm_event): the whole response,
// built when the CM reported it, and copies of its private data and info.
type event struct {
	ctx   *ucmCtx // the id it is queued on and counted for (the listener for REQ)
	child *ucmCtx // REQ/SIDR_REQ: the new connection, hidden until delivered
	resp  abi.EventResp
	data  []byte
	info  []byte
}

// makeEvent is ib_ucm_event_process: the response union, the present bits,
// and the private data at the full size of the message's area.
func makeEvent(ev *cmcore.Event) *event {
	t := abi.CMEvent(ev.Type)
	e := &event{resp: abi.EventResp{Event: t}}
	r := &e.resp
	switch ev.Type {
	case cmcore.EventREQReceived:
		p := &ev.REQ
		m := abi.REQEventResp{
			PrimaryPath:             pathToABI(&p.Primary),
			RemoteCAGUID:            p.RemoteCAGUID,
			RemoteQKey:              p.RemoteQKey,
			RemoteQPN:               p.RemoteQPN,
			QPType:                  abi.QPType(p.QPType),
			StartingPSN:             p.StartingPSN,
			ResponderResources:      p.ResponderResources,
			InitiatorDepth:          p.InitiatorDepth,
			LocalCMResponseTimeout:  p.LocalCMResponseTimeout,
			FlowControl:             b2u(p.FlowControl),
			RemoteCMResponseTimeout: p.RemoteCMResponseTimeout,
			RetryCount:              p.RetryCount,
			RNRRetryCount:           p.RNRRetryCount,
			SRQ:                     b2u(p.SRQ),
			Port:                    p.Port,
		}
		r.Present = abi.PresPrimary
		if p.Alternate != nil {
			m.AlternatePath = pathToABI(p.Alternate)
			r.Present |= abi.PresAlternate
		}
		r.U.SetREQ(m)
	case cmcore.EventREPReceived:
		p := &ev.REP
		r.U.SetREP(abi.REPEventResp{
			RemoteCAGUID:       p.RemoteCAGUID,
			RemoteQKey:         p.RemoteQKey,
			RemoteQPN:          p.RemoteQPN,
			StartingPSN:        p.StartingPSN,
			ResponderResources: p.ResponderResources,
			InitiatorDepth:     p.InitiatorDepth,
			TargetAckDelay:     p.TargetACKDelay,
			FailoverAccepted:   p.FailoverAccepted,
			FlowControl:        b2u(p.FlowControl),
			RNRRetryCount:      p.RNRRetryCount,
			SRQ:                b2u(p.SRQ),
		})
	case cmcore.EventREJReceived:
		r.U.SetREJ(abi.REJEventResp{Reason: uint32(ev.REJ.Reason)})
		e.info = clip(ev.Info, abi.MaxREJARI)
	case cmcore.EventMRAReceived:
		r.U.SetMRA(abi.MRAEventResp{Timeout: ev.MRA.ServiceTimeout})
	case cmcore.EventLAPReceived:
		r.U.SetLAP(abi.LAPEventResp{Path: pathToABI(&ev.LAP.Alternate)})
		r.Present = abi.PresAlternate
	case cmcore.EventAPRReceived:
		r.U.SetAPR(abi.APREventResp{Status: uint32(ev.APR.Status)})
		e.info = clip(ev.Info, abi.MaxAPRInfo)
	case cmcore.EventSIDRREQReceived:
		r.U.SetSIDRREQ(abi.SIDRREQEventResp{PKey: ev.SIDRREQ.PKey, Port: ev.SIDRREQ.Port})
	case cmcore.EventSIDRREPReceived:
		p := &ev.SIDRREP
		r.U.SetSIDRREP(abi.SIDRREPEventResp{Status: uint32(p.Status), QKey: p.QKey, QPN: p.QPN})
		e.info = clip(ev.Info, abi.MaxSIDRREPInfo)
	default:
		r.U.SetSendStatus(uint32(ev.SendStatus))
	}
	if n := t.PrivateDataLen(); n > 0 {
		e.data = make([]byte, n) // the whole area, zero-padded
		copy(e.data, ev.PrivateData)
		r.Present |= abi.PresData
	}
	if len(e.info) > 0 {
		r.Present |= abi.PresInfo
	}
	return e
}

// clip copies b (which cmcore owns only during the handler), at most n bytes.
func clip(b []byte, n int) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b[:min(len(b), n)]...)
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
