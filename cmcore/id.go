package cmcore

import (
	"context"
	"fmt"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/clock"
	"golang.org/x/sys/unix"
)

var bgctx = context.Background()

// ID is one CM id (the kernel's cm_id): a listener, a connection end or a
// SIDR exchange. All its methods are safe for concurrent use.
//
// Its fields are ordered to leave no padding, and what few ids use lives
// behind pointers (the alternate path, saved private data), so that an id
// stays in the 256-byte size class: one per idle id and two per
// connection (BenchmarkLiveHeapPerID, BenchmarkLiveHeapPerConnection).
type ID struct {
	cm      *CM
	handler Handler

	// Everything below is guarded by cm.mu.
	context     any
	serviceID   uint64
	serviceMask uint64
	tid         uint64

	// Connection parameters (cm_id_priv fields). localID, and remoteID,
	// remoteQPN and remoteCAGUID while inRemote, are the keys of the CM's
	// indexes: they must not change while the id is in them.
	remoteCAGUID uint64
	timeout      time.Duration
	port         *port
	msg          *outMsg        // the outstanding retransmitted message
	sidrEntry    *sidrKey       // in the SIDR dedupe table
	alt          *AddressVector // the alternate path; nil: none (all zero)
	saved        *savedPD       // nil: no private data saved
	twTimer      clock.Timer    // pending timewait expiry
	dst          hw.Address     // where this id's MADs go
	av           AddressVector
	localID      uint32 // wire value
	remoteID     uint32
	localQPN     uint32
	remoteQPN    uint32
	twGen        uint32 // which timewait timer is the current one (enterTimewait)
	remoteQKey   uint32
	rqPSN, sqPSN uint32
	pkey         uint16
	datapathDLID uint16 // passive IB: the REQ's LID for the QP's RTR address; 0: av's
	qpType       QPType
	state        State
	lapState     LAPState
	destroyed    bool
	inRemote     bool // in remoteIDs/remoteQPNs
	lingers      bool // Destroy said it lingers: the released hook is owed a call

	initiatorDepth     uint8
	responderResources uint8
	pathMTU            uint8
	retryCount         uint8
	rnrRetryCount      uint8
	targetAckDelay     uint8
	maxRetries         uint8
	mraTimeout         uint8 // saved for answering duplicates (§4.6)
}

// savedPD is the private data an id keeps for answering duplicates
// (§4.6): what it sent with its MRA, RTU and DREP.
type savedPD struct{ mra, rtu, drep []byte }

// savePD keeps a copy of pd in the field pick selects and returns it;
// an empty pd allocates nothing.
func (id *ID) savePD(pick func(*savedPD) *[]byte, pd []byte) []byte {
	if len(pd) == 0 && id.saved == nil {
		return nil
	}
	if id.saved == nil {
		id.saved = new(savedPD)
	}
	*pick(id.saved) = clone(pd)
	return *pick(id.saved)
}

// savedMRA, savedRTU and savedDREP are what savePD kept (nil if nothing).
func (id *ID) savedMRA() []byte {
	if id.saved == nil {
		return nil
	}
	return id.saved.mra
}

func (id *ID) savedRTU() []byte {
	if id.saved == nil {
		return nil
	}
	return id.saved.rtu
}

func (id *ID) savedDREP() []byte {
	if id.saved == nil {
		return nil
	}
	return id.saved.drep
}

func pickMRA(s *savedPD) *[]byte  { return &s.mra }
func pickRTU(s *savedPD) *[]byte  { return &s.rtu }
func pickDREP(s *savedPD) *[]byte { return &s.drep }

// altAV is the alternate path's address vector, zero when there is none.
func (id *ID) altAV() AddressVector {
	if id.alt == nil {
		return AddressVector{}
	}
	return *id.alt
}

// setAltAV sets the alternate path; the zero value removes it.
func (id *ID) setAltAV(av AddressVector) {
	if av == (AddressVector{}) {
		id.alt = nil
		return
	}
	if id.alt == nil {
		id.alt = new(AddressVector)
	}
	*id.alt = av
}

// CreateID creates an id in state IDLE with a fresh local comm ID. The
// handler receives its events (and, for a listener, the new connections'
// first events).
func (cm *CM) CreateID(h Handler) *ID {
	id := &ID{cm: cm, handler: h}
	cm.mu.Lock()
	cm.ids.alloc(id)
	cm.mu.Unlock()
	return id
}

