package daemon_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
)

type attrLog struct {
	mu  sync.Mutex
	got []seenAttr
}

type seenAttr struct {
	at   time.Time
	what string
}

func (l *attrLog) ObserveMAD(ev *cmcore.MADEvent) {
	h, err := wire.DecodeHeader(ev.MAD)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, seenAttr{ev.Time, ev.Device.Name() + " " + ev.Dir.String() + " " + wire.AttrName(h.AttrID)})
}

// take returns what was seen in the order of the events' times: a send is
// observed after the endpoint took it, so on loopback its receipt may be
// observed first.
func (l *attrLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slices.Clone(l.got)
	slices.SortStableFunc(s, func(a, b seenAttr) int { return a.at.Compare(b.at) })
	var out []string
	for _, x := range s {
		out = append(out, x.what)
	}
	return out
}

// Config.Observers: every observer sees every CM MAD of the served
// devices, in the order given (a REQ a listener rejects, on loopback).
func TestObservers(t *testing.T) {
	var a, b attrLog
	f := daemontest.New(t)
	run := t.TempDir()
	start(t, f, daemon.Config{SimDevices: 1, RuntimeDir: run, Observers: []cmcore.Observer{&a, &b}})
	newPair(t, f, run).reject(t)
	want := []string{"sim0 sent REQ", "sim0 received REQ", "sim0 sent REJ", "sim0 received REJ"}
	for name, l := range map[string]*attrLog{"first": &a, "second": &b} {
		got := l.take()
		if len(got) != len(want) {
			t.Fatalf("%s observer saw %q, want %q", name, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s observer: MAD %d is %q, want %q", name, i, got[i], want[i])
			}
		}
	}
}
