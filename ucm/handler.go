package ucm

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"golang.org/x/sys/unix"
)

// handle is every CM id's event handler (ib_ucm_event_handler). cmcore
// calls it with no CM lock held; it takes the file's mutex only briefly
// and never blocks, never destroys an id itself (design.md rule 3).
//
// Its outcome is Keep, except for a new connection the file could not take
// (no id or no room in the queue, whatever the reason): cmcore.Destroy,
// which answers the peer with REJ "consumer defined" (28), as the kernel's
// handler did by returning non-zero.
func (d *Device) handle(ev *cmcore.Event) cmcore.Outcome {
	owner := ctxOf(ev.ID)
	newConn := ev.Type == cmcore.EventREQReceived || ev.Type == cmcore.EventSIDRREQReceived
	if newConn {
		owner = ctxOf(ev.Listener)
	}
	if owner == nil {
		return cmcore.Keep
	}
	f := owner.file
	e := makeEvent(ev)
	if newConn {
		child, err := f.newChild(ev.ID)
		if err != nil {
			return f.reject(owner, err)
		}
		e.child = child
		e.resp.ID = child.id
		if ev.Type == cmcore.EventREQReceived {
			f.d.setupBegins(child, setupStamp())
		}
	}
	if ev.Type == cmcore.EventRTUReceived || ev.Type == cmcore.EventUserEstablished {
		f.d.setupDone(owner)
	}
	if err := f.enqueue(owner, e); err != nil {
		if e.child != nil {
			f.forget(e.child)
			return f.reject(owner, err)
		}
		// Design.md rule 7: an event that cannot be queued is dropped.
		if !errors.Is(err, errGone) {
			f.warn("ucm: dropping event", "id", owner.id, "event", abi.CMEvent(ev.Type), "err", err)
		}
	}
	return cmcore.Keep
}

// reject answers a new connection for listener that cannot be taken, why
// being only logged: the answer is always REJ 28 (cmcore.Destroy).
func (f *file) reject(listener *ucmCtx, why error) cmcore.Outcome {
	if !errors.Is(why, errGone) {
		f.warn("ucm: rejecting new connection", "listener", listener.id, "err", why)
	}
	return cmcore.Destroy
}

// errGone is why events for a closed file or a destroyed id are dropped.
var errGone = fmt.Errorf("ucm: id or file gone: %w", unix.ENOENT)

// warn logs a lost event: the first of the device's in a minute at Warn,
// the rest at Debug. A client that never reads its events, or one that
// opens file after file to be refused a connection on each, cannot flood
// the log; the limits' refusals behind most losses are counted in status
// either way.
func (f *file) warn(msg string, args ...any) {
	d := f.d
	if d.lossWarn.level(d.budget.now()) == slog.LevelWarn {
		d.log.Warn(msg, append(args, "note", "further losses on this device are logged at debug level for a minute")...)
		return
	}
	d.log.Debug(msg, args...)
}
