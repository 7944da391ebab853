package ucm_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/hw"
	"golang.org/x/sys/unix"
)

// Services of the wire fuzz target.
const (
	wfTargets   = 6
	wfChunks    = 4
	wfChunkSize = 1 + hw.MADSize
)

// FuzzWireEvents sends arbitrary and mutated CM MADs from the wire (a
// second simulated device, through a send-only agent on its port) into a
// CM whose client, through the fake CUSE kernel and a real ucm.Device,
// has a listening id, an active and a passive established connection, a
// REQ_SENT id and an SIDR_REQ_SENT id. Each input is up to four chunks of
// one control byte and one MAD; the control byte may patch the MAD's comm
// IDs (or service ID) to those of a live connection, so that mutations
// reach every state, may send it twice, and may advance the clock after
// it. Seeds: every MAD the Linux kernel's CM sent in the captures of
// cmcore/wire/testdata, and one of each message cmcore encodes.
//
// Invariants: no panic and no hang (every request, every MAD handled
// within fuzzWait); every event GET_EVENT delivers names an id of the file
// (or a new one, for a REQ), carries its cookie and a known type; ATTR_ID
// answers for every id; DESTROY_ID's events_reported equals the events
// delivered for the id; after close nothing is left (ids, files, CM ids,
// timers, goroutines: newFuzzStack's cleanup).
func FuzzWireEvents(f *testing.F) {
	for _, seed := range wireSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > wfChunks*wfChunkSize {
			data = data[:wfChunks*wfChunkSize]
		}
		w := newWireEnv(t)
		for len(data) > 0 {
			n := min(len(data), wfChunkSize)
			w.inject(data[0], data[1:n])
			data = data[n:]
		}
		w.drain()
		w.teardown()
	})
}

// wireEnv is FuzzWireEvents' world for one input.
type wireEnv struct {
	t   *testing.T
	s   *fuzzStack
	inj hw.Endpoint // b's port, send-only
	dst hw.Address  // a's CM agent

	l, c  *conformance.Client
	files []*wfile

	// targets[i] is what control byte target i+1 patches in.
	targets [wfTargets]wtarget
}

type wtarget struct {
	local, remote uint32 // a's and b's comm IDs (for SIDR: a's request id)
	sid           uint64
	// REQ: b's port to a's as the primary path (LIDs, GIDs), which a
	// checks against its own port before its listener sees the REQ.
	bLID, aLID uint16
	bGID, aGID hw.GID
}

// wfile is one open file of a and what the test knows of it.
type wfile struct {
	name     string
	c        *conformance.Client
	owned    map[uint32]uint64 // id -> cookie
	reported map[uint32]uint32 // id -> events delivered for it
}

