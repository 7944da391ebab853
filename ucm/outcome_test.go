package ucm_test

import (
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/ucm"
)

// A REQ whose new connection the listener's file cannot hold (no id left:
// ENOMEM inside ucm) is answered with REJ 28, not dropped: the handler's
// outcome is cmcore.Destroy whatever the error was (issue 16.3; with error
// returns, a %w in place of a %v would have made this a silent drop).
func TestREQRejectedWhenChildIDCannotBeCreated(t *testing.T) {
	e := newEnv(t, &fakedut.Options{Limits: ucm.Limits{MaxIDs: 1}}) // b: the listener only
	id := e.req(t, 0xa0)
	rej, err := e.a.Expect(abi.CMREJReceived, wait)
	must(t, err)
	if rej.ID != id || rej.U.REJ().Reason != 28 {
		t.Errorf("REJ for id %d reason %d, want %d and 28", rej.ID, rej.U.REJ().Reason, id)
	}
	if ok, err := e.b.F.WaitReadable(50 * time.Millisecond); err != nil || ok {
		t.Errorf("listener's file readable (%v, %v), want no event", ok, err)
	}
	if n := e.d.IDs.Len(); n != 2 { // listener and a's id
		t.Errorf("%d ids, want 2", n)
	}
}
