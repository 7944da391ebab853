package cmcore

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Notify reports a QP event (ib_cm_notify). COMM_EST on REP_SENT or
// MRA_REP_RCVD establishes the connection as if the RTU had come and queues
// USER_ESTABLISHED (EISCONN if already ESTABLISHED); PATH_MIG on an
// ESTABLISHED id with no LAP in progress swaps primary and alternate path.
// Anything else is EINVAL.
func (id *ID) Notify(ev NotifyEvent) error {
	cm := id.cm
	var t txn
	cm.mu.Lock()
	var err error
	switch {
	case id.destroyed:
		err = errInval("notify on a destroyed id")
	case ev == NotifyCommEst:
		switch id.state {
		case StateREPSent, StateMRAREPRcvd:
			id.cancelMsg()
			id.state = StateEstablished
			cm.post(Event{Type: EventUserEstablished, ID: id}, id)
		case StateEstablished:
			err = fmt.Errorf("cmcore: COMM_EST: already established: %w", unix.EISCONN)
		default:
			err = errInval("COMM_EST in state %v", id.state)
		}
	case ev == NotifyPathMig:
		if id.state != StateEstablished || (id.lapState != LAPUninit && id.lapState != LAPIdle) {
			err = errInval("PATH_MIG in state %v/%v", id.state, id.lapState)
			break
		}
		// cm_migrate swaps the two addresses (Linux 4.19 to 5.13, the
		// kernels with ib_ucm among them; its first version, and 5.14's,
		// copied): the old primary becomes the alternate, for RTS after
		// a LAP and a later PATH_MIG back.
		alt := id.altAV()
		id.setAltAV(id.av)
		id.av = alt
		id.datapathDLID = 0 // the REQ's LID was the old primary's
		if p := cm.portByNum(id.av.PortNum); p != nil {
			id.port, id.dst = p, id.av.madAddress()
		}
		id.lapState = LAPIdle
	default:
		err = errInval("notify event %d", ev)
	}
	cm.unlock(&t)
	return err
}
