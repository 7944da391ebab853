package cmcore

import (
	"bytes"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
)

func TestConvertToMs(t *testing.T) {
	for x, want := range map[uint8]uint64{0: 1, 8: 1, 14: 64, 16: 256, 18: 1024, 20: 4096, 22: 16384, 24: 65536, 31: 8388608} {
		if got := convertToMs(x); got != want {
			t.Errorf("convertToMs(%d) = %d, want %d", x, got, want)
		}
	}
}

func TestAckTimeout(t *testing.T) {
	cases := []struct{ ackDelay, plt, want uint8 }{
		{16, 18, 19}, // ib-cm.md §4.3 example
		{15, 14, 16},
		{0, 0, 2},
		{20, 3, 20},
		{20, 18, 21},
		{31, 31, 31}, // clamp
	}
	for _, c := range cases {
		if got := ackTimeout(c.ackDelay, c.plt); got != c.want {
			t.Errorf("ackTimeout(%d, %d) = %d, want %d", c.ackDelay, c.plt, got, c.want)
		}
	}
}

// sentTimes advances the fake clock step by step for d and records when
// each MAD went out, relative to the start.
func (h *harness) sentTimes(d, step time.Duration) (times []time.Duration, msgs []wire.Message) {
	start := h.clk.Now()
	for el := time.Duration(0); el <= d; el += step {
		for _, m := range h.sent() {
			times = append(times, h.clk.Now().Sub(start))
			msgs = append(msgs, m)
		}
		h.clk.Advance(step)
	}
	return
}

// wantTimes fails t unless the transmissions happened at want.
func wantTimes(t *testing.T, what string, times, want []time.Duration) {
	t.Helper()
	if len(times) != len(want) {
		t.Fatalf("%s at %v, want %v", what, times, want)
	}
	for i := range want {
		if times[i] != want[i] {
			t.Errorf("%s %d at %v, want %v", what, i, times[i], want[i])
		}
	}
}

// TestREQRetransmitAndTimeout: REQ goes out 1 + MaxCMRetries times,
// timeout_ms = 2·ms(plt) + ms(RemoteCMResponseTimeout) apart, identical
// bytes, then REQ_ERROR (status 20) and IDLE, no REJ.
func TestREQRetransmitAndTimeout(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	must(t, id.SendREQ(testREQParams())) // plt 14, resp timeout 16, 3 retries
	const interval = 2*64*time.Millisecond + 256*time.Millisecond
	times, msgs := h.sentTimes(5*interval, time.Millisecond)
	want := []time.Duration{0, interval, 2 * interval, 3 * interval}
	if len(times) != len(want) {
		t.Fatalf("REQ sent at %v, want %v", times, want)
	}
	for i := range want {
		if times[i] != want[i] {
			t.Errorf("transmission %d at %v, want %v", i, times[i], want[i])
		}
		if _, ok := msgs[i].(*wire.REQ); !ok {
			t.Errorf("transmission %d is %T", i, msgs[i])
		}
	}
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREQError || evs[0].SendStatus != WCRespTimeout {
		t.Fatalf("events %+v, want one REQ_ERROR status 20", evs)
	}
	if s, _ := id.State(); s != StateIdle {
		t.Errorf("state %v, want IDLE", s)
	}
	id.Destroy() // IDLE: nothing sent
	none(t, h.sent())
}

