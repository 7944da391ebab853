package storm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/ucm"
)

// stack is one node: a hw/sim device with one IB port, a cmcore.CM on it,
// a ucm.Device on the CM (its own id table and per-user Budget at ucm's
// default limits, as one ucmd daemon per host), and one application: a
// process that has opened the device once (O_NONBLOCK) and issues
// libibcm's writes on that file through ucm's cuse.Handle, its buffers in
// a fake address space (callermem.Fake), as the daemon would serve them
// from /dev/infiniband/ucm0.
type stack struct {
	i   int
	net *simNet
	dev *sim.Device
	cm  *cmcore.CM
	ucm *ucm.Device
	gid hw.GID
	lid uint16

	// The application. mu serialises it (its commands and the handling
	// of its events): on the fake clock one goroutine runs anyway; on the
	// real clock timers start connections concurrently with the driver.
	mu     sync.Mutex
	file   cuse.Handle
	req    cuse.Request
	mem    *callermem.Fake
	pid    int
	page   uint64 // the application's buffers (response, data, info, path, private data)
	cmd    []byte // the write being built
	resp   []byte // an event read back
	pd     []byte // its private data
	ends   []end  // by ucm id: which connection's end it is
	qpn    uint32
	lid0   uint32 // the listening id
	onEv   func(st *stack, ev *abi.EventResp, pd []byte)
	paced  bool // the application reads its events at its own pace, not when woken
	onWake func()

	woken bool // in net.woken (net.appMu)
	// kick wakes the application's own goroutine (real clock only);
	// closing quit ends it, done then closes.
	kick, quit, done chan struct{}

	// rejected counts the new connections ucm could not queue (its
	// limits) and so rejected, from its log.
	rejected atomic.Int64
}

// rejectCounter is the ucm device's slog.Handler: it counts the
// connections ucm rejects and drops every record.
type rejectCounter struct{ st *stack }

func (h rejectCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h rejectCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "ucm: rejecting new connection" {
		h.st.rejected.Add(1)
	}
	return nil
}
func (h rejectCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h rejectCounter) WithGroup(string) slog.Handler      { return h }

// end is a connection's end at one node.
type end struct {
	c      *conn
	active bool
}

// The application's buffers within its page.
const (
	offResp = 0
	offData = 512
	offInfo = 1024
	offPath = 1536
	offPD   = 2048
)

// stormUID is every application's uid (one user per node, so each node's
// Budget charges one user, as a job's processes on one host).
const stormUID = 1000

