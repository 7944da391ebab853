package ucm

import (
	"time"

	"github.com/ucmd/ucmd/abi"
)

// Observer sees how long the device's commands and its connections' setups
// take (Config.Observer): the metrics endpoint's histograms. Its methods
// run on the goroutine of the command or of the CM event, with no lock of
// the device held, concurrently; they must be safe for that and must not
// block.
//
// With no Observer the device reads no clock for it: a command costs one
// nil check, a connection a nil check per step.
type Observer interface {
	// ObserveCommand is told of every write(): its command (abi.NumCmds
	// when the write held no header of a known command), how long the
	// device took to answer it (GET_EVENT's wait for an event included),
	// and its error, nil on success.
	ObserveCommand(cmd abi.Cmd, took time.Duration, err error)
	// ObserveSetup is told of every connection that reached ESTABLISHED,
	// once: active is the side that sent the REQ, took runs from its
	// SEND_REQ (active) or from the REQ's arrival (passive) to the
	// successful SEND_RTU (active), or the RTU's arrival or the
	// COMM_EST notification (passive).
	ObserveSetup(active bool, took time.Duration)
}

// epoch is the origin of setupStamp's clock: time.Since(epoch) is
// monotonic.
var epoch = time.Now()

// setupStamp is now on a monotonic clock, never 0 (0 is "no setup under
// way" in ucmCtx.setup).
func setupStamp() int64 { return max(int64(time.Since(epoch)), 1) }

// observedCmd is the command a write()'s header names, for the
// Observer: NumCmds for none.
func observedCmd(data []byte) abi.Cmd {
	cmd := abi.Cmd(abi.NumCmds)
	if len(data) >= abi.HeaderSize {
		var h abi.Header
		h.Decode(data)
		if h.Cmd.Valid() {
			cmd = h.Cmd
		}
	}
	return cmd
}

// setupBegins stamps x's connection setup as begun at start.
func (d *Device) setupBegins(x *ucmCtx, start int64) {
	if d.obs != nil {
		x.setup.Store(start)
	}
}

// setupDone reports x's connection as ESTABLISHED, if its setup was
// stamped and not reported yet.
func (d *Device) setupDone(x *ucmCtx) {
	if d.obs == nil {
		return
	}
	if start := x.setup.Swap(0); start != 0 {
		d.obs.ObserveSetup(!x.newConn, time.Duration(setupStamp()-start))
	}
}