// TestREQRetriesAreTheCallersU8: as ib_send_cm_req, the REQ goes out
// 1 + MaxCMRetries times for any u8 MaxCMRetries, and the QP's RetryCount
// is the caller's too (INIT_QP_ATTR's RTS retry_cnt); only the REQ's
// fields are cut to their 4 and 3 bits.
func TestREQRetriesAreTheCallersU8(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	p := testREQParams()
	p.MaxCMRetries, p.RetryCount = 17, 9
	must(t, id.SendREQ(p))
	const interval = 2*64*time.Millisecond + 256*time.Millisecond
	times, msgs := h.sentTimes(20*interval, time.Millisecond)
	if len(times) != 18 {
		t.Errorf("REQ sent %d times with MaxCMRetries 17, want 18", len(times))
	}
	if req, ok := msgs[0].(*wire.REQ); !ok || req.MaxCMRetries != 17&0xF || req.RetryCount != 9&7 {
		t.Errorf("REQ %+v, want Max CM Retries 1 and Retry Count 1 on the wire", msgs[0])
	}
	if id.retryCount != 9 {
		t.Errorf("retry count kept for the QP: %d, want 9", id.retryCount)
	}
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventREQError {
		t.Errorf("events %+v, want one REQ_ERROR", evs)
	}
}

// TestRetransmitWaitStartsWhenSendReturns: a REQ whose send blocks for
// longer than its timeout (a umad write while the kernel resolves the
// peer's MAC) is not retransmitted meanwhile; its first wait starts when
// the send returns, as the MAD layer's starts at the send's completion.
func TestRetransmitWaitStartsWhenSendReturns(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	const interval = 2*64*time.Millisecond + 256*time.Millisecond // testREQParams
	const block = time.Second                                     // more than two intervals
	first := true
	h.port.ep.sending = func() {
		if first { // the first transmission only; the clock runs on this goroutine
			first = false
			h.clk.Advance(block)
		}
	}
	start := h.clk.Now()
	must(t, id.SendREQ(testREQParams()))
	if got := h.sent(); len(got) != 1 {
		t.Fatalf("%d transmissions while the first send blocked, want 1 (%v)", len(got), got)
	}
	if st := h.cm.Stats(); st.Retransmitted != 0 {
		t.Fatalf("stats %+v: retransmitted while the first send blocked", st)
	}
	sentAt := h.clk.Now().Sub(start)
	if sentAt != block {
		t.Fatalf("first send returned at %v, want %v", sentAt, block)
	}
	times, _ := h.sentTimes(4*interval, time.Millisecond)
	wantTimes(t, "retransmission after the send returned", times, []time.Duration{interval, 2 * interval, 3 * interval})
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventREQError {
		t.Fatalf("events %+v, want one REQ_ERROR", evs)
	}
}

// TestMRAWhileSendBlocks: an MRA that arrives while the REQ's send still
// blocks sets the wait; the send's return does not start a second one.
func TestMRAWhileSendBlocks(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	first := true
	h.port.ep.sending = func() {
		if first {
			first = false
			h.clk.Advance(100 * time.Millisecond)
			h.inject(1, &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageREQ, ServiceTimeout: 20})
		}
	}
	must(t, id.SendREQ(testREQParams()))
	h.sent()
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventMRAReceived {
		t.Fatalf("events %+v, want MRA_RECEIVED", evs)
	}
	const ext = (4096 + 128) * time.Millisecond // as in TestMRAExtendsRetransmission
	times, _ := h.sentTimes(4*ext, time.Millisecond)
	wantTimes(t, "retransmission", times, []time.Duration{ext, 2 * ext, 3 * ext})
}

func TestRetransmissionIsIdentical(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	must(t, id.SendREQ(testREQParams()))
	h.clk.Advance(400 * time.Millisecond)
	ep := h.port.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if len(ep.sent) != 2 || !bytes.Equal(ep.sent[0].mad[:], ep.sent[1].mad[:]) {
		t.Fatalf("%d transmissions, identical=%v", len(ep.sent), len(ep.sent) == 2 && ep.sent[0].mad == ep.sent[1].mad)
	}
	hdr, _ := wire.DecodeHeader(&ep.sent[0].mad)
	if uint32(hdr.TID) != id.localID {
		t.Errorf("REQ TID %#x, want the local comm ID %#x in the low 32 bits", hdr.TID, id.localID)
	}
}

