// Package cmcore is ucmd's InfiniBand Communication Manager: the IB CM
// protocol (IBTA vol. 1 ch. 12) that the kernel's ib_cm ran, re-done in
// userspace over hw (umad or the simulated fabric), with the semantics that
// legacy ib_ucm clients saw. The reference is docs/ib-cm.md; section
// numbers below (§) are that document's.
//
// # Objects
//
// A CM serves one hw.Device (all its ports: listeners span the HCA):
//
//	cm := cmcore.New(dev, cmcore.Options{Clock: clk})
//	err := cm.Start() // registers class 0x07/v2/SEND on every port
//	defer cm.Close()
//
// An ID is a cm_id: cm.CreateID(handler) returns one in IDLE with its local
// comm ID already allocated (§5.1: cyclic, XOR-scrambled, never reused
// before the old owner's timewait is over). Its methods are the ib_cm
// calls, with the allowed states, side effects and errno of §3.2:
//
//	Listen(sid, mask)            IDLE → LISTEN; mask 0 = exact; AssignServiceID; EBUSY on overlap
//	SendREQ(*REQParams)          IDLE → REQ_SENT
//	SendREP(*REPParams)          REQ_RCVD, MRA_REQ_SENT → REP_SENT
//	SendRTU(pd)                  REP_RCVD, MRA_REP_SENT → ESTABLISHED
//	SendDREQ(pd)                 ESTABLISHED → DREQ_SENT
//	SendDREP(pd)                 DREQ_RCVD → TIMEWAIT
//	SendREJ(reason, ari, pd)     connecting states → IDLE (TIMEWAIT after our REP)
//	SendMRA(timeout, pd)         REQ_RCVD, REP_RCVD, LAP received (MRAFlagDelay: only on duplicates)
//	SendLAP(path, pd)            ESTABLISHED, no LAP in progress
//	SendAPR(status, info, pd)    ESTABLISHED with a LAP received
//	SendSIDRREQ(*SIDRREQParams)  IDLE → SIDR_REQ_SENT
//	SendSIDRREP(*SIDRREPParams)  SIDR_REQ_RCVD → IDLE
//	Notify(NotifyCommEst|NotifyPathMig)
//	InitQPAttr(QPStateInit|RTR|RTS) → QPAttr, mask (§7)
//	Attr(), State(), SetContext(v), Context()
//	Destroy()
//
// Errors wrap a unix.Errno chosen as the kernel did (EINVAL for state and
// size violations, EBUSY, EISCONN, ENOENT for an unknown P_Key);
// errors.Is(err, unix.EINVAL) and errors.As into unix.Errno both work.
// Private data, ARI and info longer than the message's area are EINVAL
// before any state check. Received private data is always the whole area
// of the message (the receiver cannot know the sender's length).
//
// # Events
//
// Each ID's Handler receives its events (type numbers of §3.1, parameters
// of §3.5, already in the receiver's perspective). A REQ or SIDR_REQ for a
// listener creates a new ID, which inherits the listener's handler and
// context, and is delivered to the listener's handler in the event
// (Event.ID is the new id, Event.Listener the listener), as ucm expected.
//
// Delivery rules, which the ucm layer relies on:
//   - Handlers run one at a time per CM, in the order the CM generated the
//     events, so per id strictly in order. cmcore holds none of its locks
//     while calling a handler; a handler may call any method, including
//     Destroy of its own or another id, and must not block.
//   - An Event and its slices are valid only during the call.
//   - A handler returns an Outcome for ev.ID, the kernel handler's return
//     value: Keep; Destroy (the id is destroyed once the handler returns,
//     so a new connection is rejected with REJ 28 or SIDR_REP REJECT); or
//     DestroySilently (a new connection goes without REJ, as on a kernel
//     handler's -ENOMEM, so the peer's retry can succeed). No error value
//     decides what goes on the wire.
//   - Destroy sends what ib_destroy_cm_id sent in that state (the destroy
//     table of §3.2: REJ 4 with our node GUID from REQ_SENT, REJ 28 from
//     the other connecting states, one unretransmitted DREQ from
//     ESTABLISHED, DREP from DREQ_RCVD, SIDR_REP REJECT from
//     SIDR_REQ_RCVD), stops its timers and discards its undelivered events.
//     When it returns no event of the id will be delivered any more. It
//     never waits for a handler, so it is the same call from everywhere (a
//     handler on its own id, on another, on another CM's; any goroutine):
//     a handler call for the id that had already begun may still be
//     running when it returns. ib_destroy_cm_id waited for that call
//     instead; a wait cannot be skipped for the handler itself without
//     knowing which goroutine calls, and is what let handlers of two CMs
//     deadlock. Consumers keep their handler off state they free (ucm: the
//     file's mutex and the id's dead mark). A listener's undelivered new
//     connections are rejected (REJ 28 / SIDR_REP REJECT), as ucm's purge
//     did. Destroy never fails and may be called twice.
//
// # Receive side
//
// Every row of §3.4: messages are matched by local comm ID plus the remote
// comm ID they must carry; REQs go through the §5.4 pipeline (duplicate by
// remote comm ID + CA GUID, stale by remote QPN + CA GUID → REJ 10 and a
// DREQ for the old connection, listener by service ID and mask → REJ 8,
// path/GID/P_Key → REJ 12/18); REJ formatting follows §3.3; DREQs for
// unknown ids are answered with a DREP; duplicates are answered from saved
// state (RTU, MRA, DREP) or dropped, as the tables say. Undecodable MADs
// and messages that match nothing are dropped and logged at debug level.
//
// # Observing MADs
//
// Options.Observer sees every CM MAD as a MADEvent: the CM clock's time,
// device, port, direction (MADSent, MADReceived, MADRetransmitted,
// MADDropped with "undecodable: ..." or "ignored", MADSendFailed with the
// endpoint's error, MADTimedOut for a message out of retries), the MAD and
// the peer's hw.Address. It is called synchronously on the sending or
// receiving goroutine with no lock held, a received MAD before the answers
// it caused, and must not block; Observers fans one event out to several.
// With no Observer (nil, the default) a MAD costs one nil check
// (BenchmarkHandshake against BenchmarkHandshakeObserved). `ucmd trace` and
// the daemon's metrics are built on it.
//
// # Timers
//
// umad cannot cancel a send, so cmcore sends every MAD once and runs the
// kernel MAD layer's retransmission itself (§4.5): REQ, REP, DREQ, LAP and
// SIDR_REQ go out at most 1 + max_cm_retries times, timeout_ms apart (§4.2
// formulas) counted from each send's return, identical bytes; a valid MRA
// replaces the current and later intervals with ms(service timeout) +
// ms(av.timeout) without resetting the count (§4.4); the final timeout
// gives REQ_ERROR, REP_ERROR, DREQ_ERROR or SIDR_REQ_ERROR with status 20
// if the id is still in the state the message belonged to (a LAP timeout
// is silent, as on Linux). Timewait lasts ms(av.timeout) and ends with
// TIMEWAIT_EXIT. New transactions use the local comm ID as the low 32
// bits of the TID (umad owns the rest); replies echo the received TID.
// The clock is injectable (Options.Clock).
//
// # Deliberate differences from Linux v5.x
//
//   - REJ from REP_SENT stops the REP retransmission (Linux let it run).
//   - After an unanswered LAP the LAP sub-state returns to IDLE so a new LAP
//     can be sent (Linux stayed in LAP_SENT).
//   - A failed endpoint send is treated as a lost MAD: retransmission or the
//     final timeout handles it; SendDREQ cannot report a failed post.
//   - The passive side keeps answering at the REQ's source address (the
//     echo umad gives), also after REP.
//
// # Concurrency
//
// One mutex per CM guards all ids and tables; MADs are sent and events
// delivered after it is released. Each port has one receive goroutine;
// Close stops them and waits for them, so it must not be called from a
// handler.
//
// No call from a handler but Close can deadlock inside cmcore, whatever
// ids or CMs it touches (TestCrossCMDestroyFromHandlers): a call blocks
// only on a CM's mutex, which no goroutine holds while it runs a handler,
// sends a MAD or waits for anything, and in an endpoint's Send (umad on
// RoCE may wait for address resolution, never for a CM). Nothing waits
// for a handler to return, and delivery never waits either: a goroutine
// that finds another draining a CM's events leaves them to it, so a
// handler calling into a second CM runs that CM's handlers nested in its
// own or leaves them to that CM's drainer. The one wait is a port's
// receiver's, between two MADs, while another goroutine drains a full
// backlog (maxBacklog); no handler runs on a receiver's behalf then, and
// endpoints never receive inside a Send. What remains is the handlers'
// own business: one that blocks (on a lock, a channel) stalls its CM's
// delivery, so handlers must not block.
package cmcore
