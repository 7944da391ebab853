package umad

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/neigh"
	"github.com/ucmd/ucmd/hw/umad/uapi"
)

// maxMgmtVersion is the MAD layer's MAX_MGMT_VERSION (mad_priv.h).
const maxMgmtVersion = 8

// maxMADSize is the largest MAD umad can return (OPA); reading with a
// smaller buffer would make read() fail and requeue the packet forever.
const maxMADSize = 2048

// Stats count what an endpoint dropped or refused.
type Stats struct {
	Received     uint64 // MADs queued for Recv
	Overflow     uint64 // dropped: receive queue full
	Malformed    uint64 // dropped: not a 256-byte MAD
	SendFailures uint64 // status records read on the receive file (status != 0): none expected, see deliver
	Discarded    uint64 // unexpected packets read off the send files
	Renewals     uint64 // send agents replaced so that a TID could be sent again (lanes.go)
	// RenewFailures counts lanes closed because their agent could not be
	// replaced; a new file takes their place.
	RenewFailures uint64
	// On RoCE, first sends to destinations not yet reached (resolve.go):
	// Resolved found the peer's MAC through rtnetlink, ResolveFailures
	// failed with ETIMEDOUT without a lane, ResolveUnanswered could not be
	// told (no CAP_NET_ADMIN, ...) and took a shared lane.
	Resolved, ResolveFailures, ResolveUnanswered uint64
}

// Endpoint is a MAD agent on a umad port; it implements hw.Endpoint.
type Endpoint struct {
	port     *Port
	path     string
	ll       hw.LinkLayer
	rd       recvFile
	openSend func() (*sendFile, error)
	renew    func(*sendFile) (agent uint32, err error)

	q        chan queued
	inline   atomic.Pointer[func(*hw.Received)] // Deliver's function
	rbuf     hw.Received                        // readLoop's, for inline
	done     chan struct{}                      // closed by Close
	readDone chan struct{}                      // closed when readLoop returns
	failed   chan struct{}                      // closed when readLoop stops on an error
	readErr  error                              // set before failed is closed

	mu       sync.Mutex
	closed   bool
	idle     []*sendFile   // lanes not in a write, most recently returned last
	opened   int           // lanes open, idle or busy
	maxFiles int           // Options.SendFiles
	returned chan struct{} // closed and replaced when a lane comes back or closes, if waiting
	waiting  int           // sends waiting for a lane

	// On RoCE, a send to a destination not known to resolve has the
	// kernel resolve it first (resolve.go), or where that cannot be told,
	// takes a slot of unresolved (admit).
	resolved   map[destination]struct{}  // under mu
	unreached  map[destination]time.Time // under mu: when a send to it last failed
	unresolved chan struct{}
	write      func(fd int, b []byte) error                    // writeMAD; tests replace it
	now        func() time.Time                                // time.Now; tests replace it
	resolve    func(ctx context.Context, to destination) error // resolveNeighbour; tests replace it
	neigh      *neigh.Resolver                                 // under mu: opened at first use
	neighErr   error                                           // under mu: why it could not be
	neighAt    time.Time                                       // under mu: when it could not be

	received, overflow, malformed, sendFailures, discarded, renewals, renewFailures atomic.Uint64
	resolvedFirst, resolveFailures, resolveUnknown                                  atomic.Uint64
	resolveErr                                                                      atomic.Pointer[error] // why rtnetlink last could not tell
}

var _ hw.Endpoint = (*Endpoint)(nil)

// sendFile is a send lane: a umad file with a send-only agent, the TIDs
// it carried since that agent was registered (lanes.go), and its write
// buffer.
type sendFile struct {
	fd      int
	agent   uint32
	uses    uint32 // sends since the lane was last drained (release)
	carried map[uint64]struct{}
	buf     [uapi.SizeofUserMADHdr + maxMADSize]byte // sends use the first 320 bytes
}

func (sf *sendFile) close() { unix.Close(sf.fd) }

