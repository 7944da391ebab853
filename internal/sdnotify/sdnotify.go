// Package sdnotify tells systemd about the daemon's state (sd_notify(3)):
// one datagram per call to the AF_UNIX socket named by $NOTIFY_SOCKET, a
// path or, with a leading '@', an abstract name. Without the variable (not
// started by systemd, or not Type=notify) every call does nothing.
package sdnotify

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"time"
)

// Standard messages.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
	// Watchdog is the keep-alive of a unit with WatchdogSec=.
	Watchdog = "WATCHDOG=1"
)

// WatchdogInterval is the unit's WatchdogSec=, within which systemd
// expects a Watchdog message, as sd_watchdog_enabled(3) reads it:
// $WATCHDOG_USEC, unless $WATCHDOG_PID names another process (the
// variables were inherited). ok is false without a watchdog; a value
// systemd would not set is an error.
func WatchdogInterval() (d time.Duration, ok bool, err error) {
	return watchdogInterval(os.Getenv("WATCHDOG_USEC"), os.Getenv("WATCHDOG_PID"), os.Getpid())
}

func watchdogInterval(usec, pid string, self int) (time.Duration, bool, error) {
	if usec == "" {
		return 0, false, nil
	}
	if pid != "" {
		p, err := strconv.Atoi(pid)
		if err != nil || p <= 0 {
			return 0, false, fmt.Errorf("sdnotify: WATCHDOG_PID %q is not a process id", pid)
		}
		if p != self {
			return 0, false, nil
		}
	}
	u, err := strconv.ParseUint(usec, 10, 64)
	if err != nil || u == 0 || u > uint64(math.MaxInt64/int64(time.Microsecond)) {
		return 0, false, fmt.Errorf("sdnotify: WATCHDOG_USEC %q is not a positive number of microseconds", usec)
	}
	return time.Duration(u) * time.Microsecond, true, nil
}

// Notify sends state (newline-separated VAR=value lines) to systemd. It
// reports whether a message was sent: false, nil when $NOTIFY_SOCKET is unset.
func Notify(state string) (bool, error) {
	return notify(os.Getenv("NOTIFY_SOCKET"), state)
}

func notify(socket, state string) (bool, error) {
	if socket == "" {
		return false, nil
	}
	if socket[0] != '/' && socket[0] != '@' {
		return false, errors.New("sdnotify: NOTIFY_SOCKET is neither a path nor an abstract name")
	}
	addr := &net.UnixAddr{Name: socket, Net: "unixgram"}
	if socket[0] == '@' {
		addr.Name = "\x00" + socket[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, err
	}
	return true, nil
}
