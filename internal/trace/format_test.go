package trace

import (
	"strings"
	"testing"

	"github.com/ucmd/ucmd/cmcore/wire"
)

func TestLine(t *testing.T) {
	req := testREQ()
	req.LocalCommID = commA
	ev := mad("rxe0", "sent", 1.5, commA, req)
	ev.ServiceID = 0x1234
	want := "22:40:00.001500 rxe0:1   sent          REQ      tid 0x000000000a000001 local 0x0a000001 remote -          sid 0x0000000000001234 pid 812/client: " +
		"qpn 0x000111 psn 0x001000 RC pkey 0xffff mtu 1024 resp-res 4 init-depth 2 retries 3/7 rnr 6 path fe80::5054:ff:fe12:3456 -> fe80::5054:ff:feab:cdef"
	if got := Line(&ev); got != want {
		t.Errorf("REQ line\n%q\nwant\n%q", got, want)
	}
	rej := mad("rxe1", "dropped", 0, 7, &wire.REJ{LocalCommID: commB, RemoteCommID: commA, Reason: 28, MessageRejected: 1})
	rej.Reason = "ignored"
	rej.PID = 0
	if got := Line(&rej); !strings.HasSuffix(got, "REJ      tid 0x0000000000000007 local 0x0a000001 remote 0x0b000002: reason 28 (consumer defined) for REP (ignored)") {
		t.Errorf("REJ line %q", got)
	}
	if got := Line(&Event{Time: t0, Lost: 12}); got != "22:40:00.000000 -- 12 MADs lost: the trace reader was too slow --" {
		t.Errorf("marker %q", got)
	}
}

func TestParseFilter(t *testing.T) {
	f, err := ParseFilter([]string{"dev", "rxe0", "service-id", "0x1234", "comm-id", "0x0a000001", "pid", "812"})
	if err != nil || f.Dev != "rxe0" || f.ServiceID == nil || *f.ServiceID != 0x1234 || f.CommID != commA || f.PID != 812 {
		t.Fatalf("%+v, %v", f, err)
	}
	for _, bad := range [][]string{{"dev"}, {"colour", "red"}, {"pid", "-1"}, {"comm-id", "0"}, {"sid", "x"}} {
		if _, err := ParseFilter(bad); err == nil {
			t.Errorf("ParseFilter(%q) accepted", bad)
		}
	}
}
