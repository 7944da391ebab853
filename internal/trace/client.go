package trace

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"
)

// Stream reads Events from a trace connection.
type Stream struct {
	c   net.Conn
	br  *bufio.Reader
	dec *json.Decoder
}

// Dial connects to the trace socket of the daemon whose runtime directory
// is dir, sends req and returns once the daemon has subscribed it: every
// MAD from then on is streamed (or counted as lost).
func Dial(ctx context.Context, dir string, req Request) (*Stream, error) {
	path := filepath.Join(dir, SocketName)
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to ucmd's trace socket %s (is ucmd serve running, and are you root or in its --status-group?): %w", path, err)
	}
	b, err := json.Marshal(req)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("trace request: %w", err)
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		c.Close()
		return nil, fmt.Errorf("send trace request to %s: %w", path, err)
	}
	br := bufio.NewReaderSize(c, 64<<10)
	s := &Stream{c: c, br: br, dec: json.NewDecoder(br)}
	var hello struct {
		Subscribed bool   `json:"subscribed"`
		Error      string `json:"error"`
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetReadDeadline(dl)
	}
	err = s.dec.Decode(&hello)
	c.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		c.Close()
		return nil, fmt.Errorf("trace socket %s: %w", path, err)
	case hello.Error != "":
		c.Close()
		return nil, fmt.Errorf("ucmd refused the trace: %s", hello.Error)
	case !hello.Subscribed:
		c.Close()
		return nil, fmt.Errorf("trace socket %s: unexpected answer", path)
	}
	return s, nil
}

// NewReader reads Events from r: a saved `ucmd trace --json` stream.
func NewReader(r io.Reader) *Stream {
	br := bufio.NewReader(r)
	return &Stream{br: br, dec: json.NewDecoder(br)}
}

// Buffered is how many bytes of the stream have been read but not
// decoded: 0 means the next Next may wait.
func (s *Stream) Buffered() int {
	// The decoder keeps the newline after the last value.
	rest, _ := io.ReadAll(s.dec.Buffered())
	return len(bytes.TrimSpace(rest)) + s.br.Buffered()
}

// errorLine is what the daemon answers a bad request with.
type errorLine struct {
	Event
	Error string `json:"error"`
}

// Next returns the next event; io.EOF at the end of the stream.
func (s *Stream) Next() (Event, error) {
	var e errorLine
	if err := s.dec.Decode(&e); err != nil {
		if errors.Is(err, io.EOF) {
			return Event{}, io.EOF
		}
		if s.c != nil && errors.Is(err, net.ErrClosed) {
			return Event{}, io.EOF
		}
		return Event{}, fmt.Errorf("read trace: %w", err)
	}
	if e.Error != "" {
		return Event{}, fmt.Errorf("ucmd refused the trace: %s", e.Error)
	}
	return e.Event, nil
}

// Close ends the subscription.
func (s *Stream) Close() error {
	if s.c == nil {
		return nil
	}
	return s.c.Close()
}
