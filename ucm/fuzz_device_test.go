package ucm_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cuse/cusetest"
	"golang.org/x/sys/unix"
)

// FuzzDeviceCUSE runs arbitrary programs of CUSE requests against a real
// ucm.Device through the fake kernel: opens (blocking or not), every ucm
// command with fields from the input and pointers into valid (or unmapped)
// caller memory, GET_EVENT that waits, POLL, READ, INTERRUPT of whatever
// is pending, releases, raw writes, and the clock advancing (retries and
// timeouts fire). Ids connect to listeners of the same device (the
// simulated port to itself) and to a plain cmcore peer on a second device.
//
// Invariants: no panic; every request except a waiting GET_EVENT answered
// within fuzzWait, and a waiting one as soon as it is interrupted; the
// FUSE protocol kept (cusetest); a successful WRITE returns the whole
// length; every delivered event names an id its file has owned (or a new
// one no file owns, for a REQ or SIDR_REQ) and a known type; after every
// file is released nothing is left (newFuzzStack's cleanup).
func FuzzDeviceCUSE(f *testing.F) {
	for _, seed := range deviceSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 512 {
			prog = prog[:512]
		}
		d := &devEnv{t: t, s: newFuzzStack(t), in: prog}
		for len(d.in) > 0 && !t.Failed() {
			d.step()
			d.s.settle()
			d.reap()
			d.drainNotes()
		}
		d.teardown()
	})
}

// Opcodes of FuzzDeviceCUSE's programs (the first byte of each step, mod
// opCount); the bytes after it are the step's arguments.
const (
	opOpen = iota
	opCreate
	opListen
	opREQ
	opREP
	opPrivData // RTU, DREQ, DREP
	opInfo     // REJ, APR
	opMRA
	opLAP
	opSIDR // SIDR_REQ, SIDR_REP
	opMisc // NOTIFY, INIT_QP_ATTR, ATTR_ID, DESTROY_ID
	opGetEvent
	opPoll // POLL, READ
	opInterrupt
	opRelease
	opOther // clock, raw write
	opCount
)

type devEnv struct {
	t     *testing.T
	s     *fuzzStack
	in    []byte
	files []*dfile
}

type dfile struct {
	f       *cusetest.File
	ids     []uint32          // live ids, in creation order
	ever    map[uint32]bool   // every id the file has owned
	pending []*dpending       // GET_EVENTs that may wait
	ctx     map[uint32]uint64 // cookies
}

type dpending struct {
	p    *cusetest.Pending
	resp uint64 // GET_EVENT's response buffer
	get  abi.EventGet
	intr *cusetest.Pending // the INTERRUPT sent for it, if any
}

// signal sends INTERRUPT for dp as the kernel does for a signalled caller:
// once, and again only after the daemon answered EAGAIN (it did not know
// the request yet, or any more). A second signal while one is outstanding
// sends nothing.
func (d *devEnv) signal(dp *dpending) {
	if dp.intr != nil {
		if r, ok := dp.intr.WaitFor(0); !ok || r.Errno != unix.EAGAIN {
			if ok {
				d.t.Fatalf("INTERRUPT answered %v; only EAGAIN is allowed", r.Errno)
			}
			return
		}
	}
	dp.intr = d.s.k.Interrupt(dp.p.Unique)
}

// arg takes the next input byte (0 when the input is used up).
func (d *devEnv) arg() byte {
	if len(d.in) == 0 {
		return 0
	}
	b := d.in[0]
	d.in = d.in[1:]
	return b
}

func (d *devEnv) arg32() uint32 {
	return uint32(d.arg()) | uint32(d.arg())<<8 | uint32(d.arg())<<16 | uint32(d.arg())<<24
}

func (d *devEnv) file() *dfile {
	if len(d.files) == 0 {
		return nil
	}
	return d.files[int(d.arg())%len(d.files)]
}

