// Package journal fits ucmd's log lines to systemd's journal when its
// stderr is the stream the journal reads (JOURNAL_STREAM, systemd.exec(5)).
// Each line then starts with its syslog priority, "<4>" for a warning
// (sd-daemon(3)), which the journal strips and records as the entry's
// PRIORITY, so that `journalctl -p warning` finds ucmd's warnings; and it
// carries no timestamp of its own, as the journal stamps every entry.
package journal

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// IsStream reports whether f is the stream the journal reads: the device
// and inode that JOURNAL_STREAM names ("DEV:INODE"). A process started by
// systemd passes the variable on to its children, whose stderr may be
// something else; hence the comparison.
func IsStream(f *os.File) bool {
	var dev, ino uint64
	if _, err := fmt.Sscanf(os.Getenv("JOURNAL_STREAM"), "%d:%d", &dev, &ino); err != nil {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}

// Priority is the line prefix for a record of level l: err (3), warning
// (4), info (6) or debug (7).
func Priority(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "<3>"
	case l >= slog.LevelWarn:
		return "<4>"
	case l >= slog.LevelInfo:
		return "<6>"
	}
	return "<7>"
}

// DropTime is a slog.HandlerOptions.ReplaceAttr that leaves out the
// record's time.
func DropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// NewHandler returns a handler that writes each record's priority to w and
// then has inner, which writes to the same w, write the record. Every
// handler derived from it shares one lock, so no other record's line comes
// between a prefix and its line.
func NewHandler(w io.Writer, inner slog.Handler) slog.Handler {
	return &handler{Handler: inner, w: w, mu: new(sync.Mutex)}
}

type handler struct {
	slog.Handler
	w  io.Writer
	mu *sync.Mutex
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := io.WriteString(h.w, Priority(r.Level)); err != nil {
		return err
	}
	return h.Handler.Handle(ctx, r)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(as), w: h.w, mu: h.mu}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), w: h.w, mu: h.mu}
}
