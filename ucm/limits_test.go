package ucm_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/internal/syncbuf"
	"github.com/ucmd/ucmd/ucm"
	"golang.org/x/sys/unix"
)

func TestMaxIDs(t *testing.T) {
	d := fakedut.New(t, &fakedut.Options{Limits: ucm.Limits{MaxIDs: 2}})
	c, err := conformance.NewClient(d, false)
	must(t, err)
	for range 2 {
		_, err := c.CreateID(0)
		must(t, err)
	}
	_, err = c.CreateID(0)
	wantErrno(t, "third CREATE_ID", err, unix.ENOMEM)
	other, err := conformance.NewClient(d, false)
	must(t, err)
	if _, err := other.CreateID(0); err != nil {
		t.Errorf("the limit is per file: %v", err)
	}
}

// A REQ that cannot be queued is rejected (REJ 28) and leaves no id
// behind (rule 7).
func TestMaxEventsRejectsREQ(t *testing.T) {
	e := newEnv(t, &fakedut.Options{Limits: ucm.Limits{MaxEvents: 1}})
	e.req(t, 0xa0)
	e.waitReadable(t, e.b)
	second := e.req(t, 0xa1)
	rej, err := e.a.Expect(abi.CMREJReceived, wait)
	must(t, err)
	if rej.ID != second || rej.U.REJ().Reason != 28 {
		t.Errorf("REJ for id %d reason %d, want %d and 28", rej.ID, rej.U.REJ().Reason, second)
	}
	// listener, two active ids, one child.
	if n := e.d.IDs.Len(); n != 4 {
		t.Errorf("%d ids, want 4", n)
	}
	if _, err := e.b.Expect(abi.CMREQReceived, wait); err != nil {
		t.Error(err)
	}
}

// An event other than REQ that cannot be queued is dropped, not counted.
func TestMaxEventsDropsEvent(t *testing.T) {
	dropped := &dropSignal{event: "DREQ_RECEIVED", seen: make(chan struct{})}
	e := newEnv(t, &fakedut.Options{Limits: ucm.Limits{MaxEvents: 1}, Logger: slog.New(dropped)})
	a := e.req(t, 0xa0)
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	must(t, e.b.SendREP(&abi.REP{ID: req.ID, QPN: 0x200}))
	e.waitReadable(t, e.a) // the REP fills a's queue
	must(t, e.a.SendPrivateData(abi.CmdSendRTU, a, nil))
	must(t, e.a.SendPrivateData(abi.CmdSendDREQ, a, nil)) // b's DREQ: second event, b's queue has RTU
	// b reads the RTU only once the DREQ has met the full queue: read
	// sooner, it would leave room for the DREQ.
	select {
	case <-dropped.seen:
	case <-time.After(wait):
		t.Fatal("the DREQ was never dropped")
	}
	_, err = e.b.Expect(abi.CMRTUReceived, wait)
	must(t, err)
	if err := fake(e.b).SetNonblock(true); err != nil {
		t.Fatal(err)
	}
	_, err = e.b.GetEvent()
	wantErrno(t, "GET_EVENT after the dropped DREQ", err, unix.EAGAIN)
	n, err := e.b.DestroyID(req.ID)
	must(t, err)
	if n != 1 {
		t.Errorf("events_reported %d, want 1 (the RTU)", n)
	}
}

// Close destroys every id of the file at once (rule 8): an established
// connection is disconnected and the ids are freed.
func TestReleaseTearsDown(t *testing.T) {
	e := newEnv(t, nil)
	a := e.req(t, 0xa0)
	req, err := e.b.Expect(abi.CMREQReceived, wait)
	must(t, err)
	must(t, e.b.SendREP(&abi.REP{ID: req.ID, QPN: 0x200}))
	_, err = e.a.Expect(abi.CMREPReceived, wait)
	must(t, err)
	must(t, e.a.SendPrivateData(abi.CmdSendRTU, a, nil))
	_, err = e.b.Expect(abi.CMRTUReceived, wait)
	must(t, err)
	must(t, e.a.Close())
	if n := e.d.IDs.Len(); n != 2 {
		t.Errorf("%d ids after close, want b's 2", n)
	}
	if _, err := e.b.Expect(abi.CMDREQReceived, wait); err != nil {
		t.Error(err)
	}
	must(t, e.b.Close())
	if n := e.d.IDs.Len(); n != 0 {
		t.Errorf("%d ids after both closed", n)
	}
}

// dropSignal is a log handler that closes seen once ucm logs that it
// dropped an event of the given type.
type dropSignal struct {
	event string
	once  sync.Once
	seen  chan struct{}
}

func (h *dropSignal) Enabled(context.Context, slog.Level) bool { return true }

func (h *dropSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "ucm: dropping event" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "event" && a.Value.String() == h.event {
			h.once.Do(func() { close(h.seen) })
		}
		return true
	})
	return nil
}

func (h *dropSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *dropSignal) WithGroup(string) slog.Handler      { return h }

// Lost events are logged at Warn once a minute per device, not once per
// file: a user at its id limit that opens a listening file after another
// and has each refused a connection wrote one Warn line a file.
func TestLostEventWarnsSpaced(t *testing.T) {
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// UserIDs 3: newEnv's listener on b and the active id below hold 2.
	e := newEnv(t, &fakedut.Options{Limits: ucm.Limits{UserIDs: 3}, Logger: log})
	a, err := e.a.CreateID(0xa)
	must(t, err)
	const n = 20
	for i := range n {
		x, err := conformance.NewClient(e.d, false)
		must(t, err)
		l, err := x.CreateID(1)
		must(t, err)
		sid := uint64(0x9000 + i)
		must(t, x.Listen(l, sid, 0))
		must(t, e.a.SendREQ(e.a.REQ(a, sid, e.path, 0x100)))
		if _, err := e.a.Expect(abi.CMREJReceived, wait); err != nil {
			t.Fatal(err)
		}
		must(t, x.Close())
	}
	if got := strings.Count(logs.String(), `level=WARN msg="ucm: rejecting new connection"`); got != 1 {
		t.Errorf("%d connections refused on %d files: %d Warn lines, want 1\n%s", n, n, got, logs.String())
	}
}