// TestMRAExtendsRetransmission: after an MRA the wait becomes
// ms(ServiceTimeout) + ms(av.timeout) for the current and every later
// retry; the retry count is not reset, and a second MRA changes nothing.
func TestMRAExtendsRetransmission(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	must(t, id.SendREQ(testREQParams()))
	h.sent()
	h.clk.Advance(100 * time.Millisecond)
	h.inject(1, &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageREQ, ServiceTimeout: 20})
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventMRAReceived || evs[0].MRA.ServiceTimeout != 20 {
		t.Fatalf("events %+v", evs)
	}
	// av.timeout = plt + 1 = 15 → 128 ms; service timeout 20 → 4096 ms.
	const ext = (4096 + 128) * time.Millisecond
	h.inject(1, &wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageREQ, ServiceTimeout: 31})
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Fatalf("second MRA gave %v", evs)
	}
	times, _ := h.sentTimes(4*ext, time.Millisecond)
	wantTimes(t, "retransmission", times, []time.Duration{ext, 2 * ext, 3 * ext})
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventREQError {
		t.Fatalf("events %+v, want REQ_ERROR", evs)
	}
}

func TestREPRetransmitAndTimeout(t *testing.T) {
	h := newHarness(t)
	id := h.reach("REP_SENT") // REQ: LocalCMResponseTimeout 16 → 256 ms, 2 retries
	times, _ := h.sentTimes(2*time.Second, time.Millisecond)
	if len(times) != 2 || times[0] != 256*time.Millisecond || times[1] != 512*time.Millisecond {
		t.Fatalf("REP retransmitted at %v, want 256ms, 512ms", times)
	}
	evs := h.takeEvents()
	if len(evs) != 1 || evs[0].Type != EventREPError || evs[0].SendStatus != WCRespTimeout {
		t.Fatalf("events %+v, want REP_ERROR", evs)
	}
	if s, _ := id.State(); s != StateIdle {
		t.Errorf("state %v, want IDLE", s)
	}
}

// TestDREQTimeoutThenTimewait: DREQ_ERROR enters TIMEWAIT, and
// TIMEWAIT_EXIT follows ms(av.timeout) later.
func TestDREQTimeoutThenTimewait(t *testing.T) {
	h := newHarness(t)
	id := h.reach("DREQ_SENT")
	h.clk.Advance(4*384*time.Millisecond - time.Millisecond)
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Fatalf("early events %v", evs)
	}
	h.clk.Advance(time.Millisecond)
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventDREQError {
		t.Fatalf("events %+v, want DREQ_ERROR", evs)
	}
	if s, _ := id.State(); s != StateTimewait {
		t.Fatalf("state %v, want TIMEWAIT", s)
	}
	// Active side: av.timeout = cm_ack_timeout(REP target ack delay 15,
	// plt 14) = 16 → 256 ms.
	h.clk.Advance(255 * time.Millisecond)
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Fatalf("TIMEWAIT_EXIT too early: %v", evs)
	}
	h.clk.Advance(time.Millisecond)
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventTimewaitExit {
		t.Fatalf("events %+v, want TIMEWAIT_EXIT", evs)
	}
	if s, _ := id.State(); s != StateIdle {
		t.Errorf("state %v after timewait, want IDLE", s)
	}
}

func TestSIDRREQRetransmitAndTimeout(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	must(t, id.SendSIDRREQ(&SIDRREQParams{Path: testPath(), ServiceID: 7, TimeoutMs: 100, MaxCMRetries: 2}))
	times, _ := h.sentTimes(time.Second, time.Millisecond)
	if len(times) != 3 || times[1] != 100*time.Millisecond || times[2] != 200*time.Millisecond {
		t.Fatalf("SIDR_REQ sent at %v", times)
	}
	if evs := h.takeEvents(); len(evs) != 1 || evs[0].Type != EventSIDRREQError {
		t.Fatalf("events %+v", evs)
	}
	if s, _ := id.State(); s != StateIdle {
		t.Errorf("state %v", s)
	}
}