func newWireEnv(t *testing.T) *wireEnv {
	w := &wireEnv{t: t}
	s := newFuzzStack(t)
	w.s = s
	var err error
	w.inj, err = s.b.Port(1).OpenMAD(hw.Registration{MgmtClass: wire.MgmtClassCM, ClassVersion: wire.ClassVersion})
	must(t, err)
	t.Cleanup(func() { w.inj.Close() })
	aa, err := s.a.Port(1).Attr()
	must(t, err)
	w.dst = hw.Address{LID: aa.LID, QPN: 1, QKey: 0x80010000}

	// a: file L listens, file C connects.
	w.l, err = conformance.NewClient(s, true)
	must(t, err)
	w.c, err = conformance.NewClient(s, true)
	must(t, err)
	L := &wfile{name: "L", c: w.l, owned: map[uint32]uint64{}, reported: map[uint32]uint32{}}
	C := &wfile{name: "C", c: w.c, owned: map[uint32]uint64{}, reported: map[uint32]uint32{}}
	w.files = []*wfile{L, C}

	lid := w.create(L, 0x11)
	must(t, w.l.Listen(lid, wsidListen, 0))
	ba := s.cmPath(s.b, s.a)
	w.targets[4] = wtarget{sid: wsidListen, bLID: ba.SLID, aLID: ba.DLID, bGID: ba.SGID, aGID: ba.DGID}

	ab := s.path(s.a, s.b)
	// c1: active, established.
	c1 := w.create(C, 0x21)
	must(t, w.c.SendREQ(w.c.REQ(c1, wsidAccept, ab, 0xa01)))
	w.expect(C, abi.CMREPReceived, c1)
	must(t, w.c.SendPrivateData(abi.CmdSendRTU, c1, nil))
	// c2: active, REQ_SENT (b's listener ignores it).
	c2 := w.create(C, 0x22)
	must(t, w.c.SendREQ(w.c.REQ(c2, wsidIgnore, ab, 0xa02)))
	// c3: SIDR_REQ_SENT.
	c3 := w.create(C, 0x23)
	pa, pn := w.c.Path(ab), uint8(0)
	must(t, w.c.Cmd(abi.CmdSendSIDRREQ, 0, &abi.SIDRREQ{ID: c3, Timeout: 100, SID: wsidIgnore, Path: pa, Len: pn, MaxCMRetries: 3}))
	// n1: passive, established: b connects to L's listener.
	bid := s.peerID()
	must(t, bid.SendREQ(&cmcore.REQParams{
		Primary: s.cmPath(s.b, s.a), ServiceID: wsidListen, QPN: 0xb02, QPType: cmcore.QPTypeRC, StartingPSN: 2,
		ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20,
		RetryCount: 5, RNRRetryCount: 7, MaxCMRetries: 5,
	}))
	ev := w.expect(L, abi.CMREQReceived, 0)
	n1 := ev.ID
	must(t, w.l.SendREP(&abi.REP{UID: 0x31, ID: n1, QPN: 0xa03, PSN: 3, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}))
	L.owned[n1] = 0x31
	w.expect(L, abi.CMRTUReceived, n1)
	// Both of c2's and c3's requests must have reached b.
	w.settle()

	for i, x := range []struct {
		f  *wfile
		id uint32
	}{{C, c1}, {C, c2}, {L, n1}, {C, c3}} {
		a, err := x.f.c.AttrID(x.id)
		must(t, err)
		w.targets[i] = wtarget{local: a.LocalID, remote: a.RemoteID}
	}
	// b's comm IDs, which a's ATTR_ID does not know yet for c2 (REQ_SENT)
	// and c3 (SIDR).
	for _, id := range s.peers() {
		at := id.Attr()
		for i := range w.targets {
			if w.targets[i].local != 0 && at.RemoteCommID == w.targets[i].local && w.targets[i].remote == 0 {
				w.targets[i].remote = at.LocalCommID
			}
		}
	}
	w.targets[5] = w.targets[4]
	w.targets[5].local, w.targets[5].remote = w.targets[0].local, w.targets[0].remote
	return w
}

// create is CREATE_ID on f with cookie uid.
func (w *wireEnv) create(f *wfile, uid uint64) uint32 {
	id, err := f.c.CreateID(uid)
	must(w.t, err)
	f.owned[id] = uid
	return id
}

// get is one non-blocking GET_EVENT on f, checked and counted; ok is false
// on EAGAIN.
func (w *wireEnv) get(f *wfile) (conformance.Event, bool) {
	ev, err := f.c.GetEvent()
	if conformance.Errno(err) == unix.EAGAIN {
		return ev, false
	}
	if err != nil {
		w.t.Fatalf("file %s: GET_EVENT: %v", f.name, err)
	}
	checkEvent(w.t, ev, f.owned)
	if fuzzDebug {
		w.t.Logf("file %s: %v id %d uid %#x", f.name, ev.Event, ev.ID, ev.UID)
	}
	switch ev.Event {
	case abi.CMREQReceived, abi.CMSIDRREQReceived:
		// Counted on the listener, whose cookie the event carries.
		for id, uid := range f.owned {
			if uid == ev.UID {
				f.reported[id]++
				break
			}
		}
		f.owned[ev.ID] = ev.UID
	default:
		f.reported[ev.ID]++
	}
	return ev, true
}