// id picks one of f's ids, or (one pick in eight) an arbitrary number:
// another file's id, a freed one, one never allocated.
func (d *devEnv) id(f *dfile) uint32 {
	a := d.arg()
	if len(f.ids) == 0 || a&7 == 7 {
		return uint32(a >> 3)
	}
	return f.ids[int(a>>3)%len(f.ids)]
}

// buf allocates n bytes of caller memory holding input bytes, or (when
// bad) returns an unmapped address, or 0 for n == 0 one time in two.
func (d *devEnv) buf(n int, bad bool) uint64 {
	if bad {
		return d.s.cm.Bad()
	}
	a := d.s.cm.Alloc(max(n, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = d.arg()
	}
	d.s.cm.Write(a, b)
	return a
}

func (d *devEnv) path(bad bool) uint64 {
	if bad {
		return d.s.cm.Bad()
	}
	p := d.s.LoopbackPath
	rec, _ := p()
	if d.arg()&1 == 1 {
		rec = d.s.path(d.s.a, d.s.b)
	}
	a := d.s.cm.Alloc(abi.PathRecSize)
	b := make([]byte, abi.PathRecSize)
	rec.Encode(b)
	d.s.cm.Write(a, b)
	return a
}

var sids = []uint64{wsidListen, wsidListen + 1, wsidAccept, wsidIgnore}

func (d *devEnv) sid() uint64 { return sids[int(d.arg())%len(sids)] }

// write sends one ucm command and waits for its answer; a successful
// write must return the whole length.
func (d *devEnv) write(f *dfile, cmd abi.Cmd, out uint16, s abi.Struct) unix.Errno {
	b := make([]byte, abi.HeaderSize+s.Size())
	h := abi.Header{Cmd: cmd, In: uint16(s.Size()), Out: out}
	h.Encode(b)
	s.Encode(b[abi.HeaderSize:])
	e := d.send(f, b)
	if fuzzDebug {
		d.t.Logf("%v %+v: %v", cmd, s, e)
	}
	return e
}

func (d *devEnv) send(f *dfile, b []byte) unix.Errno {
	r := d.await(f.f.WriteAsync(d.s.caller, b), "WRITE")
	if r.Errno == 0 && r.Size() != len(b) {
		d.t.Fatalf("WRITE of %d bytes returned %d", len(b), r.Size())
	}
	return r.Errno
}

func (d *devEnv) await(p *cusetest.Pending, what string) cusetest.Reply {
	r, ok := p.WaitFor(fuzzWait)
	if !ok {
		d.t.Fatalf("%s (unique %d) not answered within %v: hung", what, p.Unique, fuzzWait)
	}
	return r
}

func (d *devEnv) forget(f *dfile, id uint32) {
	for i, x := range f.ids {
		if x == id {
			f.ids = append(f.ids[:i], f.ids[i+1:]...)
			return
		}
	}
}

// step runs one operation of the program.
func (d *devEnv) step() {
	op := d.arg() % opCount
	if fuzzDebug {
		d.t.Logf("op %d", op)
	}
	if op == opOpen {
		if len(d.files) < 4 {
			flags := uint32(unix.O_RDWR)
			if d.arg()&1 == 1 {
				flags |= unix.O_NONBLOCK
			}
			// Open waits at most the kernel's timeout, fuzzWait.
			kf, errno := d.s.k.Open(d.s.caller, flags)
			if errno != 0 {
				d.t.Fatalf("OPEN: %v", errno)
			}
			d.files = append(d.files, &dfile{f: kf, ever: map[uint32]bool{}, ctx: map[uint32]uint64{}})
		}
		return
	}
	f := d.file()
	if f == nil {
		return
	}
	a := d.arg()
	bad := a&0x80 != 0 && a&0x40 != 0 // one pointer in four is unmapped
	switch op {
	case opCreate:
		if len(f.ids) >= 16 {
			return
		}
		resp := d.s.cm.Alloc(abi.CreateIDRespSize)
		if bad {
			resp = d.s.cm.Bad()
		}
		uid := uint64(d.arg())
		if d.write(f, abi.CmdCreateID, uint16(abi.CmdCreateID.OutLen()), &abi.CreateID{UID: uid, Response: resp}) == 0 && !bad {
			var r abi.CreateIDResp
			r.Decode(d.s.cm.Read(resp, abi.CreateIDRespSize))
			d.owns(f, r.ID, uid)
		}
	case opListen:
		mask := uint64(0)
		if a&1 == 1 {
			mask = ^uint64(0)
		}
		d.write(f, abi.CmdListen, 0, &abi.Listen{ID: d.id(f), ServiceID: d.sid(), ServiceMask: mask})
	case opREQ:
		r := &abi.REQ{
			ID: d.id(f), QPN: d.arg32() & 0xffffff, QPType: abi.QPType(d.arg() % 4), PSN: d.arg32(), SID: d.sid(),
			PrimaryPath: d.path(bad), ResponderResources: d.arg(), InitiatorDepth: d.arg(),
			RemoteCMResponseTimeout: d.arg() % 32, LocalCMResponseTimeout: d.arg() % 32,
			RetryCount: d.arg() % 8, RNRRetryCount: d.arg() % 8, MaxCMRetries: d.arg() % 16,
			FlowControl: a & 1, SRQ: a >> 1 & 1, PeerToPeer: boolByte(a&0x3c == 0x3c),
		}
		if a&4 != 0 {
			r.AlternatePath = d.path(false)
		}
		r.Len = d.arg() % 100
		r.Data = d.buf(int(r.Len), false)
		d.write(f, abi.CmdSendREQ, 0, r)
	case opREP:
		r := &abi.REP{UID: uint64(d.arg()), ID: d.id(f), QPN: d.arg32() & 0xffffff, PSN: d.arg32(),
			ResponderResources: d.arg(), InitiatorDepth: d.arg(), FailoverAccepted: d.arg() % 3,
			FlowControl: a & 1, RNRRetryCount: d.arg() % 8, SRQ: a >> 1 & 1}
		r.Len = d.arg() % 200
		r.Data = d.buf(int(r.Len), bad)
		if d.write(f, abi.CmdSendREP, 0, r) == 0 {
			f.ctx[r.ID] = r.UID
		}
	case opPrivData:
		cmd := []abi.Cmd{abi.CmdSendRTU, abi.CmdSendDREQ, abi.CmdSendDREP}[int(a&3)%3]
		p := &abi.PrivateData{ID: d.id(f), Len: d.arg() % 230}
		p.Data = d.buf(int(p.Len), bad)
		d.write(f, cmd, 0, p)
	case opInfo:
		cmd := abi.CmdSendREJ
		if a&1 == 1 {
			cmd = abi.CmdSendAPR
		}
		in := &abi.Info{ID: d.id(f), Status: uint32(d.arg()), InfoLen: d.arg() % 80, DataLen: d.arg() % 160}
		in.Info = d.buf(int(in.InfoLen), bad)
		in.Data = d.buf(int(in.DataLen), false)
		d.write(f, cmd, 0, in)
	case opMRA:
		m := &abi.MRA{ID: d.id(f), Timeout: d.arg(), Len: d.arg() % 230}
		m.Data = d.buf(int(m.Len), bad)
		d.write(f, abi.CmdSendMRA, 0, m)
	case opLAP:
		l := &abi.LAP{ID: d.id(f), Path: d.path(bad), Len: d.arg() % 180}
		l.Data = d.buf(int(l.Len), false)
		d.write(f, abi.CmdSendLAP, 0, l)
	case opSIDR:
		if a&1 == 0 {
			r := &abi.SIDRREQ{ID: d.id(f), Timeout: uint32(d.arg()) * 10, SID: d.sid(), Path: d.path(bad),
				MaxCMRetries: d.arg() % 16, Len: d.arg() % 220}
			r.Data = d.buf(int(r.Len), false)
			d.write(f, abi.CmdSendSIDRREQ, 0, r)
		} else {
			r := &abi.SIDRREP{ID: d.id(f), QPN: d.arg32(), QKey: d.arg32(), Status: uint32(d.arg() % 8),
				InfoLen: d.arg() % 80, DataLen: d.arg() % 150}
			r.Info = d.buf(int(r.InfoLen), bad)
			r.Data = d.buf(int(r.DataLen), false)
			d.write(f, abi.CmdSendSIDRREP, 0, r)
		}
	case opMisc:
		id := d.id(f)
		switch a % 4 {
		case 0:
			d.write(f, abi.CmdNotify, 0, &abi.Notify{ID: id, Event: abi.IBEvent(d.arg() % 20)})
		case 1:
			resp := d.s.cm.Alloc(abi.QPAttrSize)
			d.write(f, abi.CmdInitQPAttr, uint16(abi.CmdInitQPAttr.OutLen()), &abi.InitQPAttr{Response: resp, ID: id, QPState: abi.QPState(d.arg() % 8)})
		case 2:
			resp := d.s.cm.Alloc(abi.AttrIDRespSize)
			d.write(f, abi.CmdAttrID, uint16(abi.CmdAttrID.OutLen()), &abi.AttrID{Response: resp, ID: id})
		case 3:
			resp := d.s.cm.Alloc(abi.DestroyIDRespSize)
			if bad {
				resp = d.s.cm.Bad()
			}
			// The kernel destroys the id even when the copy faults.
			if e := d.write(f, abi.CmdDestroyID, uint16(abi.CmdDestroyID.OutLen()), &abi.DestroyID{Response: resp, ID: id}); e == 0 || (bad && e == unix.EFAULT) {
				d.forget(f, id)
			}
		}
	case opGetEvent:
		if len(f.pending) >= 4 {
			return
		}
		dp := &dpending{}
		dp.get = abi.EventGet{Response: d.s.cm.Alloc(abi.EventRespSize), DataLen: d.arg(), InfoLen: d.arg()}
		dp.get.Data = d.s.cm.Alloc(max(int(dp.get.DataLen), 1))
		dp.get.Info = d.s.cm.Alloc(max(int(dp.get.InfoLen), 1))
		if bad {
			dp.get.Response = d.s.cm.Bad()
		}
		dp.resp = dp.get.Response
		b := make([]byte, abi.HeaderSize+abi.EventGetSize)
		h := abi.Header{Cmd: abi.CmdEvent, In: abi.EventGetSize, Out: abi.EventRespSize}
		h.Encode(b)
		dp.get.Encode(b[abi.HeaderSize:])
		dp.p = f.f.WriteAsync(d.s.caller, b)
		if f.f.Flags&unix.O_NONBLOCK != 0 {
			// Never waits: take the answer now, so that later steps
			// know the ids it names.
			d.event(f, dp, d.await(dp.p, "non-blocking GET_EVENT"))
			return
		}
		// A waiting one answers at once if an event is queued.
		dp.p.WaitFor(time.Millisecond)
		f.pending = append(f.pending, dp)
	case opPoll:
		if a&1 == 0 {
			d.await(f.f.PollAsync(d.s.caller, unix.POLLIN|unix.POLLOUT, uint32(a>>1&1)), "POLL")
			d.drainNotes()
		} else if f.f.Flags&unix.O_NONBLOCK != 0 {
			// read(2) on ucm: EINVAL or nothing; never waits.
			d.await(f.f.ReadAsync(d.s.caller, int(d.arg())), "READ")
		}
	case opInterrupt:
		if len(f.pending) > 0 {
			d.signal(f.pending[int(a)%len(f.pending)])
		}
	case opRelease:
		d.release(f)
	case opOther:
		if a&1 == 0 {
			d.s.clk.Advance([]time.Duration{time.Millisecond, 100 * time.Millisecond, 2 * time.Second, time.Minute}[a>>1&3])
		} else {
			n := int(d.arg()) % 80
			b := make([]byte, 0, n)
			for range n {
				b = append(b, d.arg())
			}
			if len(b) >= abi.HeaderSize {
				switch binary.NativeEndian.Uint32(b) {
				case uint32(abi.CmdEvent):
					return // a raw GET_EVENT could wait; opGetEvent covers it
				case uint32(abi.CmdDestroyID):
					// A raw DESTROY_ID (a short one reads its id as 0) can
					// destroy an id the model holds; opMisc covers it.
					return
				}
			}
			d.send(f, b)
		}
	}
}

// drainNotes discards the poll wake-ups the server sent so far.
func (d *devEnv) drainNotes() {
	for {
		select {
		case <-d.s.k.Notifications():
		default:
			return
		}
	}
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (d *devEnv) owns(f *dfile, id uint32, uid uint64) {
	for _, o := range d.files {
		for _, x := range o.ids {
			if x == id {
				d.t.Fatalf("id %d handed out while another file (or this one) owns it", id)
			}
		}
	}
	f.ids = append(f.ids, id)
	f.ever[id] = true
	f.ctx[id] = uid
}

// reap handles the GET_EVENTs that have been answered.
func (d *devEnv) reap() {
	for _, f := range d.files {
		d.reapFile(f, false)
	}
}

// reapFile handles f's answered GET_EVENTs; with wait, it interrupts the
// others and waits for them.
func (d *devEnv) reapFile(f *dfile, wait bool) {
	keep := f.pending[:0]
	for _, dp := range f.pending {
		var r cusetest.Reply
		if wait {
			r = d.interrupt(dp)
		} else if dp.p.Answered() {
			r, _ = dp.p.WaitFor(0)
		} else {
			keep = append(keep, dp)
			continue
		}
		d.event(f, dp, r)
	}
	f.pending = keep
}

func (d *devEnv) event(f *dfile, dp *dpending, r cusetest.Reply) {
	if r.Errno != 0 {
		return
	}
	if r.Size() != abi.HeaderSize+abi.EventGetSize {
		d.t.Fatalf("GET_EVENT returned %d", r.Size())
	}
	if dp.resp == d.s.cm.Bad() {
		d.t.Fatalf("GET_EVENT into unmapped memory succeeded")
	}
	var ev abi.EventResp
	ev.Decode(d.s.cm.Read(dp.resp, abi.EventRespSize))
	if fuzzDebug {
		d.t.Logf("event %v id %d uid %#x", ev.Event, ev.ID, ev.UID)
	}
	if ev.Event > abi.CMSIDRREPReceived {
		d.t.Fatalf("event type %d", ev.Event)
	}
	if ev.Present&^(abi.PresData|abi.PresInfo|abi.PresPrimary|abi.PresAlternate) != 0 {
		d.t.Fatalf("%v: present %#x", ev.Event, ev.Present)
	}
	if ev.Event == abi.CMREQReceived || ev.Event == abi.CMSIDRREQReceived {
		d.owns(f, ev.ID, ev.UID)
		return
	}
	if !f.ever[ev.ID] {
		d.t.Fatalf("%v for id %d, which this file never owned", ev.Event, ev.ID)
	}
}

// interrupt interrupts dp until it is answered (see signal).
func (d *devEnv) interrupt(dp *dpending) cusetest.Reply {
	end := time.Now().Add(fuzzWait)
	for {
		if r, ok := dp.p.WaitFor(0); ok {
			return r
		}
		d.signal(dp)
		if r, ok := dp.p.WaitFor(20 * time.Millisecond); ok {
			return r
		}
		if fuzzDebug {
			d.t.Logf("GET_EVENT unique %d still waiting after its INTERRUPT", dp.p.Unique)
		}
		if time.Now().After(end) {
			d.t.Fatalf("GET_EVENT (unique %d) not answered within %v of its INTERRUPT: hung", dp.p.Unique, fuzzWait)
		}
	}
}

// release interrupts what is pending on f, waits for it, and releases f,
// as the kernel does when a process with a blocked reader is killed.
func (d *devEnv) release(f *dfile) {
	d.reapFile(f, true)
	r := d.await(f.f.ReleaseAsync(), "RELEASE")
	if r.Errno != 0 {
		d.t.Fatalf("RELEASE: %v", r.Errno)
	}
	for i, o := range d.files {
		if o == f {
			d.files = append(d.files[:i], d.files[i+1:]...)
			break
		}
	}
}

func (d *devEnv) teardown() {
	for len(d.files) > 0 && !d.t.Failed() {
		d.release(d.files[0])
	}
	d.s.destroyPeers()
}

// prog builds FuzzDeviceCUSE programs for the seeds: each method emits
// the bytes its step consumes, in step's order.
type prog []byte

func (p *prog) emit(b ...byte) *prog { *p = append(*p, b...); return p }

func u32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// pick selects the k-th live id of the file.
func pick(k int) byte { return byte(k << 3) }

func (p *prog) open(nonblock bool) *prog { return p.emit(opOpen, boolByte(nonblock)) }

func (p *prog) create(file byte, uid byte) *prog { return p.emit(opCreate, file, 0, uid) }

func (p *prog) listen(file, id, sid byte) *prog { return p.emit(opListen, file, 0, id, sid) }

// req sends an RC REQ from id to service sid, over the loopback path or
// to the peer, with short timeouts (2^14 x 4 us = 65 ms) and pd.
func (p *prog) req(file, id, sid byte, toPeer bool, pd ...byte) *prog {
	p.emit(opREQ, file, 0, id)
	p.emit(u32(0x100 + uint32(id))...)
	p.emit(2)            // RC
	p.emit(u32(0x55)...) // PSN
	p.emit(sid, boolByte(toPeer), 1, 1, 14, 14, 3, 7, 3, byte(len(pd)))
	return p.emit(pd...)
}

func (p *prog) rep(file, id, uid byte, pd ...byte) *prog {
	p.emit(opREP, file, 0, uid, id)
	p.emit(u32(0x200 + uint32(id))...)
	p.emit(u32(0x66)...)
	p.emit(1, 1, 0, 7, byte(len(pd)))
	return p.emit(pd...)
}

// pd sends RTU (which 0), DREQ (1) or DREP (2).
func (p *prog) pd(file, which, id byte, pd ...byte) *prog {
	return p.emit(append([]byte{opPrivData, file, which, id, byte(len(pd))}, pd...)...)
}

func (p *prog) rej(file, id, reason byte) *prog {
	return p.emit(opInfo, file, 0, id, reason, 0, 0)
}

func (p *prog) mra(file, id, timeout byte) *prog { return p.emit(opMRA, file, 0, id, timeout, 0) }

func (p *prog) lap(file, id byte) *prog { return p.emit(opLAP, file, 0, id, 0, 0) }

func (p *prog) sidrREQ(file, id, sid byte, toPeer bool) *prog {
	return p.emit(opSIDR, file, 0, id, 10, sid, boolByte(toPeer), 3, 0)
}

func (p *prog) sidrREP(file, id, status byte) *prog {
	p.emit(opSIDR, file, 1, id)
	p.emit(u32(0x300)...)
	p.emit(u32(0x11111111)...)
	return p.emit(status, 0, 0)
}

func (p *prog) attr(file, id byte) *prog    { return p.emit(opMisc, file, 2, id) }
func (p *prog) qpattr(file, id byte) *prog  { return p.emit(opMisc, file, 1, id, 2) }
func (p *prog) destroy(file, id byte) *prog { return p.emit(opMisc, file, 3, id) }
func (p *prog) get(file byte) *prog         { return p.emit(opGetEvent, file, 0, 255, 255) }
func (p *prog) poll(file byte) *prog        { return p.emit(opPoll, file, 2) }
func (p *prog) intr(file byte) *prog        { return p.emit(opInterrupt, file, 0) }
func (p *prog) release(file byte) *prog     { return p.emit(opRelease, file, 0) }

// advance moves the clock by 1 ms, 100 ms, 2 s or 1 min (k = 0..3).
func (p *prog) advance(k byte) *prog { return p.emit(opOther, 0, k<<1) }

func (p *prog) raw(file byte, b ...byte) *prog {
	return p.emit(append([]byte{opOther, file, 1, byte(len(b))}, b...)...)
}

// deviceSeeds are programs that reach the interesting states: loopback
// connect and accept, connect to the peer, blocking GET_EVENT then
// interrupt, release with ids in every state.
func deviceSeeds() [][]byte {
	var seeds [][]byte
	add := func(p *prog) { seeds = append(seeds, *p) }

	// Loopback on one non-blocking file: listen (id 0), connect (id 1),
	// take the REQ (new id 2), REP, RTU, DREQ, DREP.
	add(new(prog).open(true).create(0, 0x11).listen(0, pick(0), 0).create(0, 0x22).
		req(0, pick(1), 0, false, 'h', 'i').get(0).rep(0, pick(2), 0x33, 'o', 'k').get(0).
		pd(0, 0, pick(1)).get(0).pd(0, 1, pick(1), 'b', 'y', 'e').get(0).pd(0, 2, pick(2)).get(0).
		advance(3).get(0).get(0).attr(0, pick(1)).destroy(0, pick(1)).destroy(0, pick(0)))
	// A blocking GET_EVENT, interrupted; then released.
	add(new(prog).open(false).get(0).intr(0).release(0))
	// Two blocking files, getters waiting when the REQ and the REP come;
	// released with the connection half open.
	add(new(prog).open(false).open(false).create(0, 1).listen(0, pick(0), 1).get(0).
		create(1, 2).req(1, pick(0), 1, false).get(1).advance(0).rep(0, pick(1), 3).
		poll(0).poll(1).release(1).advance(2).release(0))
	// Connect to the peer, which accepts; RTU, then DREQ that times out.
	add(new(prog).open(true).create(0, 5).req(0, pick(0), 2, true).get(0).pd(0, 0, pick(0)).
		pd(0, 1, pick(0)).advance(1).advance(2).get(0).get(0).qpattr(0, pick(0)))
	// REQ to the peer, which ignores it: REQ_ERROR after the retries; MRA,
	// LAP, REJ on ids in the wrong states.
	add(new(prog).open(true).create(0, 1).req(0, pick(0), 3, true).advance(2).advance(2).advance(2).get(0).
		mra(0, pick(0), 20).lap(0, pick(0)).rej(0, pick(0), 28).get(0))
	// SIDR: to a loopback listener (answered by SIDR_REP) and to the peer.
	add(new(prog).open(true).create(0, 1).listen(0, pick(0), 0).create(0, 2).sidrREQ(0, pick(1), 0, false).get(0).
		sidrREP(0, pick(2), 0).get(0).create(0, 3).sidrREQ(0, pick(3), 3, true).advance(2).get(0))
	// Loopback REQ, then the listener is destroyed and the file released
	// with the connecting id mid-handshake; MRA on the REQ.
	add(new(prog).open(true).open(true).create(0, 1).listen(0, pick(0), 0).create(1, 2).req(1, pick(0), 0, false).
		get(0).mra(0, pick(1), 31).get(1).destroy(0, pick(0)).rej(0, pick(1), 28).get(1).release(0).advance(3).get(1))
	// Raw writes: a truncated SEND_REQ, garbage.
	add(new(prog).open(true).raw(0, 5, 0, 0, 0, 64, 0, 0, 0, 1, 2, 3).raw(0, 0xff, 0xff, 0xff, 0xff, 1))
	return seeds
}
