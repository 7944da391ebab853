// Package sdnotify tells systemd about the daemon's state (sd_notify(3)):
// one datagram per call to the AF_UNIX socket named by $NOTIFY_SOCKET, a
// path or, with a leading '@', an abstract name. Without the variable (not
// started by systemd, or not Type=notify) every call does nothing.
package sdnotify

import (
	"errors"
	"net"
	"os"
)

// Standard messages.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
)

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
