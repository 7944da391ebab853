package cmcore

import (
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
)

// outMsg is a request-like message (REQ, REP, DREQ, LAP, SIDR_REQ) that the
// CM retransmits itself: umad cannot cancel a send, so every MAD goes out
// with no MAD-layer timeout and this timer plays the kernel MAD layer's
// part (at most 1 + retries transmissions, each followed by a wait).
type outMsg struct {
	id      *ID
	p       *port
	dst     hw.Address
	mad     *hw.MAD
	timeout time.Duration
	retries int         // transmissions left after the current one
	state   State       // id state the message belongs to (updated by MRA)
	timer   clock.Timer // nil while a transmission has not returned (sendReturned arms it)
	armed   uint32      // timers armed: a callback of an earlier one, fired as an MRA re-armed, does nothing
}

// startMsg sends mad now and keeps retransmitting it until cancelled or
// out of retries. Called with cm.mu held.
//
// Each wait starts when the transmission's send returns, not when it is
// queued: the MAD layer starts a send's timeout at its completion
// (ib_mad's wait_for_response), and a umad write can block while the
// kernel resolves the peer's MAC (about a second on rxe for a peer not
// yet resolved), which must not count against the peer's response time.
func (cm *CM) startMsg(t *txn, id *ID, mad *hw.MAD, timeout time.Duration, retries uint8) {
	id.cancelMsg()
	if mad == nil {
		return
	}
	m := &outMsg{id: id, p: id.port, dst: id.dst, mad: mad, timeout: timeout, retries: int(retries), state: id.state}
	id.msg = m
	t.send(outMAD{p: m.p, dst: m.dst, mad: m.mad, msg: m})
}

// sendReturned starts m's wait once a transmission of it has left (or
// failed, which counts as a loss): unless m was answered or cancelled
// meanwhile, or an MRA has already set its wait. Called without cm.mu.
func (cm *CM) sendReturned(m *outMsg) {
	cm.mu.Lock()
	if m.id.msg == m && m.timer == nil {
		cm.armMsg(m)
	}
	cm.mu.Unlock()
}

func (cm *CM) armMsg(m *outMsg) {
	if cm.closed {
		return
	}
	m.armed++
	gen := m.armed
	m.timer = cm.clk.AfterFunc(m.timeout, func() { cm.msgTimeout(m, gen) })
}

// cancelMsg stops the outstanding message (ib_cancel_mad).
func (id *ID) cancelMsg() {
	if id.msg != nil {
		if id.msg.timer != nil {
			id.msg.timer.Stop()
		}
		id.msg = nil
	}
}

// extendMsg applies an MRA: the current wait and every later one become
// timeout (v5.x ib_modify_mad); the retry count is not reset.
func (cm *CM) extendMsg(m *outMsg, timeout time.Duration, state State) {
	m.timeout = timeout
	m.state = state
	if m.timer != nil {
		m.timer.Stop()
	}
	cm.armMsg(m)
}

func (cm *CM) msgTimeout(m *outMsg, gen uint32) {
	cm.mu.Lock()
	var t txn
	id := m.id
	if id.msg != m || m.armed != gen || cm.closed {
		cm.mu.Unlock()
		return
	}
	if m.retries > 0 {
		m.retries--
		cm.stats.retransmitted.Add(1)
		m.timer = nil
		t.send(outMAD{p: m.p, dst: m.dst, mad: m.mad, retx: true, msg: m})
		cm.unlock(&t)
		return
	}
	id.msg = nil
	cm.stats.timedOut.Add(1)
	cm.sendFailed(id, m.state, WCRespTimeout)
	cm.unlock(&t)
	if cm.obs != nil {
		// m.mad is the message's own (never pooled) and m is no longer
		// the id's: both stay valid after the unlock.
		cm.observe(cm.obsNow(), m.p, MADTimedOut, m.mad, m.dst, false, "")
	}
}

// sendFailed is cm_process_send_error for a final timeout: only if the id
// is still in the state the message was sent in.
func (cm *CM) sendFailed(id *ID, sentState State, status WCStatus) {
	if id.destroyed || id.state != sentState {
		return
	}
	var ev EventType
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
		cm.resetToIdle(id)
		ev = EventREQError
	case StateREPSent, StateMRAREPRcvd:
		cm.resetToIdle(id)
		ev = EventREPError
	case StateDREQSent:
		cm.enterTimewait(id)
		ev = EventDREQError
	case StateSIDRREQSent:
		id.state = StateIdle
		ev = EventSIDRREQError
	case StateEstablished:
		// A LAP that was never answered. Linux discards this (LAP_ERROR is
		// never generated); we also reopen the LAP sub-state so a new LAP
		// can be sent.
		if id.lapState == LAPSent || id.lapState == LAPMRALAPRcvd {
			id.lapState = LAPIdle
		}
		return
	default:
		return
	}
	cm.post(Event{Type: ev, ID: id, SendStatus: status}, id)
}
