package ucm

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
)

// A limit's refusals are logged at Warn at most once a minute: the first,
// then the first a minute after the last Warn; each limit on its own
// clock. Every one is counted.
func TestRefusalWarnedOnceAMinute(t *testing.T) {
	var logs bytes.Buffer
	b := NewBudget(Limits{UserIDs: 1}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	now := time.Unix(1e9, 0)
	b.now = func() time.Time { return now }
	if err := b.take(7, idCharge(false)); err != nil {
		t.Fatal(err)
	}
	levels := func() string {
		var ls []string
		for l := range strings.Lines(logs.String()) {
			level, _, _ := strings.Cut(strings.TrimPrefix(l[strings.Index(l, "level="):], "level="), " ")
			limit := l[strings.Index(l, "limit=")+len("limit="):]
			limit, _, _ = strings.Cut(limit, " ")
			ls = append(ls, level+" "+limit)
		}
		logs.Reset()
		return strings.Join(ls, ", ")
	}
	for _, step := range []struct {
		after time.Duration
		l     Limit
		want  string
	}{
		{0, LimitUserIDs, "WARN --user-ids"},
		{30 * time.Second, LimitUserIDs, "DEBUG --user-ids"},
		{0, LimitMaxIDs, "WARN --max-ids"}, // its own clock
		{29 * time.Second, LimitUserIDs, "DEBUG --user-ids"},
		{time.Second, LimitUserIDs, "WARN --user-ids"}, // a minute after the first Warn
		{59 * time.Second, LimitUserIDs, "DEBUG --user-ids"},
	} {
		now = now.Add(step.after)
		var err error
		if step.l == LimitUserIDs {
			err = b.take(7, idCharge(false))
		} else {
			err = b.logged(b.fileRefused(step.l, 7, 1, errGone))
		}
		if err == nil {
			t.Fatalf("%v: not refused", step.l)
		}
		if got := levels(); got != step.want {
			t.Errorf("after %v more, %v refused: logged %q, want %q", step.after, step.l, got, step.want)
		}
	}
	if got := b.Refusals(); got["user-ids"] != 5 || got["max-ids"] != 1 || len(got) != 2 {
		t.Errorf("refusals %v, want user-ids 5 and max-ids 1", got)
	}
	if u := b.User(7); u.IDs != 1 {
		t.Errorf("uid 7 holds %+v after the refusals, want its one id", u)
	}
}

// Copies past what the Go runtime's threads allow are clamped: each hung
// copy holds a thread.
func TestCopiesClamped(t *testing.T) {
	l := Limits{Copies: 1e6, UserCopies: MaxCopies + 1}.withDefaults()
	if l.Copies != MaxCopies || l.UserCopies != MaxCopies {
		t.Errorf("copies %d, user copies %d; want both %d", l.Copies, l.UserCopies, MaxCopies)
	}
}

// A uid whose files are all gone while one of its copies still hangs (a
// release after the server's shutdown grace) keeps its copy slots: its next
// file finds that copy counted against --user-copies, not a fresh count.
func TestCopySlotsOutliveTheFiles(t *testing.T) {
	b := NewBudget(Limits{UserCopies: 1}, slog.New(slog.DiscardHandler))
	if err := b.take(7, fileCharge); err != nil {
		t.Fatal(err)
	}
	s := b.copySlots(7)
	if !s.take() {
		t.Fatal("no copy slot")
	}
	b.give(7, fileCharge) // the file released, the copy still hung
	if err := b.take(7, fileCharge); err != nil {
		t.Fatal(err)
	}
	if s2 := b.copySlots(7); s2 != s || s2.take() {
		t.Error("the uid's next file got fresh copy slots, its hung copy not counted")
	}
	s.leave()
	b.give(7, fileCharge)
	if u := b.User(7); u.Files != 0 || u.Copies != 0 {
		t.Errorf("after the copy and the file: %+v", u)
	}
}

// blockingHandler blocks every record whose message starts with block
// until release closes, and says when the first such record arrived.
type blockingHandler struct {
	block   string
	entered chan struct{}
	once    *sync.Once
	release chan struct{}
}

func (h blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h blockingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.block) {
		h.once.Do(func() { close(h.entered) })
		<-h.release
	}
	return nil
}
func (h blockingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h blockingHandler) WithGroup(string) slog.Handler      { return h }

// A limit's refusal is logged once the file's lock is let go: a log
// writer that blocks (a full pipe, a slow journal) held the file's lock,
// and with it the file's commands and the watchdog's probe.
func TestRefusalLoggedOutsideTheFileLock(t *testing.T) {
	h := blockingHandler{block: "ucm: a limit refused", entered: make(chan struct{}), once: &sync.Once{}, release: make(chan struct{})}
	defer close(h.release)
	d, fh, req := openDirect(t, Config{Limits: Limits{MaxIDs: 1}, Logger: slog.New(h)})
	resp := make([]byte, abi.CreateIDRespSize)
	create := conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: uint64(uintptr(unsafe.Pointer(&resp[0])))})
	if _, err := fh.Write(context.Background(), req, create); err != nil {
		t.Fatal(err)
	}
	go fh.Write(context.Background(), req, create) // past MaxIDs: refused, its log line blocks
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the second CREATE_ID was not refused")
	}
	probed := make(chan struct{})
	go func() { d.Probe(); close(probed) }()
	select {
	case <-probed:
	case <-time.After(10 * time.Second):
		t.Fatal("Probe blocked behind a log line written under a file's lock")
	}
}