// expect waits for the next event of f and checks its type (and id, if
// not 0).
func (w *wireEnv) expect(f *wfile, typ abi.CMEvent, id uint32) conformance.Event {
	w.t.Helper()
	end := time.Now().Add(fuzzWait)
	for {
		if ev, ok := w.get(f); ok {
			if ev.Event != typ || (id != 0 && ev.ID != id) {
				w.t.Fatalf("file %s: got %v on id %d, want %v on %d", f.name, ev.Event, ev.ID, typ, id)
			}
			return ev
		}
		if time.Now().After(end) {
			w.t.Fatalf("file %s: no %v within %v", f.name, typ, fuzzWait)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// settle waits until both CMs have handled every MAD the fabric queued to
// them and delivered every event: a MAD that fails to decode is sent to
// each as a barrier, since each port's receive loop is sequential.
func (w *wireEnv) settle() {
	w.t.Helper()
	var probe hw.MAD // attribute 0: no CM message
	probe[0], probe[1], probe[2], probe[3] = 1, wire.MgmtClassCM, wire.ClassVersion, wire.MethodSend
	must(w.t, w.inj.Send(context.Background(), w.dst, &probe))
	// Each port's receive loop is sequential: once the CM has counted as
	// many MADs as the fabric queued to its port, the probe (queued last)
	// and everything before it have been handled.
	w.s.settle()
}

// inject sends mad (zero-padded) as control byte ctl says:
//
//	bits 0-2  target: 0 none; 1..4 c1, c2, n1, c3 (comm IDs, or c3's SIDR
//	          request id); 5 a's listener (REQ/SIDR_REQ service ID, and
//	          the REQ's primary path from b to a); 6 c1 and the listener
//	bit 3     send it twice
//	bits 4-5  then advance the clock by 0, 10 ms, 1 s or 1 min
//	bit 6     leave the MAD header as it is (else: CM class, version 2,
//	          method SEND, base version 1, so that it reaches the CM)
func (w *wireEnv) inject(ctl byte, b []byte) {
	var mad hw.MAD
	copy(mad[:], b)
	if ctl&0x40 == 0 {
		mad[0], mad[1], mad[2], mad[3] = 1, wire.MgmtClassCM, wire.ClassVersion, wire.MethodSend
	}
	if tg := int(ctl & 7); tg > 0 && tg <= wfTargets {
		patch(&mad, w.targets[tg-1])
	}
	copies := 1 + int(ctl>>3&1)
	for range copies {
		m := mad // the fabric may not keep it, but be safe
		if err := w.inj.Send(context.Background(), w.dst, &m); err != nil {
			w.t.Fatalf("inject: %v", err)
		}
	}
	w.settle()
	if d := []time.Duration{0, 10 * time.Millisecond, time.Second, time.Minute}[ctl>>4&3]; d > 0 {
		w.s.clk.Advance(d)
		w.settle()
	}
}

// patch writes target x into the comm ID (or service ID) fields of mad's
// message, by attribute.
func patch(mad *hw.MAD, x wtarget) {
	d := mad[wire.HeaderSize:]
	switch binary.BigEndian.Uint16(mad[16:]) {
	case wire.AttrREQ:
		if x.sid != 0 {
			binary.BigEndian.PutUint64(d[8:], x.sid)
		}
		if x.aLID != 0 { // the primary path (IBTA table 106, offset 52)
			binary.BigEndian.PutUint16(d[52:], x.bLID)
			binary.BigEndian.PutUint16(d[54:], x.aLID)
			copy(d[56:72], x.bGID[:])
			copy(d[72:88], x.aGID[:])
		}
	case wire.AttrSIDRREQ:
		if x.sid != 0 {
			binary.BigEndian.PutUint64(d[8:], x.sid)
		}
	case wire.AttrSIDRREP:
		if x.local != 0 {
			binary.BigEndian.PutUint32(d[0:], x.local)
		}
	default: // MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR: local, remote
		if x.local != 0 || x.remote != 0 {
			binary.BigEndian.PutUint32(d[0:], x.remote)
			binary.BigEndian.PutUint32(d[4:], x.local)
		}
	}
}

// drain takes every queued event of every file.
func (w *wireEnv) drain() {
	for _, f := range w.files {
		for {
			if _, ok := w.get(f); !ok {
				break
			}
		}
	}
}

// teardown destroys every id the files own (checking ATTR_ID and
// events_reported), then b's ids, then closes the files.
func (w *wireEnv) teardown() {
	t := w.t
	for _, f := range w.files {
		for id := range f.owned {
			if _, err := f.c.AttrID(id); err != nil {
				t.Fatalf("file %s: ATTR_ID %d: %v", f.name, id, err)
			}
		}
		// Events queued meanwhile are not counted by the kernel either:
		// take them first, then destroy.
		for {
			if _, ok := w.get(f); !ok {
				break
			}
		}
		for id := range f.owned {
			n, err := f.c.DestroyID(id)
			if err != nil {
				t.Fatalf("file %s: DESTROY_ID %d: %v", f.name, id, err)
			}
			// A REQ may have arrived for a listener after the drain
			// and been counted on it without our knowing: events_reported
			// counts delivered events only, so never fewer than we took.
			if n != f.reported[id] {
				t.Fatalf("file %s: DESTROY_ID %d: events_reported %d, %d delivered", f.name, id, n, f.reported[id])
			}
		}
	}
	w.s.destroyPeers()
	for _, f := range w.files {
		must(t, f.c.Close())
	}
}

// wireSeeds: the kernel's MADs from cmcore/wire/testdata, each with the
// control bytes that aim it at the matching state, and one message of
// each kind as cmcore encodes it.
func wireSeeds(tb testing.TB) [][]byte {
	var mads []hw.MAD
	files, _ := filepath.Glob("../cmcore/wire/testdata/*.hex")
	if len(files) == 0 {
		tb.Fatal("no golden MADs in ../cmcore/wire/testdata")
	}
	for _, name := range files {
		mads = append(mads, readHexMAD(tb, name))
	}
	for _, m := range []wire.Message{
		&wire.REQ{LocalCommID: 1, ServiceID: wsidListen, LocalCAGUID: 0x99, LocalQPN: 0x123, StartingPSN: 1,
			RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, MaxCMRetries: 5, PartitionKey: 0xffff, PathMTU: 4,
			Primary: wire.Path{LocalLID: 2, RemoteLID: 1, PacketRate: 3, SubnetLocal: true, LocalACKTimeout: 14}},
		&wire.MRA{ServiceTimeout: 20},
		&wire.REJ{Reason: wire.REJConsumerDefined, PrivateData: []byte("no")},
		&wire.REP{LocalQPN: 0x77, StartingPSN: 5, LocalCAGUID: 0x99, TargetACKDelay: 15},
		&wire.RTU{},
		&wire.DREQ{RemoteQPN: 0xa01},
		&wire.DREP{},
		&wire.LAP{},
		&wire.APR{},
		&wire.SIDRREQ{RequestID: 7, ServiceID: wsidListen, PartitionKey: 0xffff},
		&wire.SIDRREP{Status: 1},
	} {
		var mad hw.MAD
		if err := wire.Encode(&mad, 0x42, m); err != nil {
			tb.Fatal(err)
		}
		mads = append(mads, mad)
	}
	var seeds [][]byte
	for _, mad := range mads {
		var ctls []byte
		switch binary.BigEndian.Uint16(mad[16:]) {
		case wire.AttrREQ, wire.AttrSIDRREQ:
			ctls = []byte{5, 5 | 0x08, 0}
		case wire.AttrSIDRREP:
			ctls = []byte{4}
		case wire.AttrREP, wire.AttrMRA:
			ctls = []byte{2, 1, 2 | 0x20}
		case wire.AttrREJ:
			ctls = []byte{2, 1, 3}
		default:
			ctls = []byte{1, 3, 1 | 0x08 | 0x10}
		}
		for _, c := range ctls {
			seeds = append(seeds, append([]byte{c}, mad[:]...))
		}
	}
	// Two in a row: a DREQ into c1, then its duplicate a minute later.
	var dreq hw.MAD
	if err := wire.Encode(&dreq, 9, &wire.DREQ{RemoteQPN: 0xa01}); err != nil {
		tb.Fatal(err)
	}
	two := append([]byte{1}, dreq[:]...)
	seeds = append(seeds, append(two, append([]byte{1 | 0x30}, dreq[:]...)...))
	return seeds
}

// readHexMAD parses a testdata MAD: "OFF: hex groups" lines at MAD
// offsets, "#" comments, "A..B: XX" fills.
func readHexMAD(tb testing.TB, name string) hw.MAD {
	var mad hw.MAD
	f, err := os.Open(name)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	hexv := func(s string) int {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 16, 32)
		if err != nil {
			tb.Fatalf("%s: bad hex %q", name, s)
		}
		return int(v)
	}
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		where, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		val = strings.ReplaceAll(strings.TrimSpace(val), " ", "")
		if a, b, fill := strings.Cut(where, ".."); fill {
			for i := hexv(a); i <= hexv(b) && i < len(mad); i++ {
				mad[i] = byte(hexv(val))
			}
			continue
		}
		off := hexv(where)
		for i := 0; i+1 < len(val) && off+i/2 < len(mad); i += 2 {
			mad[off+i/2] = byte(hexv(val[i : i+2]))
		}
	}
	return mad
}
