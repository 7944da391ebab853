package abi_test

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
)

// A device layer decodes each write() and answers with the kernel's errno.
func ExampleParseCommand() {
	// NOTIFY(COMM_EST) for id 42, as libibcm writes it: the header's
	// cmd (u32), in and out (u16), then id and event (u32), in the host's
	// byte order (04 00 00 00 08 00 00 00 2a 00 00 00 04 00 00 00 on x86).
	ne := binary.NativeEndian
	write := ne.AppendUint32(nil, 4)
	write = ne.AppendUint16(write, 8)
	write = ne.AppendUint16(write, 0)
	write = ne.AppendUint32(write, 42)
	write = ne.AppendUint32(write, 4)
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