// SetContext attaches a caller value to the id (ucm: its context).
func (id *ID) SetContext(v any) {
	id.cm.mu.Lock()
	id.context = v
	id.cm.mu.Unlock()
}

// Context returns the value set by SetContext; a new connection's id
// starts with its listener's.
func (id *ID) Context() any {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.context
}

// Attr is what ATTR_ID reports.
type Attr struct {
	ServiceID    uint64
	ServiceMask  uint64
	LocalCommID  uint32 // wire value
	RemoteCommID uint32
	// Port is the port the id's connection uses (0: none yet); LocalQPN
	// and RemoteQPN the connection's QPs, RemoteGID the peer's GID (zero
	// without a GRH): what `ucmd status` shows.
	Port      int
	LocalQPN  uint32
	RemoteQPN uint32
	RemoteGID hw.GID
}

// Attr returns the id's service ID, mask, comm IDs, port, QPs and peer.
func (id *ID) Attr() Attr {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	a := Attr{
		ServiceID: id.serviceID, ServiceMask: id.serviceMask,
		LocalCommID: id.localID, RemoteCommID: id.remoteID,
		LocalQPN: id.localQPN, RemoteQPN: id.remoteQPN,
	}
	if id.port != nil {
		a.Port = id.port.num
	}
	if id.dst.GRH != nil {
		a.RemoteGID = id.dst.GRH.GID
	}
	return a
}

// State returns the connection state and LAP sub-state.
func (id *ID) State() (State, LAPState) {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.state, id.lapState
}

// Listen makes an IDLE id listen for REQs and SIDR_REQs whose service ID
// matches sid under mask (mask 0: exact). sid AssignServiceID makes the CM
// pick a fresh service ID (see Attr). EINVAL: not IDLE, or a sid in the
// CM-assigned range; EBUSY: overlaps another listener on this device.
func (id *ID) Listen(sid, mask uint64) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if id.destroyed || id.state != StateIdle {
		return fmt.Errorf("cmcore: listen in state %v: %w", id.state, unix.EINVAL)
	}
	if err := cm.listen.add(id, sid, mask); err != nil {
		return err
	}
	id.state = StateListen
	return nil
}

// Destroy tears the id down as ib_destroy_cm_id did (per-state REJ, DREQ,
// DREP or SIDR_REP; see doc.go) and releases its comm ID once its timewait
// is over. Destroying twice is harmless.
//
// Destroy never waits for a handler, so it may be called from anywhere: a
// handler on its own id, on another id, on an id of another CM. When it
// returns, no event of the id will be delivered; only a handler call for
// the id that had already begun may still be running (the caller's own
// when a handler destroys its id). Where the kernel blocked until no
// callback ran, a consumer whose handler touches what Destroy's caller
// then frees keeps its handler off it itself, as ucm does (the file's
// mutex and the id's dead mark).
//
// It reports whether the CM keeps the id past the call, for its timewait
// (a connection destroyed in or after ESTABLISHED, but an XRC target's;
// §5.1): the hook set by OnReleased is then called with its context once
// the CM lets go of it.
func (id *ID) Destroy() (lingers bool) {
	cm := id.cm
	var t txn
	cm.mu.Lock()
	if !id.destroyed {
		cm.destroyLocked(&t, id, false)
		id.lingers = id.twTimer != nil
		lingers = id.lingers
	}
	cm.unlock(&t)
	return lingers
}

// OnReleased sets fn to be called with the context of each id whose
// Destroy reported that it lingers, once the CM lets go of it: when its
// timewait ends, or at Close. fn runs with no CM lock held, on a timer's
// goroutine or Close's, and must not block. Set it before creating ids.
func (cm *CM) OnReleased(fn func(ctx any)) {
	cm.mu.Lock()
	cm.released = fn
	cm.mu.Unlock()
}

