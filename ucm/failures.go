package ucm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cuse"
)

// Failed commands: each is counted by errno on its device and logged at
// debug level with who sent it and the whole cause chain (the errno alone
// is all the client sees). The log is rate-limited per device by a token
// bucket, so a client that fails in a loop (a nonblocking GET_EVENT polled
// with nothing queued: EAGAIN) cannot flood it; what the bucket holds back
// is counted and reported with the next line that passes. None of this
// runs for a command that succeeds.

const (
	failLogBurst    = 20              // lines a device may log at once
	failLogInterval = 1 * time.Second // and then one line per interval
)

// failures is one device's record of failed commands.
type failures struct {
	log *slog.Logger
	now func() time.Time

	mu         sync.Mutex
	counts     map[string]uint64 // errno name → failed commands
	tokens     float64
	last       time.Time // the bucket's last refill
	suppressed uint64    // lines held back since the last one logged
}

func newFailures(log *slog.Logger) *failures {
	return &failures{log: log, now: time.Now, counts: make(map[string]uint64), tokens: failLogBurst}
}

// errnoName is the errno the client is answered for err, as cuse's
// dispatcher computes it: the wrapped unix.Errno, EINTR for an interrupted
// call, ECONNABORTED for one the daemon's shutdown (or a removed device's)
// ended, else EIO.
func errnoName(ctx context.Context, err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno %d", int(e))
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		if cuse.ShuttingDown(ctx) {
			return "ECONNABORTED"
		}
		return "EINTR"
	}
	return "EIO"
}

// record counts one failed command and logs it if the bucket allows. cmd
// is the command's name ("-" when the header could not be read), id the
// id it named (hasID false for none).
func (fl *failures) record(ctx context.Context, f *file, tid int, cmd string, id uint32, hasID bool, err error) {
	name := errnoName(ctx, err)
	logIt := fl.log.Enabled(ctx, slog.LevelDebug)
	fl.mu.Lock()
	fl.counts[name]++
	var suppressed uint64
	if logIt {
		now := fl.now()
		if !fl.last.IsZero() {
			fl.tokens += float64(now.Sub(fl.last)) / float64(failLogInterval)
			if fl.tokens > failLogBurst {
				fl.tokens = failLogBurst
			}
		}
		fl.last = now
		if fl.tokens >= 1 {
			fl.tokens--
			suppressed, fl.suppressed = fl.suppressed, 0
		} else {
			fl.suppressed++
			logIt = false
		}
	}
	fl.mu.Unlock()
	if !logIt {
		return
	}
	if suppressed > 0 {
		fl.log.Debug("ucm: failed-command messages suppressed", "suppressed", suppressed)
	}
	attrs := []any{"cmd", cmd, "errno", name, "pid", f.pid, "comm", f.comm}
	if tid != f.pid {
		attrs = append(attrs, "thread", tid)
	}
	if hasID {
		attrs = append(attrs, "id", id)
	}
	attrs = append(attrs, "err", err.Error())
	fl.log.Debug("ucm: command failed", attrs...)
}

// snapshot returns a copy of the per-errno counts.
func (fl *failures) snapshot() map[string]uint64 {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.counts) == 0 {
		return nil
	}
	return maps.Clone(fl.counts)
}

// Errors returns how many commands failed on the device, by errno name
// ("EINVAL"), since it was made; nil if none did.
func (d *Device) Errors() map[string]uint64 { return d.fails.snapshot() }

// commandName and commandID describe a command for the failed-command
// log: its name, and the id it names (false for CREATE_ID, which names
// none, and for a command that could not be parsed).
func commandName(data []byte, hdr abi.Header) string {
	if len(data) < abi.HeaderSize {
		return "-"
	}
	return hdr.Cmd.String() // Cmd(N) for an unknown command
}

func commandID(cmd abi.Command) (uint32, bool) {
	switch c := cmd.(type) {
	case *abi.DestroyID:
		return c.ID, true
	case *abi.AttrID:
		return c.ID, true
	case *abi.InitQPAttr:
		return c.ID, true
	case *abi.Listen:
		return c.ID, true
	case *abi.Notify:
		return c.ID, true
	case *abi.PrivateData:
		return c.ID, true
	case *abi.REQ:
		return c.ID, true
	case *abi.REP:
		return c.ID, true
	case *abi.Info:
		return c.ID, true
	case *abi.MRA:
		return c.ID, true
	case *abi.LAP:
		return c.ID, true
	case *abi.SIDRREQ:
		return c.ID, true
	case *abi.SIDRREP:
		return c.ID, true
	}
	return 0, false
}
