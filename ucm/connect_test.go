package ucm_test

import (
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/ucm"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSmokeConnect(t *testing.T) {
	d := conformance.NewFake(t, ucm.Limits{})
	a, err := conformance.NewClient(d, false)
	must(t, err)
	b, err := conformance.NewClient(d, false)
	must(t, err)
	path, _ := d.LoopbackPath()
	lid, err := b.CreateID(0xb)
	must(t, err)
	must(t, b.Listen(lid, 0x1000, 0))
	aid, err := a.CreateID(0xa)
	must(t, err)
	must(t, a.SendREQ(a.Req(aid, 0x1000, path, 0x100)))
	ev, err := b.Expect(abi.CMReqReceived, time.Second)
	must(t, err)
	t.Logf("%+v", ev.EventResp)
}