// destroyLocked implements the destroy table of ib-cm.md §3.2. silent
// skips the REJ of a REQ_RCVD id (handler failed with ENOMEM).
func (cm *CM) destroyLocked(t *txn, id *ID, silent bool) {
	id.destroyed = true
	switch id.state {
	case StateListen:
		cm.listen.remove(id)
	case StateSIDRREQSent:
		id.cancelMsg()
	case StateSIDRREQRcvd:
		cm.sendSIDRREPLocked(t, id, &SIDRREPParams{Status: sidrReject})
	case StateREQSent, StateMRAREQRcvd:
		id.cancelMsg()
		var ari [8]byte
		putBE64(ari[:], cm.nodeGUID)
		cm.sendREJLocked(t, id, rejTimeout, ari[:], nil)
	case StateREQRcvd:
		if silent {
			cm.resetToIdle(id)
		} else {
			cm.sendREJLocked(t, id, rejConsumerDefined, nil, nil)
		}
	case StateREPSent, StateMRAREPRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent:
		id.cancelMsg()
		cm.sendREJLocked(t, id, rejConsumerDefined, nil, nil)
	case StateEstablished:
		if id.qpType == QPTypeXRCTgt {
			// No DREQ and no timewait: an XRC target's QP disconnects
			// nothing (cm_destroy_id goes straight to IDLE).
			cm.resetToIdle(id)
			break
		}
		// The DREQ goes out exactly once: it is not retransmitted.
		cm.sendDREQLocked(t, id, nil)
		id.cancelMsg()
		cm.enterTimewait(id)
	case StateDREQSent:
		id.cancelMsg()
		cm.enterTimewait(id)
	case StateDREQRcvd:
		cm.sendDREPLocked(t, id, nil)
	}
	if id.sidrEntry != nil {
		delete(cm.sidr, *id.sidrEntry)
		id.sidrEntry = nil
	}
	cm.removeRemote(id)
	// Keep the comm ID until timewait ends so it is not reused while the
	// peer may still send to it; the timer releases it.
	if id.twTimer == nil {
		cm.ids.release(id)
	}
	// Its undelivered events are skipped by deliver.
}

// resetToIdle is cm_reset_to_idle.
func (cm *CM) resetToIdle(id *ID) {
	id.cancelMsg()
	cm.removeRemote(id)
	id.state = StateIdle
}

// enterTimewait is cm_enter_timewait: the duplicate-tracking entries go
// away, and after ms(av.timeout) the id returns to IDLE with TIMEWAIT_EXIT.
func (cm *CM) enterTimewait(id *ID) {
	id.cancelMsg()
	cm.removeRemote(id)
	id.state = StateTimewait
	if id.twTimer != nil {
		id.twTimer.Stop()
	}
	if cm.closed {
		id.twTimer = nil
		return
	}
	// The generation tells this timer from a later one, as comparing the
	// timers would, without a heap cell for the closure to share.
	id.twGen++
	gen := id.twGen
	id.twTimer = cm.clk.AfterFunc(msDuration(convertToMs(id.av.Timeout)), func() {
		cm.mu.Lock()
		if id.twTimer == nil || id.twGen != gen {
			cm.mu.Unlock()
			return
		}
		id.twTimer = nil
		var released func(any)
		if id.destroyed {
			cm.ids.release(id)
			if id.lingers {
				released = cm.released
			}
		} else if id.state == StateTimewait {
			id.state = StateIdle
			cm.post(Event{Type: EventTimewaitExit, ID: id}, id)
		}
		ctx := id.context
		var t txn
		cm.unlock(&t)
		if released != nil {
			released(ctx)
		}
	})
}

// insertRemote records (remote comm ID, CA GUID) and (remote QPN, CA GUID).
// It returns the id holding a colliding comm ID (duplicate) or QPN (stale).
func (cm *CM) insertRemote(id *ID) (dup, stale *ID) {
	if cur := cm.remoteIDs.get(keyRemoteID.of(id)); cur != nil {
		return cur, nil
	}
	if cur := cm.remoteQPNs.get(keyRemoteQPN.of(id)); cur != nil {
		return nil, cur
	}
	cm.remoteIDs.insert(id)
	cm.remoteQPNs.insert(id)
	id.inRemote = true
	return nil, nil
}

func (cm *CM) removeRemote(id *ID) {
	if !id.inRemote {
		return
	}
	id.inRemote = false
	cm.remoteIDs.remove(id)
	cm.remoteQPNs.remove(id)
}

// acquire is cm_acquire_id: the live id with local comm ID local whose
// remote ID is remote (0: not learned yet).
func (cm *CM) acquire(local, remote uint32) *ID {
	id := cm.ids.lookup(local)
	if id == nil || id.destroyed || id.remoteID != remote {
		return nil
	}
	return id
}

func putBE64(b []byte, v uint64) {
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}
