package wire_test

import (
	"fmt"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
)

// Answering a received REQ nobody listens for, the way Linux's
// cm_issue_rej does: no local comm ID yet, the REQ's TID echoed.
func Example() {
	var in hw.MAD
	_ = wire.Encode(&in, 0x0000000300000abc, &wire.REQ{LocalCommID: 0x0c0ffe3a, ServiceID: 0x106270f})

	h, m, err := wire.Decode(&in)
	if err != nil {
		fmt.Println("drop:", err)
		return
	}
	req, ok := m.(*wire.REQ)
	if !ok {
		return
	}
	var out hw.MAD
	err = wire.Encode(&out, h.TID, &wire.REJ{
		RemoteCommID:    req.LocalCommID,
		MessageRejected: wire.MessageREQ,
		Reason:          wire.REJInvalidServiceID,
	})
	fmt.Printf("%v % x\n", err, out[16:36])
	// Output: <nil> 00 12 00 00 00 00 00 00 00 00 00 00 0c 0f fe 3a 00 00 00 08
}