// OpenMAD registers reg on the port's umad device. For the CM class the
// error wraps hw.ErrCMClassInUse, naming the modules to unload, when the
// kernel's ib_cm (or anyone else) already owns a requested method.
func (p *Port) OpenMAD(reg hw.Registration) (hw.Endpoint, error) {
	if reg.MgmtClass == 0 {
		return nil, fmt.Errorf("open MAD agent on %s: management class 0 is reserved: %w", p, unix.EINVAL)
	}
	// Refuse what the MAD layer would refuse with EINVAL up front, so that
	// EINVAL from the registration itself means "method already in use".
	if reg.ClassVersion >= maxMgmtVersion {
		return nil, fmt.Errorf("open MAD agent on %s: class version %d out of range (max %d): %w",
			p, reg.ClassVersion, maxMgmtVersion-1, unix.EINVAL)
	}
	attr, err := p.Attr()
	if err != nil {
		return nil, err
	}
	fd, _, err := p.openAgent(reg, true)
	if err != nil {
		return nil, err
	}
	rd, err := newRecvFile(fd, p.UMADPath())
	if err != nil {
		return nil, fmt.Errorf("open MAD agent on %s: %w", p, err)
	}
	openSend := func() (*sendFile, error) {
		fd, agent, err := p.openAgent(hw.Registration{}, false)
		if err != nil {
			return nil, err
		}
		return &sendFile{fd: fd, agent: agent}, nil
	}
	e, err := newEndpoint(p, attr.LinkLayer, rd, openSend, p.renewSendAgent)
	if err != nil {
		rd.Interrupt()
		rd.Close()
		return nil, err
	}
	return e, nil
}

// newEndpoint opens the first send file at once, so that permission
// problems show up at open, and starts reading rd.
func newEndpoint(p *Port, ll hw.LinkLayer, rd recvFile, openSend func() (*sendFile, error),
	renew func(*sendFile) (uint32, error)) (*Endpoint, error) {
	first, err := openSend()
	if err != nil {
		return nil, err
	}
	o := p.opts.withDefaults()
	e := &Endpoint{
		port:     p,
		path:     p.UMADPath(),
		ll:       ll,
		rd:       rd,
		openSend: openSend,
		renew:    renew,
		q:        make(chan queued, o.QueueLen),
		done:     make(chan struct{}),
		readDone: make(chan struct{}),
		failed:   make(chan struct{}),
		idle:     []*sendFile{first},
		opened:   1,
		maxFiles: o.SendFiles,
		returned: make(chan struct{}),

		resolved:   make(map[destination]struct{}),
		unreached:  make(map[destination]time.Time),
		unresolved: make(chan struct{}, max(1, o.SendFiles/2)),
		write:      writeMAD,
		now:        time.Now,
	}
	e.resolve = e.resolveNeighbour
	go e.readLoop()
	return e, nil
}

// Stats returns the endpoint's counters.
func (e *Endpoint) Stats() Stats {
	return Stats{
		Received:      e.received.Load(),
		Overflow:      e.overflow.Load(),
		Malformed:     e.malformed.Load(),
		SendFailures:  e.sendFailures.Load(),
		Discarded:     e.discarded.Load(),
		Renewals:      e.renewals.Load(),
		RenewFailures: e.renewFailures.Load(),

		Resolved:          e.resolvedFirst.Load(),
		ResolveFailures:   e.resolveFailures.Load(),
		ResolveUnanswered: e.resolveUnknown.Load(),
	}
}