// addStack adds node i: device, CM (with autoMRA), ucm device (with lim;
// zero: ucm's defaults), and the application's open file with a listener
// on serviceID.
func (n *simNet) addStack(i int, mem *callermem.Fake, autoMRA uint8, lim ucm.Limits) (*stack, error) {
	n.autoMRA = autoMRA
	cm, dev, err := n.addCM(fmt.Sprintf("n%d", i))
	if err != nil {
		return nil, err
	}
	a, err := dev.Port(1).Attr()
	if err != nil {
		return nil, err
	}
	pid := 100 + i
	st := &stack{}
	u, err := ucm.New(ucm.Config{
		CM: cm, Memory: mem, Logger: slog.New(rejectCounter{st}), Limits: lim,
		ThreadGroup: func(tid int) (int, error) { return tid, nil },
		ProcessName: func(int) (string, error) { return "storm", nil },
	})
	if err != nil {
		cm.Close()
		return nil, err
	}
	*st = stack{
		i: i, net: n, dev: dev, cm: cm, ucm: u, gid: a.GIDs[0].GID, lid: a.LID,
		mem: mem, pid: pid,
		req: cuse.Request{Caller: cuse.Caller{Pid: pid, Uid: stormUID, Gid: stormUID}, Flags: unix.O_RDWR | unix.O_NONBLOCK},
		cmd: make([]byte, 0, 256), resp: make([]byte, abi.EventRespSize), pd: make([]byte, 255),
	}
	st.page = mem.Alloc(pid, callermem.PageSize)
	h, err := u.Open(context.Background(), st.req, waker{st})
	if err != nil {
		cm.Close()
		return nil, err
	}
	st.file = h
	if n.fake == nil {
		st.kick, st.quit, st.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go st.loop()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lid0, err = st.createID(0); err != nil {
		return nil, err
	}
	if err := st.cmdErr(abi.CmdListen, 0, &abi.Listen{ID: st.lid0, ServiceID: serviceID}); err != nil {
		return nil, err
	}
	return st, nil
}

// waker is the file's cuse.Waker: ucm calls Wake when it queues an event.
type waker struct{ st *stack }

func (w waker) Wake() {
	if w.st.onWake != nil {
		w.st.onWake()
	}
	if !w.st.paced {
		w.st.net.wake(w.st)
	}
}

// write issues one command on the application's file, as write(2).
func (st *stack) cmdErr(cmd abi.Cmd, out uint16, s abi.Struct) error {
	b := st.cmd[:abi.HeaderSize+s.Size()]
	h := abi.Header{Cmd: cmd, In: uint16(s.Size()), Out: out}
	h.Encode(b)
	s.Encode(b[abi.HeaderSize:])
	_, err := st.file.Write(context.Background(), st.req, b)
	return err
}

func (st *stack) createID(cookie uint64) (uint32, error) {
	if err := st.cmdErr(abi.CmdCreateID, uint16(abi.CmdCreateID.OutLen()), &abi.CreateID{UID: cookie, Response: st.page + offResp}); err != nil {
		return 0, err
	}
	b := st.resp[:abi.CreateIDRespSize]
	if err := st.mem.Read(st.pid, st.page+offResp, b); err != nil {
		return 0, err
	}
	var r abi.CreateIDResp
	r.Decode(b)
	return r.ID, nil
}

// destroyID destroys id and forgets its end.
func (st *stack) destroyID(id uint32) error {
	st.setEnd(id, end{})
	return st.cmdErr(abi.CmdDestroyID, uint16(abi.CmdDestroyID.OutLen()), &abi.DestroyID{ID: id, Response: st.page + offResp})
}

// sendREQ connects id to peer with the connection index as private data.
func (st *stack) sendREQ(id uint32, peer *stack, idx int, to Timeouts) error {
	p := abi.PathRec{
		SGID: st.gid, DGID: peer.gid, SLID: st.lid, DLID: peer.lid,
		PKey: 0xffff, MTU: 4, Rate: 3, PacketLifeTime: to.PacketLifeTime, Reversible: 1, NumbPath: 1,
	}
	var pb [abi.PathRecSize]byte
	p.Encode(pb[:])
	var pd [4]byte
	binary.BigEndian.PutUint32(pd[:], uint32(idx))
	if err := st.mem.Write(st.pid, st.page+offPath, pb[:]); err != nil {
		return err
	}
	if err := st.mem.Write(st.pid, st.page+offPD, pd[:]); err != nil {
		return err
	}
	st.qpn++
	return st.cmdErr(abi.CmdSendREQ, 0, &abi.REQ{
		ID: id, QPN: st.qpn, QPType: abi.QPTypeRC, PSN: 1, SID: serviceID,
		Data: st.page + offPD, Len: 4, PrimaryPath: st.page + offPath,
		RemoteCMResponseTimeout: to.RemoteCMResponseTimeout, LocalCMResponseTimeout: to.LocalCMResponseTimeout,
		MaxCMRetries: to.MaxCMRetries, RetryCount: 7, RNRRetryCount: 7,
	})
}

// sendREP accepts new connection id, giving it cookie.
func (st *stack) sendREP(id uint32, cookie uint64) error {
	st.qpn++
	return st.cmdErr(abi.CmdSendREP, 0, &abi.REP{ID: id, UID: cookie, QPN: st.qpn, PSN: 1})
}

// send is SEND_RTU, SEND_DREQ or SEND_DREP without private data.
func (st *stack) send(cmd abi.Cmd, id uint32) error {
	return st.cmdErr(cmd, 0, &abi.PrivateData{ID: id})
}

func (st *stack) sendMRA(id uint32, timeout uint8) error {
	return st.cmdErr(abi.CmdSendMRA, 0, &abi.MRA{ID: id, Timeout: timeout})
}

// getEvent is a non-blocking GET_EVENT: ok is false when none is queued
// (EAGAIN). pd is the event's private data (valid until the next call).
func (st *stack) getEvent(ev *abi.EventResp) (pd []byte, ok bool, err error) {
	err = st.cmdErr(abi.CmdEvent, abi.EventRespSize, &abi.EventGet{
		Response: st.page + offResp, Data: st.page + offData, Info: st.page + offInfo, DataLen: 255, InfoLen: 255,
	})
	if errors.Is(err, unix.EAGAIN) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := st.mem.Read(st.pid, st.page+offResp, st.resp); err != nil {
		return nil, false, err
	}
	ev.Decode(st.resp)
	if ev.Present&abi.PresData != 0 {
		b := st.pd[:ev.Event.PrivateDataLen()]
		if err := st.mem.Read(st.pid, st.page+offData, b); err != nil {
			return nil, false, err
		}
		return b, true, nil
	}
	return nil, true, nil
}

// loop is the application's goroutine on the real clock: it runs
// whenever its file wakes it, until quit is closed.
func (st *stack) loop() {
	defer close(st.done)
	for {
		select {
		case <-st.kick:
			st.mu.Lock()
			st.run()
			st.mu.Unlock()
		case <-st.quit:
			return
		}
	}
}

// stop ends the application's goroutine, if it has one and it runs; the
// caller (the driving goroutine) does not hold st.mu.
func (st *stack) stop() {
	if st.quit != nil {
		close(st.quit)
		<-st.done
		st.quit = nil
	}
}

// readable is poll(2) on the application's file (ucm's Poll): an event
// is queued.
func (st *stack) readable() bool {
	rev, err := st.file.Poll(context.Background(), st.req, unix.POLLIN)
	return err == nil && rev&unix.POLLIN != 0
}

// run reads and handles every queued event, as an event loop: poll, then
// GET_EVENT while readable. The caller holds st.mu.
func (st *stack) run() {
	var ev abi.EventResp
	for st.readable() {
		pd, ok, err := st.getEvent(&ev)
		if err != nil {
			st.net.errs.Add(1)
			return
		}
		if !ok {
			return
		}
		st.onEv(st, &ev, pd)
	}
}

func (st *stack) setEnd(id uint32, e end) {
	if int(id) >= len(st.ends) {
		if e.c == nil {
			return
		}
		st.ends = append(st.ends, make([]end, int(id)+1-len(st.ends))...)
	}
	st.ends[id] = e
}

func (st *stack) endOf(id uint32) end {
	if int(id) < len(st.ends) {
		return st.ends[id]
	}
	return end{}
}

// live counts the ends the application still holds.
func (st *stack) live() int {
	n := 0
	for _, e := range st.ends {
		if e.c != nil {
			n++
		}
	}
	return n
}

// states counts the ids of the node by CM state, through ucm's view
// (Device.Files, what `ucmd status` shows), the listener left out.
func (st *stack) states() map[cmcore.State]int {
	out := make(map[cmcore.State]int)
	for _, f := range st.ucm.Files() {
		for _, id := range f.IDs {
			if id.ID != st.lid0 {
				out[id.State]++
			}
		}
	}
	return out
}

// idStates returns every id's state by id.
func (st *stack) idStates() map[uint32]cmcore.State {
	out := make(map[uint32]cmcore.State)
	for _, f := range st.ucm.Files() {
		for _, id := range f.IDs {
			out[id.ID] = id.State
		}
	}
	return out
}

// leaks is what a node holds beyond its listener once everything is
// destroyed: in the application's bookkeeping, in ucm (the user's ids and
// queued events in the Budget, the file's ids and events) and in the CM.
type leaks struct{ appEnds, ucmIDs, ucmEvents, cmIDs, cmEvents int }

func (st *stack) leaks() leaks {
	var l leaks
	l.appEnds = st.live()
	u := st.ucm.Budget().User(stormUID)
	l.ucmIDs, l.ucmEvents = u.IDs-1, u.Events
	if u.Files != 1 {
		l.ucmIDs++ // a file lost or added: count it somewhere visible
	}
	// The files' queues hold the events the Budget counts: an event left
	// is one leak, not two (the larger count, should they differ).
	queued := 0
	for _, f := range st.ucm.Files() {
		queued += f.QueuedEvents
	}
	l.ucmEvents = max(queued, u.Events)
	cids, cevs := st.cm.Count()
	l.cmIDs, l.cmEvents = cids-1, cevs
	return l
}

// close releases the application's file (every id destroyed, as at
// exit) and reports what ucm and the CM still hold after it.
func (st *stack) close() (ucmHeld, cmHeld int) {
	st.file.Release(context.Background())
	u := st.ucm.Budget().User(stormUID)
	cids, cevs := st.cm.Count()
	return u.Files + u.IDs + u.Events + u.Waits + int(st.ucm.Budget().Usage().Bytes), cids + cevs
}