// TestLAPTimeoutIsSilent: Linux never reports LAP_ERROR.
func TestLAPTimeoutIsSilent(t *testing.T) {
	h := newHarness(t)
	id := h.reach("ESTABLISHED/LAP_SENT")
	h.clk.Advance(time.Hour)
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Fatalf("events %v", evs)
	}
	if s, _ := id.State(); s != StateEstablished {
		t.Fatalf("state %v", s)
	}
	// A new LAP can be sent afterwards.
	must(t, id.SendLAP(altPath(), nil))
}

// TestAnsweredRequestStopsRetransmission: each answer cancels its
// request's timer.
func TestAnsweredRequestStopsRetransmission(t *testing.T) {
	for _, st := range []string{"REP_RCVD", "ESTABLISHED/passive", "TIMEWAIT", "ESTABLISHED/LAP_IDLE", "IDLE"} {
		t.Run(st, func(t *testing.T) {
			h := newHarness(t)
			id := h.reach(st)
			if st == "IDLE" { // SIDR_REQ answered
				must(t, id.SendSIDRREQ(&SIDRREQParams{Path: testPath(), TimeoutMs: 10, MaxCMRetries: 5}))
				h.inject(1, &wire.SIDRREP{RequestID: id.localID})
				h.sent()
				h.takeEvents()
			}
			h.clk.Advance(time.Hour)
			if s := h.sent(); len(s) != 0 {
				t.Fatalf("still sending %v", s)
			}
		})
	}
}

// TestTIDs: replies carry the TID of the message they answer (§8.4).
func TestTIDs(t *testing.T) {
	h := newHarness(t)
	id := h.reach("ESTABLISHED/passive")
	h.inject(0x12345678, &wire.DREQ{LocalCommID: peerComm, RemoteCommID: id.localID, RemoteQPN: localQPN})
	must(t, id.SendDREP(nil))
	ep := h.port.ep
	ep.mu.Lock()
	hdr, _ := wire.DecodeHeader(&ep.sent[len(ep.sent)-1].mad)
	ep.mu.Unlock()
	if hdr.TID != 0x12345678 {
		t.Errorf("DREP TID %#x, want the DREQ's", hdr.TID)
	}
}

// An MRA handled while the retransmission timer has fired, its callback
// waiting for the CM's lock, leaves one chain of retransmissions, as the
// kernel's ib_modify_mad of its one pending send does: the fired timer's
// callback must not retransmit on top of the MRA's new wait.
func TestMRAWhileTheTimerFires(t *testing.T) {
	h := newHarness(t)
	id := h.newID()
	must(t, id.SendREQ(testREQParams())) // 3 retries
	h.sent()
	const interval = 2*64*time.Millisecond + 256*time.Millisecond
	const ext = (4096 + 128) * time.Millisecond // MRA service timeout 20, plus the path's ack timeout

	cm := h.cm
	cm.mu.Lock()
	advanced := make(chan struct{})
	go func() { h.clk.Advance(interval); close(advanced) }()
	for h.clk.Pending() != 0 { // popped: its callback runs once the lock is free
		time.Sleep(time.Millisecond)
	}
	var tx txn
	mra := wire.MRA{LocalCommID: peerComm, RemoteCommID: id.localID, MessageMRAed: wire.MessageREQ, ServiceTimeout: 20}
	cm.recvMRA(&tx, &rx{p: cm.ports[0], src: peerAddr, tid: 1}, &mra)
	cm.unlock(&tx)
	<-advanced
	if got := h.sent(); len(got) != 0 {
		t.Errorf("the fired timer's callback sent %d MADs after the MRA; want none", len(got))
	}
	times, _ := h.sentTimes(4*ext, time.Millisecond)
	wantTimes(t, "retransmissions after the MRA", times, []time.Duration{ext, 2 * ext, 3 * ext})
}