// ResolveError is why rtnetlink last could not resolve a first send's
// peer (Stats.ResolveUnanswered), nil if it always could.
func (e *Endpoint) ResolveError() error {
	if p := e.resolveErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (e *Endpoint) readLoop() {
	defer close(e.readDone)
	buf := make([]byte, uapi.SizeofUserMADHdr+maxMADSize)
	for {
		n, err := e.rd.Read(buf)
		if err == nil && n == 0 {
			err = io.EOF // umad never returns 0; don't spin if something does
		}
		if err != nil {
			select {
			case <-e.done:
				return
			default:
			}
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			// EIO: the device went away (agents_dead). Anything else
			// would repeat forever: stop and report it.
			e.readErr = fmt.Errorf("umad read on %s (%s): %w", e.port, e.path, err)
			close(e.failed)
			return
		}
		e.deliver(buf[:n])
	}
}

// deliver queues one packet read from the receive file, or hands it to
// Deliver's function.
func (e *Endpoint) deliver(b []byte) {
	var h uapi.UserMADHdr
	if h.Decode(b) != nil {
		e.malformed.Add(1)
		return
	}
	if h.Status != 0 {
		// A send handed back with an error (ETIMEDOUT). The kernel queues
		// it on the file of the agent that sent it (send_handler), a send
		// lane, never this one, and only for sends with timeout_ms > 0,
		// which we never make: counted should one ever come.
		e.sendFailures.Add(1)
		return
	}
	if len(b)-uapi.SizeofUserMADHdr != hw.MADSize {
		e.malformed.Add(1)
		return
	}
	if e.ll == hw.LinkEthernet && h.GRHPresent != 0 {
		// umad delivers a MAD with a GRH only once the kernel resolved
		// its sender's MAC, to build the address: an answer is sent at
		// once.
		e.learn(destination{gid: h.GID, sgid: h.GIDIndex}, true)
	}
	if f := e.inline.Load(); f != nil {
		// A buffer of the endpoint's own: r handed to a function value
		// from the stack would escape, an allocation per MAD.
		r := &e.rbuf
		copy(r.MAD[:], b[uapi.SizeofUserMADHdr:])
		r.Src = addressFromHdr(&h)
		e.received.Add(1)
		(*f)(r)
		return
	}
	r := queued{hdr: h}
	copy(r.mad[:], b[uapi.SizeofUserMADHdr:])
	select {
	case e.q <- r:
		e.received.Add(1)
	default:
		e.overflow.Add(1)
	}
}

// queued is a MAD in the receive queue, with umad's header as read: no
// pointer (hw.Address holds its GRH by one), so that the garbage collector
// need not scan the queue, QueueLen slots of which exist from the start,
// used or not. With hw.Received in them, each collection marked 1.2 MB
// per endpoint (BenchmarkGCWithEndpoints).
type queued struct {
	mad hw.MAD
	hdr uapi.UserMADHdr
}

func (q *queued) received() hw.Received {
	return hw.Received{MAD: q.mad, Src: addressFromHdr(&q.hdr)}
}

// addressFromHdr is the sender as umad reports it; sending to it unchanged
// answers the sender (the GRH's GID is the source GID, GIDIndex the local
// GID the packet was addressed to).
func addressFromHdr(h *uapi.UserMADHdr) hw.Address {
	a := hw.Address{
		LID:       h.LID,
		SL:        h.SL,
		PathBits:  h.PathBits,
		QPN:       h.QPN,
		QKey:      h.QKey,
		PKeyIndex: h.PKeyIndex,
	}
	if h.GRHPresent != 0 {
		a.GRH = &hw.GRH{
			GID:          hw.GID(h.GID),
			SGIDIndex:    h.GIDIndex,
			HopLimit:     h.HopLimit,
			TrafficClass: h.TrafficClass,
			FlowLabel:    h.FlowLabel,
		}
	}
	return a
}

// hdrForSend is the ib_user_mad_hdr of a send: no response expected
// (timeout_ms 0, retries 0), because umad has no way to cancel a send
// that waits for one; the CM core retransmits itself.
func hdrForSend(agent uint32, dst *hw.Address) uapi.UserMADHdr {
	h := uapi.UserMADHdr{
		ID:        agent,
		QPN:       dst.QPN,
		QKey:      dst.QKey,
		LID:       dst.LID,
		SL:        dst.SL,
		PathBits:  dst.PathBits,
		PKeyIndex: dst.PKeyIndex,
	}
	if g := dst.GRH; g != nil {
		h.GRHPresent = 1
		h.GIDIndex = g.SGIDIndex
		h.HopLimit = g.HopLimit
		h.TrafficClass = g.TrafficClass
		h.GID = g.GID
		h.FlowLabel = g.FlowLabel
	}
	return h
}

func describe(a *hw.Address) string {
	if a.GRH != nil {
		return fmt.Sprintf("GID %v from GID index %d (LID %#x QPN %d)", a.GRH.GID, a.GRH.SGIDIndex, a.LID, a.QPN)
	}
	return fmt.Sprintf("LID %#x QPN %d", a.LID, a.QPN)
}

// Send writes mad to dst. On RoCE the kernel resolves the peer's MAC
// inside write(), which can take about a second (and then fails with
// ETIMEDOUT if nobody answers); that write cannot be interrupted, but it
// holds only its own send file, never the receive side, and other sends
// use other files (up to Options.SendFiles at once). A first send to a
// peer has its MAC resolved before it takes a file (see "Destinations
// whose MAC does not resolve"), failing with ETIMEDOUT there. A MAD never goes
// out on a file where its TID may still be in flight (lanes.go), so
// EINVAL from the kernel means a missing GRH, a GID index past the table
// or, with CONFIG_SECURITY_INFINIBAND, a P_Key index past it; ENODATA an
// empty GID slot (rdma_get_gid_attr).
func (e *Endpoint) Send(ctx context.Context, dst hw.Address, mad *hw.MAD) error {
	if mad == nil {
		return fmt.Errorf("umad send on %s: nil MAD: %w", e.port, unix.EINVAL)
	}
	if dst.GRH == nil && e.ll == hw.LinkEthernet {
		return fmt.Errorf("umad send to %s on %s: RoCE needs a GRH: %w", describe(&dst), e.port, unix.EINVAL)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	roce := e.ll == hw.LinkEthernet
	var to destination
	var resolved bool
	if roce {
		to = destination{gid: dst.GRH.GID, sgid: dst.GRH.SGIDIndex}
		var shared bool
		var err error
		if resolved, shared, err = e.admit(ctx, to, &dst); err != nil {
			return err
		}
		if shared {
			defer func() { <-e.unresolved }()
		}
	}
	k := tidKey(mad)
	sf, err := e.acquire(ctx, k)
	if err != nil {
		return err
	}
	defer e.release(sf) // closes the lane after Close
	select {
	case <-e.done:
		// Close ran while this send took or opened its lane (an open
		// registers an agent: milliseconds): no MAD goes out after Close
		// has returned but one whose write had begun.
		return fmt.Errorf("umad send on %s: %w", e.port, hw.ErrClosed)
	default:
	}
	h := hdrForSend(sf.agent, &dst)
	h.Encode(sf.buf[:])
	copy(sf.buf[uapi.SizeofUserMADHdr:], mad[:])
	err = e.write(sf.fd, sf.buf[:uapi.SizeofUserMADHdr+hw.MADSize])
	if roce && (!resolved || err != nil) {
		switch {
		case err == nil:
			e.learn(to, true) // a resolved destination that went through stays so
		case unresolvable(err):
			e.learn(to, false)
		} // else the write failed for another reason (a GID index gone, ENOMEM): nothing learnt
	}
	if err != nil {
		return fmt.Errorf("umad send to %s on %s: %w", describe(&dst), e.port, err)
	}
	sf.sent(k)
	return nil
}

// admit decides how a RoCE send to to may go: at once to any lane if it
// is resolved (a send already reached it, or a MAD came from it); else
// after the kernel resolved it through rtnetlink, or, where rtnetlink
// cannot tell, holding a slot of unresolved (shared: the caller gives it
// back). A destination that failed lately, or that the resolution finds
// unreachable, is an error (ETIMEDOUT).
func (e *Endpoint) admit(ctx context.Context, to destination, dst *hw.Address) (resolved, shared bool, err error) {
	if resolved, err = e.reachable(to, dst); err != nil || resolved {
		return resolved, false, err
	}
	err = e.resolve(ctx, to)
	switch {
	case err == nil:
		e.resolvedFirst.Add(1) // the write finds the MAC: any lane
		return false, false, nil
	case errors.Is(err, neigh.ErrFailed):
		e.resolveFailures.Add(1)
		e.learn(to, false)
		return false, false, fmt.Errorf("umad send to %s on %s: %w", describe(dst), e.port, err)
	case ctx.Err() != nil:
		return false, false, ctx.Err()
	}
	// rtnetlink could not tell: the write resolves, on a shared lane.
	select {
	case <-e.done: // Close closed the resolver
		return false, false, hw.ErrClosed
	default:
	}
	e.resolveUnknown.Add(1)
	why := err // not err itself: the returns below write it
	e.resolveErr.Store(&why)
	select {
	case e.unresolved <- struct{}{}:
	case <-ctx.Done():
		return false, false, ctx.Err()
	case <-e.done:
		return false, false, hw.ErrClosed
	}
	// A send ahead of this one may have found it unreachable.
	if _, err := e.reachable(to, dst); err != nil {
		<-e.unresolved
		return false, false, err
	}
	return false, true, nil
}

func writeMAD(fd int, b []byte) error {
	for {
		_, err := unix.Write(fd, b)
		if err != unix.EINTR {
			return err
		}
	}
}

// Destinations whose MAC does not resolve.
//
// On RoCE, umad's write() resolves the peer's MAC inside the call, on the
// lane it writes (docs/umad.md): a peer nobody answers for holds that lane
// for about a second before the write fails with ETIMEDOUT, and so does
// each retransmission to it. Any local user can name such peers (a REQ's
// path is the caller's), and four of them in flight would hold every lane,
// so that every other MAD of the port, other users' connections included,
// waited behind them: 996 ms for a send that takes 3.5 ms, measured in
// the test VM. So only a destination whose last send went through may go
// straight to any lane. The others are first resolved through rtnetlink
// (resolve.go), holding no lane, as the kernel's CM resolved a
// connection's address in the caller's own context; where rtnetlink
// cannot tell, they share half of the lanes (unresolved), and a user who
// names unreachable peers delays only sends to new or unreachable peers.
// A peer a MAD came from counts as reached: the kernel resolved its MAC
// to deliver the MAD (a REQ's REP goes out at once).
//
// A send to a destination whose last send failed to resolve it less than
// failedFor ago fails at once, without a lane or a resolution: a
// retransmission to a peer nobody answers for (a client chooses how soon
// it comes) would otherwise take a second each time, where now only the
// first does.

// failedFor is how long a destination whose send failed is not tried again.
const failedFor = time.Second

// unresolvable says whether a write failed because the kernel could not
// resolve the destination's MAC: no route to it (rdma_resolve_ip's route
// lookup), or no answer within its second.
func unresolvable(err error) bool {
	return errors.Is(err, unix.ETIMEDOUT) || errors.Is(err, unix.EHOSTUNREACH) || errors.Is(err, unix.ENETUNREACH)
}

// destination is what umad resolves a MAC for: the GID, from the source
// GID (whose netdev resolves it).
type destination struct {
	gid  hw.GID
	sgid uint8
}

// maxResolved bounds the destinations remembered; past it they are
// forgotten and take the shared lanes again until a send goes through.
const maxResolved = 4096

// lookup says whether to is resolved, and how long ago a send to it last
// failed (-1: not lately).
func (e *Endpoint) lookup(to destination) (resolved bool, failedAgo time.Duration) {
	e.mu.Lock()
	_, resolved = e.resolved[to]
	at, failed := e.unreached[to]
	e.mu.Unlock()
	if !failed {
		return resolved, -1
	}
	return resolved, e.now().Sub(at)
}

// reachable is lookup for Send: an error if a send to to failed less
// than failedFor ago.
func (e *Endpoint) reachable(to destination, dst *hw.Address) (resolved bool, err error) {
	resolved, ago := e.lookup(to)
	if ago >= 0 && ago < failedFor {
		return false, fmt.Errorf("umad send to %s on %s: its MAC did not resolve %v ago: %w",
			describe(dst), e.port, ago.Round(time.Millisecond), unix.ETIMEDOUT)
	}
	return resolved, nil
}

// learn records whether a send to to went through.
func (e *Endpoint) learn(to destination, ok bool) {
	var at time.Time
	if !ok {
		at = e.now()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !ok {
		delete(e.resolved, to)
		if len(e.unreached) >= maxResolved {
			// Those past failedFor say nothing any more; the others are
			// all cleared only if they alone fill the map.
			for d, when := range e.unreached {
				if at.Sub(when) >= failedFor {
					delete(e.unreached, d)
				}
			}
			if len(e.unreached) >= maxResolved {
				clear(e.unreached)
			}
		}
		e.unreached[to] = at
		return
	}
	delete(e.unreached, to)
	if _, known := e.resolved[to]; known {
		return
	}
	if len(e.resolved) >= maxResolved {
		clear(e.resolved)
	}
	e.resolved[to] = struct{}{}
}

// drainEvery is how many sends a lane makes between two looks for noise
// (release).
const drainEvery = 32

// release returns sf to the pool, every drainEvery sends after discarding
// anything the kernel queued on it. A send-only agent receives only
// responses to requests of its own that are still outstanding, and the
// CM's sends never wait for a response (no timeout), so the MAD layer
// drops any response before it reaches the file: there is normally
// nothing to read, and the look costs a system call. Looking every send
// doubled the system calls of a MAD's send; what arrives in between (a
// failed send's report, say) waits in the kernel for at most drainEvery
// more sends, or until the lane closes.
func (e *Endpoint) release(sf *sendFile) {
	if sf.uses++; sf.uses >= drainEvery {
		sf.uses = 0
		e.drain(sf)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		sf.close()
		return
	}
	e.idle = append(e.idle, sf)
	e.wakeSenders()
}

// drain reads and counts whatever the kernel queued on sf.
func (e *Endpoint) drain(sf *sendFile) {
	for {
		fds := [1]unix.PollFd{{Fd: int32(sf.fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds[:], 0); err != nil || n == 0 || fds[0].Revents&unix.POLLIN == 0 {
			return
		}
		if _, err := unix.Read(sf.fd, sf.buf[:]); err != nil {
			return
		}
		e.discarded.Add(1)
	}
}

// Deliver implements hw.Deliverer: the read loop calls f for every MAD
// from now on.
func (e *Endpoint) Deliver(f func(r *hw.Received)) { e.inline.Store(&f) }

// Recv returns the next MAD; queued MADs are still returned after a read
// error, which is reported once they are gone.
func (e *Endpoint) Recv(ctx context.Context) (hw.Received, error) {
	select {
	case <-e.done:
		return hw.Received{}, hw.ErrClosed
	default:
	}
	select {
	case r := <-e.q:
		return r.received(), nil
	case <-ctx.Done():
		return hw.Received{}, ctx.Err()
	case <-e.done:
		return hw.Received{}, hw.ErrClosed
	case <-e.failed:
		select {
		case r := <-e.q:
			return r.received(), nil
		default:
			return hw.Received{}, e.readErr
		}
	}
}

// Close unregisters the agents (by closing their files) and wakes blocked
// calls. A send blocked in the kernel finishes first; its file is closed
// when it returns.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return hw.ErrClosed
	}
	e.closed = true
	close(e.done)
	idle := e.idle
	e.idle = nil
	r := e.neigh
	e.mu.Unlock()
	// Outside mu: closing a lane's file unregisters its agent, which waits
	// for the agent's sends to complete, and the read loop takes mu for
	// every RoCE MAD it learns a peer from.
	for _, sf := range idle {
		sf.close()
	}
	if r != nil {
		r.Close() // waits for a request in progress, so outside mu
	}
	e.rd.Interrupt()
	<-e.readDone
	if err := e.rd.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("close %s: %w", e.path, err)
	}
	return nil
}
