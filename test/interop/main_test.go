//go:build interop

// Package interop checks cmcore against the Linux kernel's own CM on the
// wire: it runs in guest B of test/vm/run2.sh (ib_cm not loaded, cmcore over
// hw/umad on rxe0), while guest A runs the kernel's ib_cm/rdma_cm and the
// librdmacm program cmpeer, started on request through the shared dir (see
// guestA.sh). `make interop` (test/interop/run.sh) builds and runs it all.
package interop

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad"
)

// The two guests (run2.sh's MACs and guest-net.sh's addresses). rxe derives
// the node GUID and link-local GID from the MAC (EUI-64).
var (
	ipA = netip.MustParseAddr("192.168.77.1")
	ipB = netip.MustParseAddr("192.168.77.2")
	// A's GIDs: IPv4-mapped (index 1) and link-local (index 0)
	gidAv4 = hw.GID(netip.MustParseAddr("::ffff:192.168.77.1").As16())
	gidAll = hw.GID(netip.MustParseAddr("fe80::5054:ff:fe77:1").As16())
	guidA  = uint64(0x505400fffe770001)
)

var shared = os.Getenv("UCMD_VM_SHARED")

func TestMain(m *testing.M) {
	if os.Getenv("UCMD_VM_ROLE") != "B" || shared == "" {
		fmt.Fprintln(os.Stderr, "interop: runs in guest B of test/vm/run2.sh only: use `make interop`")
		os.Exit(2)
	}
	// A's kernel CM must be up before anything is sent its way
	deadline := time.Now().Add(120 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(shared, "A.ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "interop: guest A never became ready")
			os.Exit(1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	os.Exit(m.Run())
}

// ---- guest A: commands run on request (guestA.sh) ----

var reqSeq struct {
	sync.Mutex
	n int
}

// job is one command running in guest A.
type job struct {
	n      int
	cmd    string
	cursor int // output consumed by waitFor
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// besideTest is the program name built next to the test binary (make
// interop builds ucmd, ucmclient and cmpeer there).
func besideTest(t *testing.T, name string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(exe), name)
}

// runA starts cmpeer with args in guest A.
func runA(t *testing.T, args ...string) *job {
	t.Helper()
	cmd := "exec " + shellQuote(besideTest(t, "cmpeer"))
	for _, a := range args {
		cmd += " " + shellQuote(a)
	}
	reqSeq.Lock()
	n := reqSeq.n
	reqSeq.n++
	tmp := filepath.Join(shared, fmt.Sprintf(".req.%d.tmp", n))
	if err := os.WriteFile(tmp, []byte(cmd+"\n"), 0o644); err != nil {
		reqSeq.Unlock()
		t.Fatal(err)
	}
	err := os.Rename(tmp, filepath.Join(shared, fmt.Sprintf("req.%d", n)))
	reqSeq.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("A[%d]: %s", n, strings.Join(args, " "))
	return &job{n: n, cmd: strings.Join(args, " ")}
}

func (j *job) output() string {
	b, _ := os.ReadFile(filepath.Join(shared, fmt.Sprintf("out.%d", j.n)))
	return string(b)
}

func (j *job) exited() (int, bool) {
	b, err := os.ReadFile(filepath.Join(shared, fmt.Sprintf("rc.%d", j.n)))
	if err != nil {
		return 0, false
	}
	rc, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1, true
	}
	return rc, true
}

// waitFor returns the first complete line after the previous match that
// contains every one of subs.
func (j *job) waitFor(t *testing.T, timeout time.Duration, subs ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := j.output()
		for j.cursor < len(out) {
			nl := strings.IndexByte(out[j.cursor:], '\n')
			if nl < 0 {
				break
			}
			line := out[j.cursor : j.cursor+nl]
			j.cursor += nl + 1
			ok := true
			for _, s := range subs {
				ok = ok && strings.Contains(line, s)
			}
			if ok {
				t.Logf("A[%d] saw: %s", j.n, line)
				return line
			}
		}
		if _, done := j.exited(); done || time.Now().After(deadline) {
			t.Fatalf("A[%d] (%s): no line with %q within %v; output:\n%s", j.n, j.cmd, subs, timeout, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitExit waits for the command to exit and returns its status and output.
func (j *job) waitExit(t *testing.T, timeout time.Duration) (int, string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if rc, done := j.exited(); done {
			return rc, j.output()
		}
		if time.Now().After(deadline) {
			t.Fatalf("A[%d] (%s) still running after %v; output:\n%s", j.n, j.cmd, timeout, j.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// field returns key=value's value from a cmpeer output line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// hexPD is how cmpeer prints private data (hex up to the last non-zero byte).
func hexPD(s string) string { return hex.EncodeToString([]byte(s)) }

// ---- guest B: cmcore over hw/umad on rxe0, with a MAD filter ----

// filter sits between cmcore and the umad endpoint: it counts MADs by
// attribute each way, logs them, and drops the first N sends of chosen
// attributes (the loss scenarios).
type filter struct {
	t     *testing.T
	t0    time.Time
	mu    sync.Mutex
	drop  map[uint16]int // attr → how many more sends to drop
	sent  map[uint16]int // attr → sends passed on
	recv  map[uint16]int
	lost  map[uint16]int
	dumps *os.File
}

func attrOf(m *hw.MAD) uint16 { return uint16(m[16])<<8 | uint16(m[17]) }

var attrNames = map[uint16]string{
	wire.AttrREQ: "REQ", wire.AttrMRA: "MRA", wire.AttrREJ: "REJ", wire.AttrREP: "REP",
	wire.AttrRTU: "RTU", wire.AttrDREQ: "DREQ", wire.AttrDREP: "DREP",
	wire.AttrSIDRREQ: "SIDR_REQ", wire.AttrSIDRREP: "SIDR_REP", wire.AttrLAP: "LAP", wire.AttrAPR: "APR",
}

func attrName(a uint16) string {
	if n, ok := attrNames[a]; ok {
		return n
	}
	return fmt.Sprintf("attr %#04x", a)
}

func (f *filter) note(dir string, m *hw.MAD, count map[uint16]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := attrOf(m)
	count[a]++
	f.t.Logf("%8.3fs %s %s tid %016x", time.Since(f.t0).Seconds(), dir, attrName(a), m[8:16])
	if f.dumps != nil {
		fmt.Fprintf(f.dumps, "# %s %s %s\n%s\n", f.t.Name(), dir, attrName(a), hex.Dump(m[:]))
	}
}

func (f *filter) count(m map[uint16]int, a uint16) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[a]
}

type filterDev struct {
	hw.Device
	f *filter
}

func (d filterDev) Ports() []hw.Port {
	var ps []hw.Port
	for _, p := range d.Device.Ports() {
		ps = append(ps, filterPort{p, d.f})
	}
	return ps
}

type filterPort struct {
	hw.Port
	f *filter
}

func (p filterPort) OpenMAD(reg hw.Registration) (hw.Endpoint, error) {
	ep, err := p.Port.OpenMAD(reg)
	if err != nil {
		return nil, err
	}
	return filterEP{ep, p.f}, nil
}

type filterEP struct {
	hw.Endpoint
	f *filter
}

func (e filterEP) Send(ctx context.Context, dst hw.Address, m *hw.MAD) error {
	f := e.f
	a := attrOf(m)
	f.mu.Lock()
	drop := f.drop[a] > 0
	if drop {
		f.drop[a]--
	}
	f.mu.Unlock()
	if drop {
		f.note("DROPPED", m, f.lost)
		return nil
	}
	f.note("sent", m, f.sent)
	return e.Endpoint.Send(ctx, dst, m)
}

func (e filterEP) Recv(ctx context.Context) (hw.Received, error) {
	r, err := e.Endpoint.Recv(ctx)
	if err == nil {
		e.f.note("recv", &r.MAD, e.f.recv)
	}
	return r, err
}

// ---- events ----

type cmEvent struct {
	typ    cmcore.EventType
	id     *cmcore.ID
	state  cmcore.State
	reason uint16
	pd     []byte
	req    cmcore.REQEventParam
	rep    cmcore.REPEventParam
}

// side is our CM on B's rxe0 with an event log; react runs in the handler.
type side struct {
	cm    *cmcore.CM
	dev   hw.Device
	f     *filter
	ch    chan cmEvent
	mu    sync.Mutex
	types []cmcore.EventType
	react func(ev *cmcore.Event) error
}

// handle runs react; an error from it destroys the id (cmcore.Destroy).
func (s *side) handle(ev *cmcore.Event) cmcore.Outcome {
	var err error
	if s.react != nil {
		err = s.react(ev)
	}
	st, _ := ev.ID.State()
	e := cmEvent{typ: ev.Type, id: ev.ID, state: st, reason: ev.REJ.Reason,
		pd: append([]byte(nil), ev.PrivateData...), req: ev.REQ, rep: ev.REP}
	s.mu.Lock()
	s.types = append(s.types, ev.Type)
	s.mu.Unlock()
	select {
	case s.ch <- e:
	default:
	}
	if err != nil {
		return cmcore.Destroy
	}
	return cmcore.Keep
}

func (s *side) events() []cmcore.EventType {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]cmcore.EventType(nil), s.types...)
}

func (s *side) wait(t *testing.T, want cmcore.EventType, timeout time.Duration) cmEvent {
	t.Helper()
	select {
	case e := <-s.ch:
		if e.typ != want {
			t.Fatalf("event %v (state %v, reason %d), want %v; events %v", e.typ, e.state, e.reason, want, s.events())
		}
		return e
	case <-time.After(timeout):
		t.Fatalf("no %v within %v; events %v, stats %+v", want, timeout, s.events(), s.cm.Stats())
	}
	return cmEvent{}
}

// startSide starts a cmcore CM on B's rxe0, dropping the first drop[attr]
// sends of each attribute.
func startSide(t *testing.T, drop map[uint16]int) *side {
	t.Helper()
	devs, err := umad.Discover(umad.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var dev hw.Device
	for _, d := range devs {
		if d.Name() == "rxe0" {
			dev = d
		}
	}
	if dev == nil {
		t.Fatalf("no rxe0 in %v", devs)
	}
	f := &filter{t: t, t0: time.Now(), drop: map[uint16]int{}, sent: map[uint16]int{},
		recv: map[uint16]int{}, lost: map[uint16]int{}}
	for a, n := range drop {
		f.drop[a] = n
	}
	if d, err := os.OpenFile("/out/mads.txt", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		f.dumps = d
		t.Cleanup(func() { d.Close() })
	}
	s := &side{dev: dev, f: f, ch: make(chan cmEvent, 64)}
	s.cm = cmcore.New(filterDev{dev, f}, cmcore.Options{})
	if err := s.cm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t.Logf("stats %+v; sent %v recv %v dropped %v", s.cm.Stats(), names(f.sent), names(f.recv), names(f.lost))
		if err := s.cm.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func names(m map[uint16]int) map[string]int {
	out := map[string]int{}
	for a, n := range m {
		out[attrName(a)] = n
	}
	return out
}

// ---- what an rdma_cm peer expects on the wire ----

// tcpSID is the service ID of an rdma_cm RDMA_PS_TCP listener on port.
func tcpSID(port uint16) uint64 { return 0x0000000001060000 | uint64(port) }

const cmaHdrSize = 36

// cmaHdr is rdma_cm's struct cma_hdr for IPv4 (cma_format_hdr): version 0,
// IP version 4 in the high nibble, the source port, then source and
// destination addresses in 16-byte fields with IPv4 in the last 4 bytes.
// The user's private data follows.
func cmaHdr(src, dst netip.Addr, srcPort uint16, user string) []byte {
	b := make([]byte, cmaHdrSize+len(user))
	b[1] = 4 << 4
	b[2], b[3] = byte(srcPort>>8), byte(srcPort)
	s4, d4 := src.As4(), dst.As4()
	copy(b[16:20], s4[:])
	copy(b[32:36], d4[:])
	copy(b[cmaHdrSize:], user)
	return b
}

// parseCMAHdr returns the header's addresses and source port.
func parseCMAHdr(pd []byte) (ipver byte, src, dst netip.Addr, srcPort uint16, ok bool) {
	if len(pd) < cmaHdrSize {
		return 0, src, dst, 0, false
	}
	src = netip.AddrFrom4([4]byte(pd[16:20]))
	dst = netip.AddrFrom4([4]byte(pd[32:36]))
	return pd[1] >> 4, src, dst, uint16(pd[2])<<8 | uint16(pd[3]), pd[0] == 0
}

// localGID returns B's GID on rxe0 of the kind of peer.
func (s *side) localGID(t *testing.T, peer hw.GID) hw.GIDEntry {
	t.Helper()
	a, err := s.dev.Ports()[0].Attr()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range a.GIDs {
		if e.GID.Addr().IsLinkLocalUnicast() == peer.Addr().IsLinkLocalUnicast() &&
			e.GID.Addr().Is4In6() == peer.Addr().Is4In6() {
			return e
		}
	}
	t.Fatalf("rxe0 has no GID like %v: %v", peer, a.GIDs)
	return hw.GIDEntry{}
}

// path is what rdma_cm builds on RoCE (cma_resolve_iboe_route): GIDs from
// the addresses, no LIDs, hop limit 64, P_Key 0xffff, MTU 1024, packet
// life time 18.
func (s *side) path(t *testing.T, to hw.GID) *cmcore.PathRecord {
	g := s.localGID(t, to)
	return &cmcore.PathRecord{
		SGID: g.GID, DGID: to, GIDType: g.Type, HopLimit: 64, PKey: 0xffff, MTU: 3,
		PacketLifeTime: 18, Reversible: true, NumbPath: 1,
	}
}

// qpnSeq hands out fake QPNs, different for every connection in a run:
// the kernel REJects (10, stale) a REQ reusing a (QPN, CA GUID) it still
// has a connection for.
var qpnSeq atomic.Uint32

func init() { qpnSeq.Store(uint32(os.Getpid()&0xff)<<12 | 0x100) }

func nextQPN() uint32 { return qpnSeq.Add(1) & 0xFFFFFF }

func reqParams(path *cmcore.PathRecord, sid uint64, pd []byte) *cmcore.REQParams {
	return &cmcore.REQParams{
		Primary: path, ServiceID: sid, QPN: nextQPN(), QPType: cmcore.QPTypeRC,
		StartingPSN: 0x2468ac, ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 16,
		RetryCount: 7, RNRRetryCount: 7, MaxCMRetries: 15, PrivateData: pd,
	}
}

func checkState(t *testing.T, who string, id *cmcore.ID, want cmcore.State) {
	t.Helper()
	if st, _ := id.State(); st != want {
		t.Errorf("%s: state %v, want %v", who, st, want)
	}
}

// lines returns the non-empty lines of s that contain sub.
func lines(s, sub string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			out = append(out, sc.Text())
		}
	}
	return out
}
