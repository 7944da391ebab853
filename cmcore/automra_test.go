package cmcore

import (
	"bytes"
	"testing"

	"github.com/ucmd/ucmd/cmcore/wire"
)

// TestAutoMRA: with Options.AutoMRA a duplicate REQ whose connection waits
// in REQ_RCVD is answered with an MRA of that service timeout, the id stays
// in REQ_RCVD, and the application's own SendMRA, SendREP and SendREJ then
// behave as without it (the MRA they send, their states). Without the
// option the duplicate is dropped, as on Linux (TestDuplicateREQ).
func TestAutoMRA(t *testing.T) {
	if New(&fakeDev{}, Options{AutoMRA: 0x80 | 18}).autoMRA != 18 {
		t.Fatal("AutoMRA is not the 5-bit service timeout")
	}
	auto := func(t *testing.T) (*harness, *ID) {
		h := newHarness(t)
		h.cm.autoMRA = 21
		id := h.reach("REQ_RCVD")
		h.inject(0x77, peerREQ(0x1234))
		m := one[*wire.MRA](t, h.sent())
		if m.ServiceTimeout != 21 || m.MessageMRAed != wire.MessageREQ || m.LocalCommID != id.localID || m.RemoteCommID != peerComm || !bytes.Equal(m.PrivateData, make([]byte, len(m.PrivateData))) {
			t.Errorf("automatic MRA %+v", m)
		}
		if evs := h.takeEvents(); len(evs) != 0 {
			t.Errorf("duplicate REQ gave events %v", evs)
		}
		if s, _ := id.State(); s != StateREQRcvd {
			t.Fatalf("state %v after the automatic MRA, want REQ_RCVD", s)
		}
		return h, id
	}
	t.Run("off", func(t *testing.T) {
		h := newHarness(t)
		h.reach("REQ_RCVD")
		h.inject(0x77, peerREQ(0x1234))
		none(t, h.sent())
	})
	t.Run("SendMRA", func(t *testing.T) {
		h, id := auto(t)
		must(t, id.SendMRA(19, []byte("app")))
		if m := one[*wire.MRA](t, h.sent()); m.ServiceTimeout != 19 || string(m.PrivateData[:3]) != "app" {
			t.Errorf("application's MRA %+v", m)
		}
		h.inject(0x77, peerREQ(0x1234)) // now the application's MRA answers
		if m := one[*wire.MRA](t, h.sent()); m.ServiceTimeout != 19 {
			t.Errorf("resent MRA %+v, want the application's", m)
		}
	})
	t.Run("SendREP", func(t *testing.T) {
		h, id := auto(t)
		must(t, id.SendREP(&REPParams{QPN: localQPN, StartingPSN: 0x4000}))
		one[*wire.REP](t, h.sent())
		if s, _ := id.State(); s != StateREPSent {
			t.Errorf("state %v after REP", s)
		}
		h.inject(0x77, peerREQ(0x1234)) // REP_SENT: dropped, as ever
		none(t, h.sent())
	})
	t.Run("SendREJ", func(t *testing.T) {
		h, id := auto(t)
		must(t, id.SendREJ(wire.REJConsumerDefined, nil, nil))
		if m := one[*wire.REJ](t, h.sent()); m.MessageRejected != wire.MessageREQ {
			t.Errorf("REJ %+v", m)
		}
		if s, _ := id.State(); s != StateIdle {
			t.Errorf("state %v after REJ", s)
		}
	})
}
