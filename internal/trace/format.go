package trace

import (
	"fmt"
	"io"
	"strings"
)

// TimeFormat is the time of day of a trace line, to the microsecond.
const TimeFormat = "15:04:05.000000"

// Line is one event as `ucmd trace` prints it:
//
//	time dev:port direction type tid local-comm remote-comm service pid/process: decode
//
// The comm ids are those of the event's local end and of its peer
// ("-" when the message carries none); a loss marker is a line of its own.
func Line(ev *Event) string {
	if ev.Lost > 0 {
		return fmt.Sprintf("%s -- %d MADs lost: the trace reader was too slow --", ev.Time.Format(TimeFormat), ev.Lost)
	}
	m := ev.Decode()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-8s %-13s %-8s tid 0x%016x local %s remote %s", ev.Time.Format(TimeFormat),
		fmt.Sprintf("%s:%d", ev.Dev, ev.Port), ev.Dir, m.Name, m.TID, comm(m.LocalCommID), comm(m.RemoteCommID))
	if ev.ServiceID != 0 {
		fmt.Fprintf(&b, " sid %s", ev.ServiceID)
	}
	if ev.PID != 0 {
		fmt.Fprintf(&b, " pid %d", ev.PID)
		if ev.Comm != "" {
			fmt.Fprintf(&b, "/%s", ev.Comm)
		}
	}
	if s := m.Summary(); s != "" {
		fmt.Fprintf(&b, ": %s", s)
	}
	if ev.Reason != "" {
		fmt.Fprintf(&b, " (%s)", ev.Reason)
	}
	return b.String()
}

func comm(c uint32) string {
	if c == 0 {
		return "-         "
	}
	return fmt.Sprintf("0x%08x", c)
}

// WriteLine writes Line(ev) and a newline.
func WriteLine(w io.Writer, ev *Event) error {
	_, err := io.WriteString(w, Line(ev)+"\n")
	return err
}
