package abi_test

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
)

// A device layer decodes each write() and answers with the kernel's errno.
func ExampleParseCommand() {
	// NOTIFY(COMM_EST) for id 42, as libibcm writes it.
	write := []byte{
		0x04, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, // cmd 4, in 8, out 0
		0x2a, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, // id 42, event 4
	}
	h, cmd, err := abi.ParseCommand(write)
	var errno unix.Errno
	if errors.As(err, &errno) {
		return // fail the write() with errno
	}
	switch c := cmd.(type) {
	case *abi.Notify:
		fmt.Println(h, "id", c.ID, "event", c.Event)
	}

	_, _, err = abi.ParseCommand(write[:7])
	fmt.Println(errors.Is(err, unix.EINVAL))
	// Output:
	// NOTIFY in=8 out=0 id 42 event COMM_EST
	// true
}

// GET_EVENT copies a 192-byte ib_ucm_event_resp to the caller's response
// pointer; the union member follows the event type.
func ExampleEventResp() {
	r := abi.EventResp{UID: 0x1000, ID: 3, Event: abi.CMREJReceived, Present: abi.PresData}
	r.U.SetREJ(abi.REJEventResp{Reason: 28})
	var buf [abi.EventRespSize]byte
	r.Encode(buf[:])
	fmt.Println(len(buf), r.Event, r.Present, r.U.REJ().Reason)
	// Output: 192 REJ_RECEIVED DATA 28
}
